"""The HTTP concerns of ``/mcp`` as aiohttp middlewares, outermost first.

1. :func:`exchange_middleware`: the request id (``X-Request-Id``: the caller's when it matches
   ``[A-Za-z0-9._-]{1,64}``, else a new uuid4 hex) on every response and log line, the
   :class:`Exchange`, the access line (``gateway.observability.access``) and the metrics of each
   request, and the JSON-RPC error
   answer of anything refused (with the request's ``id`` once the body parsed, without one before).
   It writes the answer itself, within ``server.write_timeout_seconds`` (``framing.send``),
   so the access line says how that went. A client that closes before its body has all arrived
   (:class:`ClientClosed`) is the access line's ``client_closed``, nothing more: not a fault of the
   gateway's.
2. Origin/Host (DNS-rebinding protection, ``security``) → 403.
3. Content-Type (POST: ``application/json``) → 415; ``Content-Encoding`` other than ``gzip``,
   ``deflate`` or ``identity`` → 415; Accept (POST: must allow ``application/json`` and
   ``text/event-stream``; absent: anything) → 406. Compressed bodies are decoded by
   :func:`decode_content` (not by aiohttp's parser, whose failures would answer 500 and break the
   connection), within the body size limit.
4. Body size (``server.max_request_bytes``, from ``Content-Length``) → 413; a body that turns out
   longer while it is read is refused the same way by the endpoint.
5. ``MCP-Protocol-Version`` on GET and DELETE: a stateless (2026-07-28) request gets 405 (that era has no GET
   stream and no session to end), an unknown version 400 + -32022. On POST the version is
   checked once the body is parsed, so the error can echo the request's id.

Other paths (``/healthz``, ``/metrics``...) pass through untouched.
"""

from __future__ import annotations

import logging
import re
import uuid
import zlib
from time import perf_counter
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from gateway.config import Settings
from gateway.mcp.http.envelope import VERSION_HEADER
from gateway.mcp.http.exchange import Exchange
from gateway.mcp.http.framing import send
from gateway.mcp.http.security import OriginHostGuard
from gateway.mcp.http.statuses import HttpRefusal, headers_of, status_of
from gateway.mcp.protocol.eras import HANDSHAKE_VERSIONS, STATELESS_VERSIONS, Era, unsupported_version
from gateway.mcp.protocol.telemetry import Telemetry
from gateway.mcp.protocol.wire import INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR, RpcError, method_label
from gateway.observability.access import RequestTrace
from gateway.observability.logging import bind_request_id

log = logging.getLogger("gateway.mcp")

MCP_PATH: Final = "/mcp"
REQUEST_ID_HEADER: Final = "X-Request-Id"
EXCHANGE: Final = web.RequestKey("mcp_exchange", Exchange)
_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")

_METRIC_OUTCOMES = {
    "rejected": "rejected",
    "error": "error",
    "internal_error": "error",
    "cancelled": "cancelled",
    "client_gone": "cancelled",
    "client_closed": "client_closed",
    "write_timeout": "client_closed",
}
#: Outcomes whose access line is a WARNING: GitLab failed the call (no answer, 5xx, or an answer
#: that could not be used), which an operator acts on; a caller's mistake stays INFO.
_WARNING_OUTCOMES = frozenset({"upstream_error"})
#: The access line's status of a request whose client closed before it could be answered (nginx's
#: "client closed request"): nothing was sent.
CLIENT_CLOSED_STATUS: Final = 499


class ClientClosed(Exception):
    """The client closed its connection before its request's body had all arrived."""


def error_response(ex: Exchange, err: RpcError, status: int) -> web.Response:
    """The JSON-RPC error answer of a refused request (``id`` echoed when known)."""
    return web.Response(
        body=err.encode(ex.rpc_id),
        status=status,
        content_type="application/json",
        headers={**ex.response_headers, **headers_of(err)},
    )


def exchange_middleware(telemetry: Telemetry, write_timeout: float) -> Middleware:
    """Request id, :class:`Exchange`, error answers, the log line and the metrics of ``/mcp``;
    answers written within ``write_timeout`` seconds."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path != MCP_PATH:
            return await handler(request)
        started = perf_counter()
        incoming = request.headers.get(REQUEST_ID_HEADER)
        request_id = incoming if incoming and _REQUEST_ID.fullmatch(incoming) else uuid.uuid4().hex
        ex = Exchange(
            request_id,
            request.headers,
            request.remote or "",
            response_headers={REQUEST_ID_HEADER: request_id},
            # The header's era until the body is read (which may also be 2026-07-28 by _meta), so a
            # request refused before then (415, 406, 413) is answered and logged in its era.
            era=Era.STATELESS if request.headers.get(VERSION_HEADER) in STATELESS_VERSIONS else Era.HANDSHAKE,
        )
        counted = request.method == "POST"
        if not counted:
            ex.method = request.method
        request[EXCHANGE] = ex
        status = 500
        trace: RequestTrace | None = None
        try:
            # Every line logged while serving this request (tools, broker, GitLab) carries its id,
            # and its GitLab requests are noted on the trace for the access line.
            with bind_request_id(request_id) as trace:
                response = await handler(request)
        except RpcError as err:
            status = status_of(err, ex.era)
            if ex.report.outcome == "ok":
                ex.report.outcome = "rejected" if status >= 400 else "error"
            response = error_response(ex, err, status)
        except ClientClosed:
            ex.report.outcome = "client_closed"
            _record(telemetry, ex, started, CLIENT_CLOSED_STATUS, counted, trace)
            return web.Response(status=CLIENT_CLOSED_STATUS)  # aiohttp finds nobody to send it to
        except web.HTTPException:
            raise
        except Exception:
            # A bug of the gateway's own: log it, answer without internals.
            log.exception("mcp request failed", extra={"request_id": request_id})
            ex.report.outcome = "internal_error"
            error = RpcError(
                INTERNAL_ERROR, f"Internal error; the gateway logged it with request id {request_id}."
            )
            response = error_response(ex, error, 500)
        except BaseException:
            if ex.report.outcome == "ok":
                ex.report.outcome = "cancelled"
            _record(telemetry, ex, started, status, counted, trace)
            raise
        if not response.prepared:
            failed = await send(request, response, write_timeout)
            if failed == "write_timeout":
                ex.report.outcome = failed
        _record(telemetry, ex, started, response.status, counted, trace)
        return response

    return middleware


def _record(
    telemetry: Telemetry,
    ex: Exchange,
    started: float,
    status: int,
    counted: bool,
    trace: RequestTrace | None,
) -> None:
    """The access line (one line per MCP request, with the GitLab requests it made: INFO, WARNING
    when GitLab failed the call) and the request's metrics."""
    if counted and not ex.counted:
        method = "response" if ex.method == "response" else method_label(ex.method)
        telemetry.request(method, _METRIC_OUTCOMES.get(ex.report.outcome, "ok"))
    log.log(
        logging.WARNING if ex.report.outcome in _WARNING_OUTCOMES else logging.INFO,
        "mcp request",
        extra={
            "method": ex.method,
            # Who called: the agent id the caller authenticated as (its client token, or X-Agent-Id
            # on loopback), never a token.
            "agent": ex.caller.agent_id if ex.caller is not None else None,
            "tool": ex.report.tool,
            "outcome": ex.report.outcome,
            "era": ex.era.value,
            "duration_ms": round((perf_counter() - started) * 1000, 3),
            "session": ex.session.log_id if ex.session is not None else None,
            "request_id": ex.request_id,
            "status": status,
            **(trace.fields() if trace is not None else {}),
            # A person signed in through GitLab: their GitLab username (never a token).
            **(
                {"gitlab_user": ex.caller.gitlab_user}
                if ex.caller is not None and ex.caller.gitlab_user
                else {}
            ),
        },
    )


def origin_host_middleware(settings: Settings) -> Middleware:
    """403 for an ``Origin`` or ``Host`` this gateway does not answer to."""
    guard = OriginHostGuard(settings.server, settings.sign_in.public_hosts)

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path == MCP_PATH:
            error = guard.check(request.headers.get("Host"), request.headers.get("Origin"))
            if error is not None:
                raise error
        return await handler(request)

    return middleware


def _acceptable(accept: str) -> bool:
    """True when an ``Accept`` value allows both ``application/json`` and ``text/event-stream``."""
    json_ok = sse_ok = False
    for part in accept.split(","):
        media = part.split(";", 1)[0].strip().lower()
        if media == "*/*":
            return True
        if media in ("application/json", "application/*"):
            json_ok = True
        elif media in ("text/event-stream", "text/*"):
            sse_ok = True
    return json_ok and sse_ok


#: ``Content-Encoding`` values of request bodies that are decoded (RFC 9110 §8.4.1).
CONTENT_ENCODINGS: Final = frozenset({"identity", "gzip", "x-gzip", "deflate"})


def _content_encoding(request: web.Request) -> str:
    return request.headers.get("Content-Encoding", "identity").strip().lower() or "identity"


@web.middleware
async def media_type_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """415 for a POST that is not ``application/json`` or whose ``Content-Encoding`` is not
    decoded here; 406 when ``Accept`` rules out either answer the transport may give."""
    if request.path == MCP_PATH and request.method == "POST":
        if request.content_type != "application/json":
            raise HttpRefusal(
                INVALID_REQUEST,
                "Unsupported Media Type: POST the JSON-RPC message with Content-Type: application/json.",
                status=415,
            )
        encoding = _content_encoding(request)
        if encoding not in CONTENT_ENCODINGS:
            raise HttpRefusal(
                INVALID_REQUEST,
                f"Unsupported Media Type: Content-Encoding {encoding[:40]!r} is not accepted; send the body "
                "uncompressed, or with Content-Encoding: gzip or deflate.",
                status=415,
                headers={"Accept-Encoding": "gzip, deflate, identity"},
            )
        accept = request.headers.get("Accept")
        if accept is not None and not _acceptable(accept):
            raise HttpRefusal(
                INVALID_REQUEST,
                "Not Acceptable: an MCP client must accept both application/json and text/event-stream; "
                "send Accept: application/json, text/event-stream.",
                status=406,
            )
    return await handler(request)


def too_large(max_bytes: int) -> HttpRefusal:
    """413: the body exceeds ``server.max_request_bytes``."""
    return HttpRefusal(
        INVALID_REQUEST,
        f"Request Entity Too Large: the body exceeds server.max_request_bytes ({max_bytes} bytes).",
        status=413,
    )


def decode_content(request: web.Request, body: bytes, max_bytes: int) -> bytes:
    """The body as sent before its ``Content-Encoding`` (gzip or deflate), at most ``max_bytes``.

    Raises:
        RpcError: 413 when the decoded body is larger than ``max_bytes`` (a small gzip body can
            hold a huge one); -32700 (400) when the body is not what its ``Content-Encoding``
            says.
    """
    encoding = _content_encoding(request)
    if encoding == "identity":
        return body
    # wbits: 16 + MAX_WBITS reads a gzip member; 32 + MAX_WBITS reads zlib or gzip (deflate as
    # sent by most clients is zlib-wrapped; raw deflate is tried after).
    attempts = (
        (16 + zlib.MAX_WBITS,) if encoding in ("gzip", "x-gzip") else (32 + zlib.MAX_WBITS, -zlib.MAX_WBITS)
    )
    for wbits in attempts:
        decoder = zlib.decompressobj(wbits)
        try:
            out = decoder.decompress(body, max_bytes + 1)
        except zlib.error:
            continue
        if len(out) > max_bytes:
            raise too_large(max_bytes)
        if decoder.eof and not decoder.unused_data:
            return out
    raise RpcError(
        PARSE_ERROR,
        f"Parse error: the body is not valid {encoding} data, as its Content-Encoding says; send it "
        "uncompressed, or compressed whole with that encoding.",
    )


def body_size_middleware(max_bytes: int) -> Middleware:
    """413 for a declared ``Content-Length`` above ``max_bytes``."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if (
            request.path == MCP_PATH
            and request.content_length is not None
            and request.content_length > max_bytes
        ):
            raise too_large(max_bytes)
        return await handler(request)

    return middleware


@web.middleware
async def protocol_version_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """GET and DELETE: 405 in the stateless era, 400 + -32022 for an unknown version."""
    if request.path == MCP_PATH and request.method in ("GET", "DELETE"):
        version = request.headers.get(VERSION_HEADER)
        if version in STATELESS_VERSIONS:
            raise HttpRefusal(
                INVALID_REQUEST,
                f"Method Not Allowed: protocol {version} is stateless; it has no GET stream and no session "
                "to DELETE. POST each request to /mcp.",
                status=405,
                headers={"Allow": "POST"},
            )
        if version is not None and version not in HANDSHAKE_VERSIONS:
            raise unsupported_version(version)
    return await handler(request)


def mcp_middlewares(settings: Settings, telemetry: Telemetry) -> list[Middleware]:
    """The middlewares of ``/mcp``, outermost first."""
    return [
        exchange_middleware(telemetry, settings.server.write_timeout_seconds),
        origin_host_middleware(settings),
        media_type_middleware,
        body_size_middleware(settings.server.max_request_bytes),
        protocol_version_middleware,
    ]
