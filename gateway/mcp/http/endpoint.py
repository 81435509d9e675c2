"""The ``/mcp`` route (MCP Streamable HTTP): POST, GET and DELETE, both eras on one endpoint.

The middlewares (``middlewares``) have already checked Origin/Host, media types, body size and
the version header of GET/DELETE. A POST then goes:

1. Read the body (413 when longer than ``server.max_request_bytes``; 408 when it has not all
   arrived after :data:`BODY_SECONDS`), decode it (-32700), choose the era
   (``envelope.choose_era``; -32022 for an unknown ``MCP-Protocol-Version``), classify the
   message (-32600). From here on errors echo the request's id.
2. **Stateless** (2026-07-28): the envelope and header checks
   (``envelope.check_stateless_request``), no session (``Mcp-Session-Id`` is ignored),
   authentication, the protocol core. A notification gets 202; a posted response 400.
3. **Handshake**: ``initialize`` authenticates, and the core's answer opens a sealed session;
   anything else needs ``Mcp-Session-Id`` (missing → 400; invalid, expired, ended or another
   caller's → 404, checked in memory; 503 while this replica's copy of the ended sessions may
   lag the broker's database by more than its bound, ``gateway.broker.ended_sessions``), then
   the core. Batches only in 2025-03-26 sessions (with sign-in on, a batch holding a call the
   caller's scope does not allow is refused whole with 403 ``insufficient_scope``, as a single
   call is, before any of it runs). A posted response answers a request the
   gateway sent on a call's stream (an elicitation) and goes to that call (202).

The core's reply is written as JSON, or as the last event of the SSE stream the core opened for
its notifications; its error travels with the status of ``statuses.STATUSES``; its tool result
is settled by ``delivery.settle`` once the write says whether the client got it.

GET answers 405 in both eras: the gateway sends no server-initiated messages (no subscriptions,
a fixed tool list), so a standalone stream would only hold a connection open (the conformance
scenarios ``server-sse-multiple-streams`` and ``server-sse-polling`` accept it). DELETE ends a
handshake session (204) for every replica sharing the broker's database, until it would have
expired (``gateway.broker.ended_sessions``).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

from aiohttp import web
from mcp_types import JSONRPCNotification, JSONRPCRequest

from gateway.broker.database import StoreError
from gateway.broker.ended_sessions import EndedSessions, TooManyEnded
from gateway.config import Settings
from gateway.mcp.http.auth import Authenticator, SignedInCaller, SignInGate
from gateway.mcp.http.delivery import settle
from gateway.mcp.http.envelope import VERSION_HEADER, check_stateless_request, choose_era
from gateway.mcp.http.exchange import Exchange
from gateway.mcp.http.framing import SseStream, connection_closed, json_response, receipt, write_json
from gateway.mcp.http.middlewares import EXCHANGE, MCP_PATH, ClientClosed, decode_content, too_large
from gateway.mcp.http.sessions import SESSION_HEADER, Session, SessionSealer
from gateway.mcp.http.statuses import HttpRefusal, status_of, unavailable
from gateway.mcp.protocol.calls import ActiveCalls
from gateway.mcp.protocol.context import Reply, RequestContext
from gateway.mcp.protocol.eras import NO_BATCH_VERSIONS, Era
from gateway.mcp.protocol.server import McpServer
from gateway.mcp.protocol.telemetry import Telemetry
from gateway.mcp.protocol.wire import (
    INVALID_REQUEST,
    check_text,
    classify,
    decode_body,
    invalid_request,
    readable_id,
)
from gateway.tools.caller import Caller

#: How long a POST's body may take to arrive. aiohttp bounds the wait for a request's headers
#: (its keep-alive timeout) but not for its body: a client that stops mid-body would otherwise
#: hold its connection and handler for good. A 1 MiB body needs 35 KB/s to make it.
BODY_SECONDS = 30.0

#: The app's session sealer (tests move its clock; operators see it through /metrics).
SESSIONS = web.AppKey("mcp_sessions", SessionSealer)
#: The signed-in caller of a request (sign-in on), found before its body is read.
_SIGNED_IN: web.RequestKey[SignedInCaller | None] = web.RequestKey("signed_in")


class McpEndpoint:
    """The aiohttp handlers of ``/mcp``. One per app.

    ``ended_sessions`` returns the record of sessions ended by DELETE, kept in the broker's
    database so every replica and a restart refuse them (opened with the app's services).
    ``sign_in``: sign-in through GitLab is on (``gateway.signin``): a request's gateway access
    token is looked up before anything else, and a caller is who it stands for.
    """

    def __init__(
        self,
        settings: Settings,
        telemetry: Telemetry,
        sealer: SessionSealer,
        calls: ActiveCalls,
        server: McpServer,
        ended_sessions: Callable[[], EndedSessions],
        sign_in: SignInGate | None = None,
    ) -> None:
        self._ended_sessions = ended_sessions
        self._sign_in = sign_in
        self._telemetry = telemetry
        self._sealer = sealer
        self._calls = calls
        self._server = server
        self._auth = Authenticator(settings, None if sign_in is None else sign_in.challenge)
        if sign_in is not None:
            self._authenticate = self._authenticate_signed_in  # type: ignore[method-assign]
        self._max_body = settings.server.max_request_bytes
        self._max_batch = settings.server.max_batch_messages
        self._keepalive = settings.server.keepalive_seconds
        self._write_timeout = settings.server.write_timeout_seconds

    def add_routes(self, app: web.Application) -> None:
        app[SESSIONS] = self._sealer
        app.router.add_route("POST", MCP_PATH, self.post)
        app.router.add_route("GET", MCP_PATH, self.get)
        app.router.add_route("DELETE", MCP_PATH, self.delete)

    # -- POST --------------------------------------------------------------------------------

    async def post(self, request: web.Request) -> web.StreamResponse:
        """``POST /mcp``: one JSON-RPC message (or a 2025-03-26 batch)."""
        ex = request[EXCHANGE]
        if self._sign_in is not None:
            request[_SIGNED_IN] = await self._sign_in.check(request.headers)
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
        if self._sign_in is not None and isinstance(msg, JSONRPCRequest) and msg.method == "tools/call":
            self._sign_in.check_call(request[_SIGNED_IN], msg.params)
        if ex.era is Era.STATELESS:
            return await self._stateless(request, ex, msg)
        if isinstance(msg, JSONRPCRequest) and msg.method == "initialize":
            caller = self._authenticate(ex, request)
            ctx = self._context(request, ex, caller)
            ctx.open_session = functools.partial(self._open_session, ex, caller)
            return await self._answer(request, ex, ctx, msg)
        caller, session = await self._session(ex, request)
        ctx = self._context(request, ex, caller, session)
        if isinstance(msg, JSONRPCRequest):
            return await self._answer(request, ex, ctx, msg)
        if isinstance(msg, JSONRPCNotification):
            self._server.notification(ctx, msg)
        else:  # a response to a request the gateway sent on a call's stream (elicitation...)
            self._server.client_response(ctx, msg)
        return json_response(None, ex.response_headers, 202)

    async def _stateless(self, request: web.Request, ex: Exchange, msg: Any) -> web.StreamResponse:
        if isinstance(msg, JSONRPCNotification):
            # The 2026-07-28 core defines no client notifications over HTTP (closing the stream
            # cancels); accepted and dropped, as the SDK's server does.
            return json_response(None, ex.response_headers, 202)
        if not isinstance(msg, JSONRPCRequest):
            raise invalid_request("Invalid Request: clients POST requests and notifications, not responses.")
        ex.envelope = envelope = check_stateless_request(
            msg.method, msg.params, request.headers, self._server.stateless_methods
        )
        ctx = self._context(request, ex, self._authenticate(ex, request))
        ctx.version = envelope.protocol_version
        ctx.client_capabilities = envelope.client_capabilities
        # Closing the connection cancels a stateless request, answered as JSON as much as on a
        # stream (a handshake-era client cancels with notifications/cancelled instead).
        ctx.disconnected = functools.partial(connection_closed, request)
        return await self._answer(request, ex, ctx, msg)

    def _context(
        self, request: web.Request, ex: Exchange, caller: Caller, session: Session | None = None
    ) -> RequestContext:
        """The core's view of the request: caller, era, session, and its SSE stream (opened only
        if the core sends events)."""
        ctx = RequestContext(ex.request_id, caller, ex.era, None, report=ex.report, trace_carrier=ex.headers)
        if session is not None:
            ctx.version = session.protocol_version
            ctx.client_capabilities = session.capabilities
            ctx.session = session.number
            ctx.session_log_id = session.log_id
        ctx.events = SseStream(
            request,
            keepalive_seconds=self._keepalive,
            headers=ex.response_headers,
            write_timeout=self._write_timeout,
            resumable=ex.era is Era.HANDSHAKE,
            gauge=self._telemetry.metrics.sse_streams_open,
        )
        return ctx

    def _open_session(self, ex: Exchange, caller: Caller, version: str, capabilities: dict[str, Any]) -> str:
        """Seal the session ``initialize`` negotiated; its id goes back in ``Mcp-Session-Id``."""
        session = self._sealer.issue(version, capabilities, caller.owner)
        ex.session = session
        ex.response_headers[SESSION_HEADER] = session.id
        return session.log_id

    async def _answer(
        self, request: web.Request, ex: Exchange, ctx: RequestContext, msg: JSONRPCRequest
    ) -> web.StreamResponse:
        stream = ctx.events
        assert isinstance(stream, SseStream)
        try:
            reply = await self._server.request(ctx, msg)
            if stream.started:
                return await self._end_stream(ex, stream, reply)
        finally:
            if stream.started:
                await stream.close()
        if reply.message is None:
            await settle(reply.result, False, ex.request_id)
            # Cancelled before anything was sent: an SSE stream that ends without a response is
            # how Streamable HTTP says "no answer" (a request is never answered with 202).
            return web.Response(
                status=200, body=b"", headers={"Content-Type": "text/event-stream", **ex.response_headers}
            )
        if self._sign_in is not None and ctx.caller.gitlab_refusals:
            who = request[_SIGNED_IN]
            if who is not None:
                # GitLab refused the person's token and nothing was done: the client is told to
                # refresh or sign in again (401), or to step up (403), rather than get a tool error.
                await settle(reply.result, False, ex.request_id)
                await self._sign_in.refused_by_gitlab(who, ctx.caller.gitlab_refusals)
        status = 200 if reply.error is None else status_of(reply.error, ex.era)
        return await self._write(request, ex, reply, status)

    async def _end_stream(self, ex: Exchange, stream: SseStream, reply: Reply) -> web.StreamResponse:
        """The reply as the last event of the stream the core opened for its notifications."""
        delivered = reply.message is not None and await stream.send(reply.message, final=True)
        await settle(reply.result, delivered, ex.request_id, stream.receipt)
        return stream.response

    async def _write(
        self, request: web.Request, ex: Exchange, reply: Reply, status: int
    ) -> web.StreamResponse:
        response = json_response(reply.message, ex.response_headers, status)
        result = reply.result
        if result is not None and (result.on_delivered is not None or result.on_abandoned is not None):
            # Written now, so the result's callbacks know whether it left.
            written = await write_json(request, response, self._write_timeout)
            await settle(result, written, ex.request_id, functools.partial(receipt, request))
        return response

    async def _batch(self, request: web.Request, ex: Exchange, items: list[Any]) -> web.StreamResponse:
        ex.method = "batch"
        if ex.era is Era.STATELESS:
            raise invalid_request("Invalid Request: send one JSON-RPC message per POST (no batches).")
        if not items:
            raise invalid_request("Invalid Request: an empty JSON array is not a JSON-RPC batch.")
        if len(items) > self._max_batch:
            # Refused whole, before any of it runs: answering part would leave the client to
            # find out which of its calls ran.
            raise invalid_request(
                f"Invalid Request: a batch of {len(items)} messages; this gateway answers at most "
                f"{self._max_batch} in one batch (server.max_batch_messages). Send smaller batches, "
                "or one message per POST."
            )
        header = request.headers.get(VERSION_HEADER)
        if header in NO_BATCH_VERSIONS:
            raise _batch_refused(header)
        caller, session = await self._session(ex, request)
        if session.protocol_version in NO_BATCH_VERSIONS:
            raise _batch_refused(session.protocol_version)
        if self._sign_in is not None:
            # A step-up is asked of the whole batch before any of it runs, as of a single call:
            # answering the rest would leave the client to find out which of its calls ran.
            who = request[_SIGNED_IN]
            for item in items:
                if isinstance(item, dict) and item.get("method") == "tools/call":
                    params = item.get("params")
                    self._sign_in.check_call(who, params if isinstance(params, dict) else None)
        ex.counted = True
        ctx = RequestContext(ex.request_id, caller, ex.era, session.protocol_version, report=ex.report)
        ctx.client_capabilities = session.capabilities
        ctx.session = session.number
        ctx.session_log_id = session.log_id
        ctx.trace_carrier = ex.headers
        replies = await self._server.batch(ctx, items)
        bodies = [reply.message for reply in replies if reply.message is not None]
        for reply in replies:
            if reply.message is None:  # cancelled: never answered
                await settle(reply.result, False, ex.request_id)
        answered = [reply.result for reply in replies if reply.message is not None]
        if not bodies:
            return json_response(None, ex.response_headers, 202)
        response = json_response(b"[" + b",".join(bodies) + b"]", ex.response_headers)
        delivered = await write_json(request, response, self._write_timeout)
        for result in answered:
            # One response carries them all: each takes its own receipt of the connection.
            await settle(result, delivered, ex.request_id, functools.partial(receipt, request))
        return response

    # -- GET, DELETE ---------------------------------------------------------------------------

    async def get(self, request: web.Request) -> web.StreamResponse:
        """``GET /mcp``: 405, no standalone stream (see the module docstring)."""
        raise HttpRefusal(
            INVALID_REQUEST,
            "Method Not Allowed: this gateway sends messages only in answer to a POST, so it offers no "
            "GET stream. POST JSON-RPC messages to /mcp.",
            status=405,
            headers={"Allow": "POST, DELETE"},
        )

    async def delete(self, request: web.Request) -> web.StreamResponse:
        """``DELETE /mcp``: end the handshake session named by ``Mcp-Session-Id`` (204)."""
        ex = request[EXCHANGE]
        if self._sign_in is not None:
            request[_SIGNED_IN] = await self._sign_in.check(request.headers)
        caller, session = await self._session(ex, request, require_gitlab=False)
        try:
            await self._ended_sessions().end(session.number, session.expires, caller.owner)
        except StoreError:
            raise _sessions_unavailable() from None
        except TooManyEnded as err:
            raise HttpRefusal(
                INVALID_REQUEST,
                f"Too Many Requests: the session was not ended, as {err}. It stays open, bound to you, "
                "until it expires: stop sending its Mcp-Session-Id, or reuse it instead of starting "
                "new sessions.",
                status=429,
            ) from None
        self._calls.end_session(session.number)
        return web.Response(status=204, headers=ex.response_headers)

    # -- checks ------------------------------------------------------------------------------

    async def _read_body(self, request: web.Request) -> bytes:
        try:
            async with asyncio.timeout(BODY_SECONDS):
                body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise too_large(self._max_body) from None
        except ConnectionError:
            # aiohttp's own ConnectionResetError subclass: the client closed mid-body.
            raise ClientClosed from None
        except TimeoutError:
            raise HttpRefusal(
                INVALID_REQUEST,
                f"Request Timeout: the body did not arrive within {BODY_SECONDS:g} s (less came than "
                "Content-Length said). Send the whole JSON-RPC message in one request.",
                status=408,
                headers={"Connection": "close"},
            ) from None
        if len(body) > self._max_body:
            raise too_large(self._max_body)
        return decode_content(request, body, self._max_body)

    async def _session(
        self, ex: Exchange, request: web.Request, *, require_gitlab: bool = True
    ) -> tuple[Caller, Session]:
        """The caller and their handshake session (both also kept on ``ex``, for the access line).

        Raises:
            RpcError: 401 from authentication, first (a caller without valid credentials learns
                that, not what a session needs); then 400 without ``Mcp-Session-Id``; 404 for an
                id that is not a live session of this caller (clients then initialize again);
                503 when this replica's copy of the ended sessions may be out of date (its database
                unreachable for longer than ``ended_sessions.LAG_SECONDS``).
        """
        caller = self._authenticate(ex, request, require_gitlab=require_gitlab)
        session_id = request.headers.get(SESSION_HEADER)
        if session_id is None:
            # The request named no stateless revision, so it was read as the handshake era: say
            # both ways on, since a client may have meant either.
            raise invalid_request(
                "Bad Request: missing Mcp-Session-Id header. Without an MCP-Protocol-Version header "
                "naming 2026-07-28 the request is read as MCP 2025-11-25 (or earlier), which needs a "
                "session: send initialize first, then the Mcp-Session-Id it returned with every "
                "request. Or speak 2026-07-28, which needs no session: send MCP-Protocol-Version: "
                "2026-07-28 and Mcp-Method (and Mcp-Name for tools/call) headers, and the revision and "
                'client capabilities in params._meta ("io.modelcontextprotocol/protocolVersion", '
                '"io.modelcontextprotocol/clientCapabilities").'
            )
        session = self._sealer.unseal(session_id)
        if session is not None and not self._sealer.owned_by(session, caller.owner):
            session = None
        if session is not None:
            try:
                ended = self._ended_sessions().is_ended(session.number)
            except StoreError:
                # Not served on a guess: an id ended elsewhere must not come back while the
                # record is out of reach.
                raise _sessions_unavailable() from None
            if ended:
                self._sealer.refuse_ended()
                session = None
        if session is None:
            raise HttpRefusal(
                INVALID_REQUEST,
                "Session not found: it expired, was ended, or belongs to another caller. Send initialize "
                "to start a new session.",
                status=404,
            )
        ex.session = session
        return caller, session

    def _authenticate(self, ex: Exchange, request: web.Request, *, require_gitlab: bool = True) -> Caller:
        caller = self._auth.authenticate(request.headers, request.remote, require_gitlab=require_gitlab)
        ex.caller = caller
        return caller

    def _authenticate_signed_in(
        self, ex: Exchange, request: web.Request, *, require_gitlab: bool = True
    ) -> Caller:
        who = request.get(_SIGNED_IN)
        if who is None:
            caller = self._auth.authenticate(request.headers, request.remote, require_gitlab=require_gitlab)
        else:
            assert self._sign_in is not None
            caller = self._auth.signed_in(
                who, request.headers, request.remote, functools.partial(self._sign_in.renew, who)
            )
        ex.caller = caller
        return caller


def _sessions_unavailable() -> HttpRefusal:
    return unavailable(
        "Service Unavailable: the gateway cannot reach the database that records ended sessions (its "
        "log says why). Send the request again in a moment."
    )


def _batch_refused(version: str | None) -> HttpRefusal:
    return HttpRefusal(
        INVALID_REQUEST,
        f"Invalid Request: JSON-RPC batches were removed in MCP 2025-06-18 and this session speaks "
        f"{version}; send one message per POST.",
        status=400,
    )
