"""Test mode ``--conformance-fixtures``: the tools the official MCP conformance suite calls by
name, plus ``logging/setLevel`` and ``completion/complete``.

Off by default and refused unless the gateway is bound to loopback (``gateway.config``): these
tools touch nothing, but they are not part of the product. They are ordinary tools
(:data:`TOOLS`), registered beside the product's when the test mode is on, and the two methods
and their capabilities are an :class:`~gateway.mcp.protocol.server.Extension` of the protocol
core (:data:`EXTENSION`). Their outputs are the ones each scenario's description asks for
(https://github.com/modelcontextprotocol/conformance, ``src/scenarios/server/tools.ts``).
Fixtures that need a server-to-client round trip (sampling, elicitation, input-required results)
are not offered: a tools-only gateway does not do them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from mcp_types import CompletionsCapability, LoggingCapability
from pydantic import BaseModel, ConfigDict

from gateway.mcp.protocol.server import Extension
from gateway.tools.context import ToolContext
from gateway.tools.registry import Annotations, Tool, ToolResult

# A 1x1 red PNG and a 1-sample silent WAV.
_PNG: Final = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
_WAV: Final = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQIAAAAAAA=="

_RESULTS: Final[dict[str, dict[str, Any]]] = {
    "test_simple_text": {
        "content": [{"type": "text", "text": "This is a simple text response for testing."}]
    },
    "test_image_content": {"content": [{"type": "image", "data": _PNG, "mimeType": "image/png"}]},
    "test_audio_content": {"content": [{"type": "audio", "data": _WAV, "mimeType": "audio/wav"}]},
    "test_embedded_resource": {
        "content": [
            {
                "type": "resource",
                "resource": {
                    "uri": "test://embedded-resource",
                    "mimeType": "text/plain",
                    "text": "This is an embedded resource content.",
                },
            }
        ]
    },
    "test_multiple_content_types": {
        "content": [
            {"type": "text", "text": "Multiple content types test:"},
            {"type": "image", "data": _PNG, "mimeType": "image/png"},
            {
                "type": "resource",
                "resource": {
                    "uri": "test://mixed-content-resource",
                    "mimeType": "application/json",
                    "text": '{"test":"data","value":123}',
                },
            },
        ]
    },
    "test_error_handling": {
        "isError": True,
        "content": [{"type": "text", "text": "This tool intentionally returns an error for testing"}],
    },
    # Streams a notification and its result only: this gateway never sends a request of its own
    # (elicitation, sampling) on a response stream, which is what the suite checks with it.
    "test_streaming_elicitation": {
        "content": [{"type": "text", "text": "This gateway asks no questions: nothing to elicit."}]
    },
}
_JSON_SCHEMA_TOOL: Final = "json_schema_2020_12_tool"
_JSON_SCHEMA: Final = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}
_LOGGING: Final = ("test_tool_with_logging", "test_logging_tool")
_PROGRESS: Final = ("test_tool_with_progress", "test_streaming_elicitation")
#: Fixture tools that need a client capability the request may not declare.
_REQUIRES: Final[dict[str, tuple[str, ...]]] = {"test_missing_capability": ("sampling",)}
_NAMES: Final = (*_RESULTS, *_LOGGING, _PROGRESS[0], *_REQUIRES, _JSON_SCHEMA_TOOL)
_PAUSE: Final = 0.05


class FixtureInput(BaseModel):
    """Whatever the suite sends: the fixtures read no arguments."""

    model_config = ConfigDict(extra="allow")


@dataclass(frozen=True)
class FixtureTool(Tool):
    """A fixture listed exactly as the suite expects: name, description and input schema only."""

    schema: Mapping[str, Any] | None = None

    def to_mcp(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": dict(self.schema) if self.schema is not None else {"type": "object"},
        }


async def _serve(ctx: ToolContext, name: str) -> ToolResult:
    """Log messages and progress as the fixture's scenario asks, then its result."""
    if name in _LOGGING:
        for text in ("Tool execution started", "Tool processing data", "Tool execution completed"):
            await ctx.log("info", text)
            await asyncio.sleep(_PAUSE)
    if name in _PROGRESS:
        for value in (0, 50, 100):
            await ctx.progress(value, 100)
            await asyncio.sleep(_PAUSE)
    result = _RESULTS.get(name, {"content": [{"type": "text", "text": f"{name} completed."}]})
    return ToolResult(structured={}, content=result["content"], is_error=bool(result.get("isError")))


def _fixture(name: str) -> Tool:
    async def handler(ctx: ToolContext, args: FixtureInput) -> ToolResult:
        return await _serve(ctx, name)

    return FixtureTool(
        name=name,
        description=f"Conformance fixture {name}.",
        input_model=FixtureInput,
        handler=handler,
        annotations=Annotations(read_only=True, open_world=False),
        toolset="conformance",
        # Answered on a stream, notifications first, as the suite reads them.
        long_running=True,
        client_capabilities=_REQUIRES.get(name, ()),
        schema=_JSON_SCHEMA if name == _JSON_SCHEMA_TOOL else None,
    )


#: The fixture tools, registered beside the product's in the test mode.
TOOLS: Final = [_fixture(name) for name in _NAMES]

#: ``logging/setLevel`` (both eras' handshake: accepted, empty) and ``completion/complete`` (no
#: values), with the capabilities that announce them.
EXTENSION: Final = Extension(
    methods={
        "logging/setLevel": {},
        "completion/complete": {"completion": {"values": [], "total": 0, "hasMore": False}},
    },
    stateless=frozenset({"completion/complete"}),
    capabilities={"logging": LoggingCapability(), "completions": CompletionsCapability()},
)
