"""Test mode ``--conformance-fixtures``: the tools the official MCP conformance suite calls by
name, plus ``logging/setLevel`` and ``completion/complete``.

Off by default and refused unless the gateway is bound to loopback (``gateway.config``): these
tools touch nothing, but they are not part of the product. They are ordinary tools
(:data:`TOOLS`), registered beside the product's when the test mode is on, and the two methods
and their capabilities are an :class:`~gateway.mcp.protocol.server.Extension` of the protocol
core (:data:`EXTENSION`). Their outputs are the ones each scenario's description asks for
(https://github.com/modelcontextprotocol/conformance, ``src/scenarios/server/tools.ts``).
The input-required fixtures (``test_input_required_result_*``, and the prompt
``test_input_required_result_prompt``, the suite's only non-tool request that asks) ask through
``ToolContext.ask`` as the product's tools do, so they answer with input-required results in the
2026-07-28 era and with requests on the call's stream in 2025-11-25 sessions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from mcp_types import CompletionsCapability, LoggingCapability
from pydantic import BaseModel, ConfigDict

from gateway.mcp.protocol.server import Extension
from gateway.mcp.protocol.wire import INVALID_PARAMS, RpcError
from gateway.tools.context import ToolContext
from gateway.tools.input_requests import AskFn, InputRequest, elicit, list_roots, sample
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
    # Streams a notification and its result only: a 2026-07-28 response stream carries no request
    # of the server's (it asks with input-required results instead), which the suite checks.
    "test_streaming_elicitation": {"content": [{"type": "text", "text": "Streaming complete"}]},
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


def _form(message: str, field: str, kind: str = "string", *, bound: bool = True) -> InputRequest:
    schema = {"type": "object", "properties": {field: {"type": kind}}, "required": [field]}
    return elicit(message, schema, bound=bound)


def _text(text: str) -> ToolResult:
    return ToolResult(structured={}, content=[{"type": "text", "text": text}])


def _answer_text(answer: Any, field: str) -> str:
    content = answer.get("content") if isinstance(answer, dict) else None
    value = content.get(field) if isinstance(content, dict) else None
    return str(value)


async def _ask_elicitation(ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
    # Not bound: the suite also sends the answer unasked, with extra keys, and expects it taken.
    answers = await ctx.ask({"user_name": _form("What is your name?", "name", bound=False)})
    return _text(f"Hello, {_answer_text(answers['user_name'], 'name')}!")


async def _ask_sampling(ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
    answers = await ctx.ask({"capital_question": sample("What is the capital of France?", 100, bound=False)})
    content = answers["capital_question"].get("content")
    text = content.get("text") if isinstance(content, dict) else None
    return _text(str(text))


async def _ask_roots(ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
    answers = await ctx.ask({"client_roots": list_roots(bound=False)})
    roots = answers["client_roots"].get("roots") or []
    uris = ", ".join(str(root.get("uri")) for root in roots if isinstance(root, dict))
    return _text(f"Client roots: {uris or 'none'}")


async def _ask_state(ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
    await ctx.ask({"confirm": _form("Please confirm", "ok", "boolean")})
    return _text("state-ok: the request state was verified and the answer received.")


async def _ask_many(ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
    answers = await ctx.ask(
        {
            "user_name": _form("What is your name?", "name"),
            "greeting": sample("Generate a greeting", 50),
            "client_roots": list_roots(),
        }
    )
    return _text(f"Received {len(answers)} answers: {', '.join(sorted(answers))}.")


async def _ask_rounds(ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
    first = await ctx.ask({"step1": _form("Step 1: What is your name?", "name")})
    second = await ctx.ask({"step2": _form("Step 2: What is your favorite color?", "color")})
    name, color = _answer_text(first["step1"], "name"), _answer_text(second["step2"], "color")
    return _text(f"{name}'s favorite color is {color}.")


async def _ask_declared(ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
    wanted = {
        "user_name": _form("What is your name?", "name"),
        "greeting": sample("Generate a greeting", 50),
        "client_roots": list_roots(),
    }
    asked = {key: request for key, request in wanted.items() if ctx.can_ask(request.method)}
    if not asked:
        return _text("The client declared no capability to ask with.")
    answers = await ctx.ask(asked)
    return _text(f"Asked only what the client declared: {', '.join(sorted(answers))}.")


#: A fixture that asks: its context and arguments in, its result out.
_Asking = Callable[[ToolContext, Mapping[str, Any]], Awaitable[ToolResult]]


async def _legacy_sampling(ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
    prompt = str(arguments.get("prompt", ""))
    answers = await ctx.ask({"sample": sample(prompt, 100, bound=False)})
    content = answers["sample"].get("content")
    text = content.get("text") if isinstance(content, dict) else None
    return _text(f"LLM response: {text}")


async def _legacy_elicitation(ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
    message = str(arguments.get("message", ""))
    schema = {
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    }
    answers = await ctx.ask({"user": elicit(message, schema, bound=False)})
    answer = answers["user"]
    return _text(f"User response: action={answer.get('action')}, content={answer.get('content')}")


_SEP1034: Final = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "default": "John Doe"},
        "age": {"type": "integer", "default": 30},
        "score": {"type": "number", "default": 95.5},
        "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
        "verified": {"type": "boolean", "default": True},
    },
}
_SEP1330: Final = {
    "type": "object",
    "properties": {
        "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
        "titledSingle": {
            "type": "string",
            "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ],
        },
        "legacyEnum": {
            "type": "string",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {
            "type": "array",
            "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
        },
        "titledMulti": {
            "type": "array",
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"},
                ]
            },
        },
    },
}


def _elicit_schema(schema: dict[str, Any]) -> _Asking:
    async def ask(ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
        answers = await ctx.ask(
            {"form": elicit("Please review and update the form fields", schema, bound=False)}
        )
        answer = answers["form"]
        return _text(f"Elicitation completed: action={answer.get('action')}, content={answer.get('content')}")

    return ask


_ASKING: Final[dict[str, _Asking]] = {
    "test_sampling": _legacy_sampling,
    "test_elicitation": _legacy_elicitation,
    "test_elicitation_sep1034_defaults": _elicit_schema(_SEP1034),
    "test_elicitation_sep1330_enums": _elicit_schema(_SEP1330),
    "test_input_required_result_elicitation": _ask_elicitation,
    "test_input_required_result_sampling": _ask_sampling,
    "test_input_required_result_list_roots": _ask_roots,
    "test_input_required_result_request_state": _ask_state,
    "test_input_required_result_multiple_inputs": _ask_many,
    "test_input_required_result_multi_round": _ask_rounds,
    "test_input_required_result_tampered_state": _ask_state,
    "test_input_required_result_capabilities": _ask_declared,
}
_PROMPT: Final = "test_input_required_result_prompt"


async def _get_prompt(params: Mapping[str, Any], ask: AskFn) -> dict[str, Any]:
    """``prompts/get`` of the one prompt: it asks for its context first (2026-07-28 only)."""
    if params.get("name") != _PROMPT:
        raise RpcError(
            INVALID_PARAMS, f"Unknown prompt: {str(params.get('name'))[:100]}. The only prompt is {_PROMPT}."
        )
    answers = await ask(
        {"user_context": _form("What context should the prompt use?", "context", bound=False)}
    )
    context = _answer_text(answers["user_context"], "context")
    return {
        "messages": [{"role": "user", "content": {"type": "text", "text": f"Use this context: {context}"}}]
    }


_NAMES: Final = (*_RESULTS, *_LOGGING, _PROGRESS[0], *_REQUIRES, _JSON_SCHEMA_TOOL, *_ASKING)
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


async def _serve(ctx: ToolContext, name: str, arguments: Mapping[str, Any]) -> ToolResult:
    """Log messages and progress as the fixture's scenario asks, then its result."""
    if name in _ASKING:
        return await _ASKING[name](ctx, arguments)
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
        return await _serve(ctx, name, args.model_dump())

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
    stateless=frozenset({"completion/complete", "prompts/get"}),
    capabilities={"logging": LoggingCapability(), "completions": CompletionsCapability()},
    handlers={"prompts/get": _get_prompt},
)
