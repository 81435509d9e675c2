"""The ``/mcp`` route: POST, GET and DELETE, for both protocol eras on the same endpoint.

The middlewares (``middlewares``) have already checked Origin/Host, media types, body size and
the version header of GET/DELETE. A POST then goes:

1. Read the body (413 when longer than ``server.max_request_bytes``; 408 when it has not all
   arrived after :data:`BODY_SECONDS`), decode it (400 + -32700),
   choose the era (``eras.choose_era``; 400 + -32022 for an unknown ``MCP-Protocol-Version``),
   classify the message (400 + -32600). From here on errors echo the request's id.
2. **Modern** (2026-07-28): the envelope and header checks (``eras.check_modern_request``), no
   session (``Mcp-Session-Id`` is ignored), authentication, dispatch. A notification gets 202; a
   posted response 400.
3. **Legacy**: ``initialize`` authenticates and opens a sealed session; anything else needs
   ``Mcp-Session-Id`` (missing → 400; invalid, expired, ended or another caller's → 404),
   then authentication and dispatch. Batches only in 2025-03-26 sessions.

GET answers 405 in both eras: the gateway sends no server-initiated messages (no subscriptions,
a fixed tool list), so a standalone stream would only hold a connection open (the conformance
scenarios ``server-sse-multiple-streams`` and ``server-sse-polling`` accept it). DELETE ends a
legacy session (204).
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from aiohttp import web
from mcp_types import JSONRPCNotification, JSONRPCRequest

from gateway.config import Settings
from gateway.mcp.auth import Authenticator, Identity
from gateway.mcp.calls import ActiveCalls, settle
from gateway.mcp.dispatch import Dispatcher
from gateway.mcp.eras import (
    NO_BATCH_VERSIONS,
    VERSION_HEADER,
    Era,
    check_modern_request,
    choose_era,
)
from gateway.mcp.exchange import EventStream, Exchange, Reply
from gateway.mcp.middlewares import EXCHANGE, MCP_PATH, decode_content, too_large
from gateway.mcp.sessions import SESSION_HEADER, Session, SessionSealer
from gateway.mcp.streamable_http import SseStream, json_response, receipt, write_json
from gateway.mcp.telemetry import Telemetry
from gateway.mcp.wire import (
    INVALID_REQUEST,
    RpcError,
    check_text,
    classify,
    decode_body,
    invalid_request,
    readable_id,
)

#: How long a POST's body may take to arrive. aiohttp bounds the wait for a request's headers
#: (its keep-alive timeout) but not for its body: a client that stops mid-body would otherwise
#: hold its connection and handler for good. A 1 MiB body needs 35 KB/s to make it.
BODY_SECONDS = 30.0

#: The app's session sealer (tests move its clock; operators see it through /metrics).
SESSIONS = web.AppKey("mcp_sessions", SessionSealer)


class McpEndpoint:
    """The aiohttp handlers of ``/mcp``. One per app."""

    def __init__(
        self,
        settings: Settings,
        telemetry: Telemetry,
        sealer: SessionSealer,
        calls: ActiveCalls,
        dispatcher: Dispatcher,
    ) -> None:
        self._telemetry = telemetry
        self._sealer = sealer
        self._calls = calls
        self._dispatcher = dispatcher
        self._auth = Authenticator(settings)
        self._max_body = settings.server.max_request_bytes
        self._keepalive = settings.server.keepalive_seconds

    def add_routes(self, app: web.Application) -> None:
        app[SESSIONS] = self._sealer
        app.router.add_route("POST", MCP_PATH, self.post)
        app.router.add_route("GET", MCP_PATH, self.get)
        app.router.add_route("DELETE", MCP_PATH, self.delete)

    # -- POST --------------------------------------------------------------------------------

    async def post(self, request: web.Request) -> web.StreamResponse:
        """``POST /mcp``: one JSON-RPC message (or a 2025-03-26 batch)."""
        ex = request[EXCHANGE]
        decoded = decode_body(await self._read_body(request))
        ex.rpc_id = readable_id(decoded)  # echoed by errors even when the rest is malformed
        check_text(decoded)
        ex.era = choose_era(request.headers.get(VERSION_HEADER), decoded)
        if isinstance(decoded, list):
            return await self._batch(request, ex, decoded)
        msg = classify(decoded)
        if isinstance(msg, JSONRPCRequest | JSONRPCNotification):
            ex.method = msg.method
        else:
            ex.method = "response"
        if ex.era is Era.MODERN:
            return await self._modern(request, ex, msg)
        if isinstance(msg, JSONRPCRequest) and msg.method == "initialize":
            self._authenticate(ex, request)
            return await self._answer(request, ex, msg)
        self._session(ex, request)
        if isinstance(msg, JSONRPCRequest):
            return await self._answer(request, ex, msg)
        if isinstance(msg, JSONRPCNotification):
            self._dispatcher.notification(ex, msg)
        return json_response(None, ex.response_headers, 202)

    async def _modern(self, request: web.Request, ex: Exchange, msg: Any) -> web.StreamResponse:
        if isinstance(msg, JSONRPCNotification):
            # The 2026-07-28 core defines no client notifications over HTTP (closing the stream
            # cancels); accepted and dropped, as the SDK's server does.
            return json_response(None, ex.response_headers, 202)
        if not isinstance(msg, JSONRPCRequest):
            raise invalid_request("Invalid Request: clients POST requests and notifications, not responses.")
        ex.envelope = check_modern_request(
            msg.method, msg.params, request.headers, self._dispatcher.modern_methods
        )
        self._authenticate(ex, request)
        return await self._answer(request, ex, msg)

    async def _answer(self, request: web.Request, ex: Exchange, msg: JSONRPCRequest) -> web.StreamResponse:
        streams: list[SseStream] = []

        def open_stream() -> EventStream:
            stream = SseStream(
                request,
                keepalive_seconds=self._keepalive,
                headers=ex.response_headers,
                resumable=ex.era is Era.LEGACY,
                gauge=self._telemetry.metrics.sse_streams_open,
            )
            streams.append(stream)
            return stream

        reply = await self._dispatcher.request(ex, msg, open_stream)
        if reply is None:
            if streams:
                await streams[0].close()
                return streams[0].response
            # Cancelled before anything was sent: an SSE stream that ends without a response is
            # how Streamable HTTP says "no answer" (a request is never answered with 202).
            return web.Response(
                status=200, body=b"", headers={"Content-Type": "text/event-stream", **ex.response_headers}
            )
        return await self._write(request, ex, reply)

    async def _write(self, request: web.Request, ex: Exchange, reply: Reply) -> web.StreamResponse:
        response = json_response(reply.body, ex.response_headers, reply.status)
        result = reply.result
        if result is not None and (result.on_delivered is not None or result.on_abandoned is not None):
            # Written now, so the result's callbacks know whether it left.
            written = await write_json(request, response)
            await settle(result, written, ex.request_id, functools.partial(receipt, request))
        return response

    async def _batch(self, request: web.Request, ex: Exchange, items: list[Any]) -> web.StreamResponse:
        ex.method = "batch"
        if ex.era is Era.MODERN:
            raise invalid_request("Invalid Request: send one JSON-RPC message per POST (no batches).")
        if not items:
            raise invalid_request("Invalid Request: an empty JSON array is not a JSON-RPC batch.")
        header = request.headers.get(VERSION_HEADER)
        if header in NO_BATCH_VERSIONS:
            raise _batch_refused(header)
        session = self._session(ex, request)
        if session.protocol_version in NO_BATCH_VERSIONS:
            raise _batch_refused(session.protocol_version)
        ex.counted = True
        bodies, results = await self._dispatcher.batch(ex, items)
        if not bodies:
            for result in results:
                await settle(result, False, ex.request_id)
            return json_response(None, ex.response_headers, 202)
        response = json_response(b"[" + b",".join(bodies) + b"]", ex.response_headers)
        delivered = await write_json(request, response)
        for result in results:
            # One response carries them all: each takes its own receipt of the connection.
            await settle(result, delivered, ex.request_id, functools.partial(receipt, request))
        return response

    # -- GET, DELETE ---------------------------------------------------------------------------

    async def get(self, request: web.Request) -> web.StreamResponse:
        """``GET /mcp``: 405, no standalone stream (see the module docstring)."""
        raise RpcError(
            -32600,
            "Method Not Allowed: this gateway sends messages only in answer to a POST, so it offers no "
            "GET stream. POST JSON-RPC messages to /mcp.",
            http_status=405,
            headers={"Allow": "POST, DELETE"},
        )

    async def delete(self, request: web.Request) -> web.StreamResponse:
        """``DELETE /mcp``: end the legacy session named by ``Mcp-Session-Id`` (204)."""
        ex = request[EXCHANGE]
        session = self._session(ex, request, require_gitlab=False)
        self._sealer.end(session)
        self._calls.end_session(session.number)
        return web.Response(status=204, headers=ex.response_headers)

    # -- checks ------------------------------------------------------------------------------

    async def _read_body(self, request: web.Request) -> bytes:
        try:
            async with asyncio.timeout(BODY_SECONDS):
                body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise too_large(self._max_body) from None
        except ConnectionResetError:
            # The client closed the connection while sending its request (a call given up on
            # at once): nobody will read an answer, and no bug to trace; the access line says so.
            request[EXCHANGE].outcome = "client_gone"
            raise RpcError(
                INVALID_REQUEST,
                "Bad Request: the client closed the connection before its request arrived.",
                http_status=400,
            ) from None
        except TimeoutError:
            raise RpcError(
                INVALID_REQUEST,
                f"Request Timeout: the body did not arrive within {BODY_SECONDS:g} s (less came than "
                "Content-Length said). Send the whole JSON-RPC message in one request.",
                http_status=408,
                headers={"Connection": "close"},
            ) from None
        if len(body) > self._max_body:
            raise too_large(self._max_body)
        return decode_content(request, body, self._max_body)

    def _session(self, ex: Exchange, request: web.Request, *, require_gitlab: bool = True) -> Session:
        """The caller and their legacy session.

        Raises:
            RpcError: 401 from authentication, first (a caller without valid credentials learns
                that, not what a session needs); then 400 without ``Mcp-Session-Id``; 404 for an
                id that is not a live session of this caller (clients then initialize again).
        """
        identity = self._authenticate(ex, request, require_gitlab=require_gitlab)
        session_id = request.headers.get(SESSION_HEADER)
        if session_id is None:
            raise invalid_request(
                "Bad Request: missing Mcp-Session-Id header. Send initialize first, then send the "
                "Mcp-Session-Id it returned with every request."
            )
        session = self._sealer.unseal(session_id)
        if session is not None and not self._sealer.owned_by(session, identity.owner):
            session = None
        if session is None:
            raise RpcError(
                -32600,
                "Session not found: it expired, was ended, or belongs to another caller. Send initialize "
                "to start a new session.",
                http_status=404,
            )
        ex.session = session
        return session

    def _authenticate(self, ex: Exchange, request: web.Request, *, require_gitlab: bool = True) -> Identity:
        identity = self._auth.authenticate(request.headers, request.remote, require_gitlab=require_gitlab)
        ex.identity = identity
        return identity


def _batch_refused(version: str | None) -> RpcError:
    return invalid_request(
        f"Invalid Request: JSON-RPC batches were removed in MCP 2025-06-18 and this session speaks "
        f"{version}; send one message per POST."
    )
