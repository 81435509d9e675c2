"""JSON-RPC and MCP wire format, from the SDK's wire types (``mcp-types``).

Everything the gateway puts on the wire goes through :func:`encode`: a ``mcp_types`` JSON-RPC
envelope dumped by pydantic (compact, UTF-8, never a raw newline, so one message is one SSE
``data:`` line). Incoming bodies are classified by ``mcp_types.jsonrpc_message_adapter`` and
request params are checked against the schema of the request's protocol version
(``mcp_types.methods``). What is ours: :class:`RpcError`, the exception that carries a JSON-RPC
error. It knows no transport: which HTTP status an error travels with is the transport's table
(``gateway.mcp.http.statuses``).

Error ids (JSON-RPC 2.0 §5, https://www.jsonrpc.org/specification#response_object): an error
echoes the request's ``id`` whenever the body parsed far enough to read one, and is ``"id": null``
otherwise, as JSON-RPC requires and the MCP SDKs' clients expect (the Python SDK's client discards
an error response without an ``id`` member and shows its caller only "Server returned an error
response").
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Iterator
from typing import Any, Final, TypeGuard

import orjson
from mcp_types import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
    ErrorData,
    JSONRPCError,
    JSONRPCMessage,
    JSONRPCNotification,
    JSONRPCResponse,
    jsonrpc_message_adapter,
)
from pydantic import BaseModel

__all__ = [
    "HEADER_MISMATCH",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "MISSING_REQUIRED_CLIENT_CAPABILITY",
    "PARSE_ERROR",
    "UNSUPPORTED_PROTOCOL_VERSION",
    "RpcError",
    "classify",
    "decode_body",
    "encode",
    "notification",
    "response",
]

# Implementation-defined codes (-32000..-32019 are left to servers).
#: The gateway is stopping; the caller should repeat the call once it is back.
SHUTTING_DOWN: Final = -32000
#: The caller did not prove who it is (HTTP 401).
UNAUTHORIZED: Final = -32001
#: ``Origin`` or ``Host`` refused (DNS-rebinding protection, HTTP 403).
FORBIDDEN: Final = -32003

SERVER_NAME: Final = "gitlab-mcp-gateway"
SERVER_TITLE: Final = "GitLab MCP gateway"

#: A request id: a string or an integer (not a bool, not null).
RequestId = str | int


#: Method labels of ``gateway_mcp_requests_total``: the methods either era defines that a client
#: sends; anything else is ``other`` (bounded cardinality).
_LABELS: Final = frozenset(
    {
        "initialize",
        "ping",
        "server/discover",
        "tools/list",
        "tools/call",
        "logging/setLevel",
        "completion/complete",
        "notifications/initialized",
        "notifications/cancelled",
        "notifications/progress",
        "notifications/roots/list_changed",
        # The tasks extension (io.modelcontextprotocol/tasks).
        "tasks/get",
        "tasks/update",
        "tasks/cancel",
    }
)


def method_label(method: object) -> str:
    """The metric label of ``method``: itself when known, else ``other``."""
    return method if isinstance(method, str) and method in _LABELS else "other"


def is_request_id(value: object) -> TypeGuard[str | int]:
    """True for a valid JSON-RPC id in MCP: a string or an integer (not a bool, not null)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


class RpcError(Exception):
    """A JSON-RPC error to answer with.

    Args:
        code: JSON-RPC error code (``mcp_types`` or the constants above).
        message: what was wrong and what to send instead.
        data: optional ``error.data``.
    """

    def __init__(self, code: int, message: str, *, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def message_for(self, request_id: RequestId | None) -> JSONRPCError:
        """The JSON-RPC error response; ``request_id`` None when the body did not parse."""
        return JSONRPCError(
            jsonrpc="2.0",
            id=request_id,
            error=ErrorData(code=self.code, message=self.message, data=self.data),
        )

    def encode(self, request_id: RequestId | None) -> bytes:
        """The encoded error response (``"id": null`` when ``request_id`` is None)."""
        body = self.message_for(request_id).model_dump(mode="json", by_alias=True, exclude_none=True)
        body["id"] = request_id  # kept when None: exclude_none drops it with error.data
        try:
            return orjson.dumps(body)
        except TypeError:  # an id past 64 bits, which orjson refuses and JSON allows
            return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def invalid_params(message: str) -> RpcError:
    """``-32602`` for a request whose params are wrong."""
    return RpcError(INVALID_PARAMS, message)


def invalid_request(message: str) -> RpcError:
    """``-32600`` for a message that is no valid request."""
    return RpcError(INVALID_REQUEST, message)


def encode(message: BaseModel) -> bytes:
    """A wire message as compact UTF-8 JSON; ``None`` fields of the envelope are left out,
    values inside ``result`` are kept."""
    return message.model_dump_json(by_alias=True, exclude_none=True).encode()


def response(request_id: RequestId, result: dict[str, Any]) -> bytes:
    """An encoded JSON-RPC result response; ``result`` is already shaped (JSON values only).

    Written by orjson, as :func:`encode` would write it: a tool result's JSON-RPC envelope
    through pydantic cost several times as much CPU. pydantic remains for what orjson refuses
    (an integer past 64 bits)."""
    try:
        return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "result": result})
    except TypeError:
        return encode(JSONRPCResponse(jsonrpc="2.0", id=request_id, result=result))


def notification(method: str, params: dict[str, Any]) -> bytes:
    """An encoded JSON-RPC notification (``notifications/progress``, ``notifications/message``)."""
    return encode(JSONRPCNotification(jsonrpc="2.0", method=method, params=params))


class _NotJson(ValueError):
    """A body Python's ``json`` would accept but JSON (RFC 8259 §6) does not."""


def _refuse_constant(name: str) -> Any:
    # NaN/Infinity are Python extensions; accepted, they would fail later when sent on as JSON.
    raise _NotJson(f"NaN/Infinity are not JSON ({name} found); send a number or a string instead.")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # 1e400 would become infinity
        raise _NotJson(
            f"NaN/Infinity are not JSON (the number {text[:32]} is too large); send a smaller number "
            "or a string instead."
        )
    return value


def decode_body(body: bytes) -> Any:
    """The JSON value of a POST body.

    Raises:
        RpcError: ``-32700`` (no id) when it is not JSON (RFC 8259), or nests too deeply to be
            read.
    """
    try:
        return json.loads(body, parse_constant=_refuse_constant, parse_float=_finite_float)
    except _NotJson as exc:
        raise RpcError(PARSE_ERROR, f"Parse error: {exc}") from None
    except RecursionError:
        # Python's parser reads as deep as its recursion limit allows; valid JSON past that is
        # still refused, and the message must say why rather than call it malformed.
        raise RpcError(
            PARSE_ERROR,
            f"Parse error: the body nests objects and arrays too deeply to be read (about "
            f"{sys.getrecursionlimit()} levels or more); no MCP message needs that: send _meta and the "
            "arguments nested less deeply.",
        ) from None
    except ValueError:
        raise RpcError(PARSE_ERROR, "Parse error: the body is not valid JSON.") from None


#: Text no string of a request may hold: lone UTF-16 surrogates (``"\\ud800"`` is valid JSON
#: syntax but no Unicode text: it cannot be logged, sent to GitLab or echoed back in UTF-8) and
#: C0 control characters other than tab, line feed and carriage return, and DEL (written raw
#: into plain-text logs and into GitLab paths).
_BAD_TEXT = re.compile("[\ud800-\udfff\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def check_text(decoded: Any) -> None:
    """Refuse a decoded body whose strings (keys or values) hold :data:`_BAD_TEXT`.

    Raises:
        RpcError: ``-32600`` naming where and what was found; it echoes the request's
            id unless the id itself is the bad string.
    """
    if isinstance(decoded, str) and (found := _BAD_TEXT.search(decoded)) is not None:
        raise _bad_text("", found.group())
    # One iterator per container being walked, and the key each was entered by: memory follows
    # the nesting, not the width, and a path is spelled out only for a string refused (a batch of
    # 520,000 items must not cost 520,000 path strings).
    stack: list[Iterator[tuple[str | int, Any]]] = []
    keys: list[str | int] = []  # stack[i + 1] walks the container at keys[i] of stack[i]
    if isinstance(decoded, dict):
        stack.append(iter(decoded.items()))
    elif isinstance(decoded, list):
        stack.append(enumerate(decoded))
    while stack:
        for key, value in stack[-1]:
            if isinstance(key, str) and (found := _BAD_TEXT.search(key)) is not None:
                raise _bad_text(_path(keys, key), found.group())
            if isinstance(value, str):
                if (found := _BAD_TEXT.search(value)) is not None:
                    raise _bad_text(_path(keys, key), found.group())
            elif isinstance(value, dict):
                stack.append(iter(value.items()))
                keys.append(key)
                break
            elif isinstance(value, list):
                stack.append(enumerate(value))
                keys.append(key)
                break
        else:
            stack.pop()
            if keys:
                keys.pop()


def _path(keys: list[str | int], last: str | int) -> str:
    """``params.arguments.ref``, ``[3].params``: where a string is, from the keys leading to it."""
    path = ""
    for key in (*keys, last):
        path = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}".lstrip(".")
    return path


def _bad_text(path: str, char: str) -> RpcError:
    what = "a lone UTF-16 surrogate" if "\ud800" <= char <= "\udfff" else "a control character"
    where = _BAD_TEXT.sub("?", path[:200]) or "the body"
    return invalid_request(
        f"Invalid Request: {where} holds {what} (U+{ord(char):04X}); send valid Unicode text without "
        "control characters other than tab and line breaks."
    )


def readable_id(decoded: Any) -> RequestId | None:
    """The request id of a decoded body, when it has a valid one (errors echo it)."""
    if isinstance(decoded, dict):
        value = decoded.get("id")
        if is_request_id(value) and not (isinstance(value, str) and _BAD_TEXT.search(value)):
            return value
    return None


def classify(decoded: Any) -> JSONRPCMessage:
    """The JSON-RPC message a decoded body is (request, notification, response or error).

    JSON-RPC 2.0 §4.1: a member ``id`` makes a request; its absence a notification.

    Raises:
        RpcError: ``-32600`` when it is none of them; the message says what was wrong.
    """
    if not isinstance(decoded, dict):
        raise invalid_request("Invalid Request: a JSON-RPC message must be a JSON object.")
    if decoded.get("jsonrpc") != "2.0":
        raise invalid_request('Invalid Request: "jsonrpc" must be "2.0".')
    if "method" in decoded:
        if not isinstance(decoded["method"], str):
            raise invalid_request('Invalid Request: "method" must be a string.')
        if "id" in decoded and not is_request_id(decoded["id"]):
            raise invalid_request('Invalid Request: "id" must be a string or an integer.')
        if "params" in decoded and not isinstance(decoded["params"], dict) and "id" in decoded:
            raise invalid_params(
                f'Invalid params: {decoded["method"][:100]} takes "params" as a JSON object.'
            )
        if "params" in decoded and not isinstance(decoded["params"], dict):
            raise invalid_request('Invalid Request: "params" must be a JSON object.')
    try:
        return jsonrpc_message_adapter.validate_python(decoded, by_name=False)
    except ValueError:
        raise invalid_request(
            'Invalid Request: a message needs "method" (request, notification) or "result"/"error" '
            'with an "id".'
        ) from None
