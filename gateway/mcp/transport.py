"""MCP Streamable HTTP on ``/mcp`` (revision 2025-11-25; 2025-06-18 and 2025-03-26 negotiated).

Source: MCP 2025-11-25 basic/transports#streamable-http, summarised in
``shared/spec/mcp_protocol.md`` §1.2 and its checklist §5. ``setup(app)`` adds the routes; the
app factory (``gateway.app.create_app``) calls it.

A POST goes through these checks, in this order, each with its own answer:

1. ``Origin`` / ``Host`` (DNS rebinding, ``security``) → 403.
2. ``Content-Type: application/json`` → else 415 (also keeps browsers from sending "simple"
   cross-site requests without a CORS preflight).
3. ``Accept`` must allow ``application/json`` and ``text/event-stream`` (absent: anything) → 406.
4. ``MCP-Protocol-Version``, when sent, must be a supported revision → 400 with ``-32600``
   (never ``-32022``: a 2026-07-28 ``server/discover`` probe then falls back to ``initialize``,
   §1.12). When absent, the session's negotiated revision applies (2025-03-26 without one).
5. Body size ``server.max_request_bytes`` → 413; invalid JSON → 400 ``-32700``; a message of
   the wrong shape → 400 ``-32600``; a batch → see ``dispatch``.
6. ``Mcp-Session-Id`` on everything but ``initialize``: missing → 400; unknown, expired or
   ended → 404, answered before any authentication work.
7. Authentication (``auth``) → 401; a session presented by another caller → 404.
8. Dispatch: a request gets 200 JSON or SSE (never 202); a notification or response gets 202.

GET answers 405: the gateway sends no server-initiated messages (no subscriptions, a fixed tool
list), so a standalone stream would only hold a connection open (the spec allows 405; the
conformance scenarios ``server-sse-multiple-streams`` and ``server-sse-polling`` accept it).
DELETE ends a session (204).

Every response carries ``X-Request-Id`` (the caller's when it matches ``[A-Za-z0-9._-]{1,64}``,
else a new uuid4 hex). One log line per request on the ``gateway.mcp`` logger: method, tool,
outcome, duration_ms, session (an 8-character prefix), request_id, status; never headers or tokens.
"""

from __future__ import annotations

import json
import logging
import math
import re
import uuid
from time import perf_counter
from typing import Any

from aiohttp import web

from gateway.config import Settings
from gateway.mcp.auth import Authenticator, Identity
from gateway.mcp.calls import ActiveCalls
from gateway.mcp.dispatch import Dispatcher, Exchange, json_response, parse_message
from gateway.mcp.protocol import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    NO_BATCH_VERSIONS,
    PARSE_ERROR,
    REQUEST_ID_HEADER,
    SESSION_HEADER,
    SUPPORTED_VERSIONS,
    VERSION_HEADER,
    RpcError,
    invalid_request,
    is_request_id,
    method_label,
)
from gateway.mcp.security import OriginHostGuard
from gateway.mcp.sessions import Session, SessionStore
from gateway.mcp.telemetry import Telemetry
from gateway.observability.access import RequestTrace
from gateway.observability.logging import bind_request_id

log = logging.getLogger("gateway.mcp")

MCP_PATH = "/mcp"
_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_ACCEPT_CACHE_LIMIT = 64

SESSIONS = web.AppKey("mcp_sessions", SessionStore)

_METRIC_OUTCOMES = {
    "rejected": "rejected",
    "error": "error",
    "internal_error": "error",
    "cancelled": "cancelled",
    "client_gone": "cancelled",
}


class _NotJson(ValueError):
    """A body Python's ``json`` would accept but JSON (RFC 8259 §6) does not."""


def _refuse_constant(name: str) -> Any:
    """``parse_constant`` hook: ``NaN``, ``Infinity`` and ``-Infinity`` are Python extensions
    (RFC 8259 §6: "Numeric values that cannot be represented ... such as Infinity and NaN are not
    permitted"); accepted, they would fail later when the value is sent on as JSON."""
    raise _NotJson(f"NaN/Infinity are not JSON ({name} found); send a number or a string instead.")


def _finite_float(text: str) -> float:
    """``parse_float`` hook: a number too large for a double (``1e400``) would become infinity."""
    value = float(text)
    if value in (math.inf, -math.inf):
        raise _NotJson(
            f"NaN/Infinity are not JSON (the number {text[:32]} is too large); send a smaller number "
            "or a string instead."
        )
    return value


def setup(app: web.Application) -> None:
    """Add ``POST``/``GET``/``DELETE /mcp`` to ``app`` and the shutdown hook of open calls.

    Needs ``app[SETTINGS]``, ``app[METRICS]`` and ``app[REGISTRY]`` set (``create_app`` does);
    ``app[SERVICES]`` is read per call, as it is built at start-up.
    """
    from gateway.app import METRICS, REGISTRY, SERVICES, SETTINGS

    settings = app[SETTINGS]
    metrics = app[METRICS]
    sessions = SessionStore(
        ttl_seconds=settings.server.session_ttl_seconds,
        max_sessions=settings.server.max_sessions,
        gauge=metrics.sessions_open,
    )
    calls = ActiveCalls()
    telemetry = Telemetry(metrics)
    dispatcher = Dispatcher(
        registry=app[REGISTRY],
        settings=settings,
        telemetry=telemetry,
        sessions=sessions,
        calls=calls,
        services=lambda: app[SERVICES],
    )
    transport = Transport(settings, telemetry, sessions, calls, dispatcher)
    app[SESSIONS] = sessions
    app[TRANSPORT] = transport
    app.router.add_route("POST", MCP_PATH, transport.post)
    app.router.add_route("GET", MCP_PATH, transport.get)
    app.router.add_route("DELETE", MCP_PATH, transport.delete)
    app.on_shutdown.append(transport.on_shutdown)
    app.on_cleanup.append(transport.on_cleanup)


def _acceptable(accept: str) -> tuple[bool, bool]:
    """(JSON acceptable, SSE acceptable) for an ``Accept`` header value."""
    json_ok = sse_ok = False
    for part in accept.split(","):
        media = part.split(";", 1)[0].strip().lower()
        if media == "*/*":
            return True, True
        if media in ("application/json", "application/*"):
            json_ok = True
        elif media in ("text/event-stream", "text/*"):
            sse_ok = True
    return json_ok, sse_ok


class Transport:
    """The aiohttp handlers of ``/mcp``. One per app, built by :func:`setup`."""

    def __init__(
        self,
        settings: Settings,
        telemetry: Telemetry,
        sessions: SessionStore,
        calls: ActiveCalls,
        dispatcher: Dispatcher,
    ) -> None:
        self._telemetry = telemetry
        self._sessions = sessions
        self._calls = calls
        self._dispatcher = dispatcher
        self._guard = OriginHostGuard(settings.server)
        self._auth = Authenticator(settings)
        self._max_body = settings.server.max_request_bytes
        self._accept_ok: dict[str, bool] = {}

    # -- handlers ----------------------------------------------------------------------------

    async def post(self, request: web.Request) -> web.StreamResponse:
        """``POST /mcp``: one JSON-RPC message (or a 2025-03-26 batch)."""
        return await self._serve(request, self._post, count=True)

    async def get(self, request: web.Request) -> web.StreamResponse:
        """``GET /mcp``: 405, no standalone stream (see the module docstring)."""
        return await self._serve(request, self._get, count=False)

    async def delete(self, request: web.Request) -> web.StreamResponse:
        """``DELETE /mcp``: end the session named by ``Mcp-Session-Id`` (204)."""
        return await self._serve(request, self._delete, count=False)

    async def on_shutdown(self, app: web.Application) -> None:
        """Stop long-running calls so their streams end now, not at the shutdown timeout."""
        self._calls.shutdown()

    async def on_cleanup(self, app: web.Application) -> None:
        """Drop every session (the gauge goes back to 0)."""
        self._sessions.close_all()

    # -- the pipeline ------------------------------------------------------------------------

    async def _serve(self, request: web.Request, step: Any, *, count: bool) -> web.StreamResponse:
        started = perf_counter()
        incoming = request.headers.get(REQUEST_ID_HEADER)
        request_id = incoming if incoming and _REQUEST_ID.fullmatch(incoming) else uuid.uuid4().hex
        ex = Exchange(request, request_id, {REQUEST_ID_HEADER: request_id})
        if not count:
            ex.method = request.method
        status = 500
        trace = None
        try:
            # Every line logged while serving this request (tools, broker, GitLab) carries its id.
            with bind_request_id(request_id) as trace:
                response: web.StreamResponse = await step(ex)
        except RpcError as err:
            if ex.outcome == "ok":
                ex.outcome = "rejected" if err.http_status >= 400 else "error"
            response = json_response(err.encode(ex.rpc_id), {**ex.headers, **err.headers}, err.http_status)
        except Exception:
            # A bug of the gateway's own: log it, answer without internals.
            log.exception("mcp request failed", extra={"request_id": request_id})
            ex.outcome = "internal_error"
            error = RpcError(
                INTERNAL_ERROR,
                f"Internal error; the gateway logged it with request id {request_id}.",
                http_status=500,
            )
            response = json_response(error.encode(ex.rpc_id), ex.headers, 500)
        except BaseException:
            ex.outcome = "cancelled" if ex.outcome == "ok" else ex.outcome
            self._record(ex, started, status, count, trace)
            raise
        status = response.status
        self._record(ex, started, status, count, trace)
        return response

    def _record(
        self, ex: Exchange, started: float, status: int, count: bool, trace: RequestTrace | None
    ) -> None:
        if count and not ex.counted:
            method = "response" if ex.method == "response" else method_label(ex.method)
            self._telemetry.request(method, _METRIC_OUTCOMES.get(ex.outcome, "ok"))
        log.info(
            "mcp request",
            extra={
                "method": ex.method,
                "tool": ex.tool,
                "outcome": ex.outcome,
                "duration_ms": round((perf_counter() - started) * 1000, 3),
                "session": ex.session.log_id if ex.session is not None else None,
                "request_id": ex.request_id,
                "status": status,
                **(trace.fields() if trace is not None else {}),
            },
        )

    def _check_origin(self, request: web.Request) -> None:
        headers = request.headers
        error = self._guard.check(headers.get("Host"), headers.get("Origin"))
        if error is not None:
            raise error

    async def _post(self, ex: Exchange) -> web.StreamResponse:
        request = ex.request
        headers = request.headers
        self._check_origin(request)
        if request.content_type != "application/json":
            raise RpcError(
                INVALID_REQUEST,
                "Unsupported Media Type: POST the JSON-RPC message with Content-Type: application/json.",
                http_status=415,
            )
        self._check_accept(headers.get("Accept"))
        version = headers.get(VERSION_HEADER)
        if version is not None and version not in SUPPORTED_VERSIONS:
            raise RpcError(
                INVALID_REQUEST,
                f"Bad Request: unsupported MCP-Protocol-Version {version[:64]!r}. This server speaks "
                f"{', '.join(SUPPORTED_VERSIONS)}: send initialize with one of them.",
                http_status=400,
                data={"supported": list(SUPPORTED_VERSIONS), "requested": version[:64]},
            )
        body = await self._read_body(request)
        try:
            decoded = json.loads(body, parse_constant=_refuse_constant, parse_float=_finite_float)
        except _NotJson as exc:
            raise RpcError(PARSE_ERROR, f"Parse error: {exc}", http_status=400) from None
        except (ValueError, RecursionError):
            raise RpcError(PARSE_ERROR, "Parse error: the body is not valid JSON.", http_status=400) from None
        if isinstance(decoded, list):
            return await self._batch(ex, decoded, version)
        if isinstance(decoded, dict) and is_request_id(decoded.get("id")):
            ex.rpc_id = decoded["id"]  # echoed by errors even when the rest is malformed
        msg = parse_message(decoded)
        ex.method = msg.method if msg.kind != "response" else "response"
        ex.rpc_id = msg.id
        if msg.kind == "request" and msg.method == "initialize":
            self._authenticate(ex, None)
            return await self._dispatcher.request(ex, msg)
        session = self._session(ex)
        self._authenticate(ex, session)
        if msg.kind == "request":
            return await self._dispatcher.request(ex, msg)
        if msg.kind == "notification":
            self._dispatcher.notification(session, msg)
        return web.Response(status=202, headers=ex.headers)

    async def _batch(self, ex: Exchange, items: list[Any], version: str | None) -> web.StreamResponse:
        ex.method = "batch"
        if not items:
            raise invalid_request("Invalid Request: an empty JSON array is not a JSON-RPC batch.")
        if version in NO_BATCH_VERSIONS:
            raise _batch_refused(version)
        session = self._session(ex)
        if (version or session.protocol_version) in NO_BATCH_VERSIONS:
            raise _batch_refused(version or session.protocol_version)
        self._authenticate(ex, session)
        ex.counted = True
        return await self._dispatcher.batch(ex, items)

    async def _get(self, ex: Exchange) -> web.StreamResponse:
        self._check_origin(ex.request)
        raise RpcError(
            INVALID_REQUEST,
            "Method Not Allowed: this gateway sends messages only in answer to a POST, so it offers no "
            "GET stream. POST JSON-RPC messages to /mcp.",
            http_status=405,
            headers={"Allow": "POST, DELETE"},
        )

    async def _delete(self, ex: Exchange) -> web.StreamResponse:
        self._check_origin(ex.request)
        session = self._session(ex)
        self._authenticate(ex, session, require_gitlab=False)
        self._sessions.close(session.id)
        return web.Response(status=204, headers=ex.headers)

    # -- checks ------------------------------------------------------------------------------

    def _check_accept(self, accept: str | None) -> None:
        if accept is None:
            return
        ok = self._accept_ok.get(accept)
        if ok is None:
            ok = all(_acceptable(accept))
            if len(self._accept_ok) >= _ACCEPT_CACHE_LIMIT:
                self._accept_ok.clear()
            self._accept_ok[accept] = ok
        if not ok:
            raise RpcError(
                INVALID_REQUEST,
                "Not Acceptable: an MCP client must accept both application/json and text/event-stream; "
                "send Accept: application/json, text/event-stream.",
                http_status=406,
            )

    async def _read_body(self, request: web.Request) -> bytes:
        too_large = RpcError(
            INVALID_REQUEST,
            f"Request Entity Too Large: the body exceeds server.max_request_bytes ({self._max_body} bytes).",
            http_status=413,
        )
        if request.content_length is not None and request.content_length > self._max_body:
            raise too_large
        try:
            return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise too_large from None

    def _session(self, ex: Exchange) -> Session:
        session_id = ex.request.headers.get(SESSION_HEADER)
        if session_id is None:
            raise invalid_request(
                "Bad Request: missing Mcp-Session-Id header. Send initialize first, then send the "
                "Mcp-Session-Id it returned with every request."
            )
        session = self._sessions.get(session_id)
        if session is None:
            raise _session_not_found()
        ex.session = session
        return session

    def _authenticate(
        self, ex: Exchange, session: Session | None, *, require_gitlab: bool = True
    ) -> Identity:
        identity = self._auth.authenticate(
            ex.request.headers, ex.request.remote, require_gitlab=require_gitlab
        )
        if session is not None and session.owner is not None and session.owner != identity.owner:
            # Another caller's session: answered like an unknown one (MCP security best
            # practices, session hijacking).
            ex.session = None
            raise _session_not_found()
        ex.identity = identity
        return identity


def _session_not_found() -> RpcError:
    return RpcError(
        INVALID_REQUEST,
        "Session not found: it expired or was ended. Send initialize to start a new session.",
        http_status=404,
    )


def _batch_refused(version: str | None) -> RpcError:
    return invalid_request(
        f"Invalid Request: JSON-RPC batches were removed in MCP 2025-06-18 and this session speaks "
        f"{version}; send one message per POST."
    )


TRANSPORT = web.AppKey("mcp_transport", Transport)
