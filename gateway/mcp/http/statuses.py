"""The one table from protocol errors to HTTP statuses, and the refusals of the transport itself.

A JSON-RPC error the protocol core (or the parsing of a body) answers with travels with the
status :data:`STATUSES` gives its code in the request's era
(https://modelcontextprotocol.io/specification/2026-07-28/basic/transports/streamable-http:
in the stateless era a request error is an HTTP error too; in the handshake era a method-level
error of a well-formed exchange is HTTP 200). Codes not in the table travel with 200: a tool's
crash (-32603) or a call stopped by shutdown (-32000) is an answer, not a refusal.

What only HTTP can refuse (authentication, Origin/Host, media types, body size and time, a
session that is not found, methods without a stream) is an :class:`HttpRefusal`: a JSON-RPC error
that names its own status and headers (``WWW-Authenticate``, ``Allow``, ``Retry-After``).
"""

from __future__ import annotations

from typing import Any, Final

from gateway.mcp.protocol.eras import Era
from gateway.mcp.protocol.wire import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
    RpcError,
)

#: JSON-RPC error code → HTTP status (handshake era, stateless era).
STATUSES: Final[dict[int, tuple[int, int]]] = {
    PARSE_ERROR: (400, 400),
    INVALID_REQUEST: (400, 400),
    METHOD_NOT_FOUND: (200, 404),
    INVALID_PARAMS: (200, 400),
    HEADER_MISMATCH: (400, 400),
    UNSUPPORTED_PROTOCOL_VERSION: (400, 400),
    MISSING_REQUIRED_CLIENT_CAPABILITY: (200, 400),
}
_ANSWERED: Final = (200, 200)


class HttpRefusal(RpcError):
    """A request the transport refuses with ``status`` (4xx/5xx) and extra ``headers``."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        status: int,
        data: Any = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(code, message, data=data)
        self.status = status
        self.headers = headers or {}


def status_of(err: RpcError, era: Era) -> int:
    """The HTTP status ``err`` travels with in ``era``."""
    if isinstance(err, HttpRefusal):
        return err.status
    return STATUSES.get(err.code, _ANSWERED)[era is Era.STATELESS]


def headers_of(err: RpcError) -> dict[str, str]:
    """The extra response headers of ``err`` (only refusals have any)."""
    return err.headers if isinstance(err, HttpRefusal) else {}


def unavailable(message: str) -> HttpRefusal:
    """503 with ``Retry-After: 1``: a dependency is out of reach for a moment."""
    return HttpRefusal(INTERNAL_ERROR, message, status=503, headers={"Retry-After": "1"})
