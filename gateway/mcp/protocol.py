"""MCP and JSON-RPC constants, and the encoders of JSON-RPC messages.

Sources (``shared/spec/mcp_protocol.md``): revisions and negotiation §1.1-§1.2 (MCP 2025-11-25
basic/lifecycle, basic/transports), JSON-RPC error codes §1.10 (schema.ts), the 2026-07-28
``server/discover`` probe §1.12.
"""

from __future__ import annotations

import json
from typing import Any, Final, TypeGuard

#: The newest handshake-era revision; the answer to an ``initialize`` asking for anything else.
LATEST_VERSION: Final = "2025-11-25"
#: Revisions this server negotiates (MCP basic/lifecycle#version-negotiation), newest first.
SUPPORTED_VERSIONS: Final = ("2025-11-25", "2025-06-18", "2025-03-26")
#: What a request without ``MCP-Protocol-Version`` (and no session to tell) is taken to speak
#: (MCP 2025-11-25 basic/transports#protocol-version-header).
DEFAULT_HEADER_VERSION: Final = "2025-03-26"
#: Revisions from which JSON-RPC batches are refused (batching was removed in 2025-06-18).
NO_BATCH_VERSIONS: Final = frozenset({"2025-11-25", "2025-06-18"})

# HTTP headers of the Streamable HTTP transport.
SESSION_HEADER: Final = "Mcp-Session-Id"
VERSION_HEADER: Final = "MCP-Protocol-Version"
REQUEST_ID_HEADER: Final = "X-Request-Id"

# JSON-RPC 2.0 and MCP error codes (schema.ts).
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
# Implementation-defined codes (-32000..-32019 are left to servers, mcp_protocol.md §1.10).
#: The gateway is stopping; the caller should repeat the call once it is back.
SHUTTING_DOWN: Final = -32000
#: The caller did not prove who it is (HTTP 401).
UNAUTHORIZED: Final = -32001
#: ``Origin`` or ``Host`` refused (DNS-rebinding protection, HTTP 403).
FORBIDDEN: Final = -32003

#: Methods this server answers; anything else is ``-32601``. Used as the bounded set of
#: metric labels too (see :func:`method_label`).
REQUEST_METHODS: Final = frozenset({"initialize", "ping", "tools/list", "tools/call"})
#: Client notifications the spec defines (all accepted with 202, mcp_protocol.md §1.3).
NOTIFICATION_METHODS: Final = frozenset(
    {
        "notifications/initialized",
        "notifications/cancelled",
        "notifications/progress",
        "notifications/roots/list_changed",
    }
)
_LABELS: Final = REQUEST_METHODS | NOTIFICATION_METHODS | {"server/discover"}

SERVER_NAME: Final = "gitlab-mcp-gateway"
SERVER_TITLE: Final = "GitLab MCP gateway"


def method_label(method: object) -> str:
    """The metric label of ``method``: itself when known, else ``other`` (bounded cardinality)."""
    return method if isinstance(method, str) and method in _LABELS else "other"


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON. Never emits a raw newline, so one message fits one SSE ``data:`` line."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def is_request_id(value: object) -> TypeGuard[str | int]:
    """True for a valid JSON-RPC id in MCP: a string or an integer (not a bool, not null)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def encode_result(request_id: str | int, result: Any) -> bytes:
    """A JSON-RPC response. ``result`` may be pre-encoded JSON ``bytes`` (cached pages, tool results)."""
    body = result if isinstance(result, bytes) else dumps(result)
    return b'{"jsonrpc":"2.0","id":' + dumps(request_id) + b',"result":' + body + b"}"


class RpcError(Exception):
    """A JSON-RPC error to answer with, and the HTTP status it travels with.

    Args:
        code: JSON-RPC error code (module constants).
        message: what was wrong and what to send instead.
        http_status: 200 for method-level errors of a well-formed exchange, 4xx/5xx when the
            transport refuses the request (mcp_protocol.md §1.2, §1.10).
        data: optional ``error.data``.
        headers: extra HTTP headers (``WWW-Authenticate``, ``Allow``).
    """

    def __init__(
        self,
        code: int,
        message: str,
        *,
        http_status: int = 200,
        data: Any = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.http_status = http_status
        self.data = data
        self.headers = headers or {}

    def encode(self, request_id: str | int | None) -> bytes:
        """The JSON-RPC error response (``id: null`` when the request id is unknown)."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return dumps({"jsonrpc": "2.0", "id": request_id, "error": error})


def invalid_params(message: str) -> RpcError:
    """``-32602`` for a request whose params are wrong (answered with HTTP 200)."""
    return RpcError(INVALID_PARAMS, message)


def invalid_request(message: str, *, http_status: int = 400) -> RpcError:
    """``-32600`` for a message the transport refuses (HTTP 400 unless told)."""
    return RpcError(INVALID_REQUEST, message, http_status=http_status)
