"""Test mode ``--conformance-fixtures``: the fixture tools the official MCP conformance suite
calls by name, plus ``logging/setLevel`` and ``completion/complete``.

Off by default and refused unless the gateway is bound to loopback (``gateway.config``): these
tools touch nothing, but they are not part of the product. Their outputs are the ones each
scenario's description asks for (https://github.com/modelcontextprotocol/conformance,
``src/scenarios/server/tools.ts``). Fixtures that need a server-to-client round trip (sampling,
elicitation, input-required results) are not offered: a tools-only gateway does not do them.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from mcp_types import LOG_LEVEL_META_KEY, CompletionsCapability, LoggingCapability, ServerCapabilities

from gateway.mcp.eras import LEGACY_VERSIONS, Era
from gateway.mcp.exchange import EventStream
from gateway.mcp.wire import MISSING_REQUIRED_CLIENT_CAPABILITY, RpcError, notification, response

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
_PROGRESS: Final = "test_tool_with_progress"
#: Fixture tools that need a client capability the request may not declare.
_REQUIRES: Final[dict[str, dict[str, Any]]] = {"test_missing_capability": {"sampling": {}}}
_NAMES: Final = (*_RESULTS, *_LOGGING, _PROGRESS, *_REQUIRES, _JSON_SCHEMA_TOOL)


class Fixtures:
    """The conformance suite's fixture tools."""

    tools: list[dict[str, Any]] = [
        {
            "name": name,
            "description": f"Conformance fixture {name}.",
            "inputSchema": _JSON_SCHEMA if name == _JSON_SCHEMA_TOOL else {"type": "object"},
        }
        for name in _NAMES
    ]

    def has(self, name: str) -> bool:
        return name in _NAMES

    @staticmethod
    def capabilities(base: ServerCapabilities) -> ServerCapabilities:
        """``base`` plus ``logging`` and ``completions``."""
        return base.model_copy(
            update={"logging": LoggingCapability(), "completions": CompletionsCapability()}
        )

    @staticmethod
    def answer(method: str) -> dict[str, Any]:
        """The result of ``logging/setLevel`` (empty) or ``completion/complete`` (no values)."""
        if method == "completion/complete":
            return {"completion": {"values": [], "total": 0, "hasMore": False}}
        return {}

    @staticmethod
    def check_capabilities(name: str, era: Era, declared: dict[str, Any]) -> None:
        """-32021 (HTTP 400 in the modern era) when the tool needs a capability the client did
        not declare (in the request's ``_meta``, or at ``initialize`` for a session)."""
        required = _REQUIRES.get(name)
        if required and not all(key in declared for key in required):
            raise RpcError(
                MISSING_REQUIRED_CLIENT_CAPABILITY,
                f"Missing required client capability: {name} needs {', '.join(required)}; declare it in "
                "_meta clientCapabilities.",
                http_status=400 if era is Era.MODERN else 200,
                data={"requiredCapabilities": required},
            )

    async def serve(
        self, name: str, rpc_id: str | int, meta: dict[str, Any], version: str, stream: EventStream
    ) -> None:
        """Run fixture ``name`` and answer on ``stream`` (notifications first, then the result).

        Log messages go out in the legacy era (``logging/setLevel`` is accepted) and, in the
        2026-07-28 era, only when the request's ``_meta`` names a log level.
        """
        await stream.open()
        modern = version not in LEGACY_VERSIONS
        token = meta.get("progressToken")
        if name in _LOGGING and (not modern or LOG_LEVEL_META_KEY in meta):
            for text in ("Tool execution started", "Tool processing data", "Tool execution completed"):
                await stream.send(notification("notifications/message", {"level": "info", "data": text}))
                await asyncio.sleep(0.05)
        if name == _PROGRESS or name == "test_streaming_elicitation":
            for value in (0, 50, 100):
                if token is not None:
                    params = {"progressToken": token, "progress": value, "total": 100}
                    await stream.send(notification("notifications/progress", params))
                await asyncio.sleep(0.05)
        result = _RESULTS.get(name, {"content": [{"type": "text", "text": f"{name} completed."}]})
        if modern:
            result = {**result, "resultType": "complete"}
        await stream.send(response(rpc_id, result), final=True)
        await stream.close()
