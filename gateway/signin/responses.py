"""How the sign-in endpoints answer: OAuth errors as JSON (RFC 6749 §5.2), never cached, the
redirect back to a client with ``iss`` (RFC 9207), and CORS for the endpoints browser-based
clients call from another origin."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from aiohttp import web

NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
#: Any origin, without credentials: the metadata, registration, token and revocation endpoints
#: use no cookies (a client authenticates with its own id, secret or bearer), so a page elsewhere
#: learns nothing a non-browser client could not. The consent and account pages and the console
#: use cookies and never get it.
CORS = {"Access-Control-Allow-Origin": "*"}
_PREFLIGHT = {
    **CORS,
    "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
    "Access-Control-Allow-Headers": "Authorization, Content-Type, MCP-Protocol-Version",
    "Access-Control-Max-Age": "86400",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def cross_origin(handler: Handler) -> Handler:
    """``handler`` with ``Access-Control-Allow-Origin: *`` on its answers."""

    async def handle(request: web.Request) -> web.StreamResponse:
        response = await handler(request)
        response.headers.update(CORS)
        return response

    return handle


async def preflight(request: web.Request) -> web.Response:
    """``OPTIONS``: a browser's CORS preflight of a cross-origin endpoint."""
    return web.Response(status=204, headers=_PREFLIGHT)


def json_answer(
    body: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    """A JSON answer that no cache keeps."""
    return web.json_response(body, status=status, headers={**NO_STORE, **(headers or {})})


def oauth_error(
    error: str, description: str, status: int = 400, headers: dict[str, str] | None = None
) -> web.Response:
    """An OAuth error answer: ``{"error", "error_description"}``."""
    return json_answer({"error": error, "error_description": description}, status, headers)


def invalid_client(description: str) -> web.Response:
    """401 ``invalid_client``: the client re-registers (RFC 6749 §5.2)."""
    return oauth_error("invalid_client", description, 401, {"WWW-Authenticate": 'Basic realm="oauth"'})


def back_to_client(redirect_uri: str, params: dict[str, str | None]) -> web.Response:
    """302 to the client's redirect URI with ``params`` added to its query."""
    parts = urlsplit(redirect_uri)
    extra = urlencode({k: v for k, v in params.items() if v is not None})
    query = f"{parts.query}&{extra}" if parts.query else extra
    return web.Response(status=302, headers={"Location": urlunsplit(parts._replace(query=query)), **NO_STORE})
