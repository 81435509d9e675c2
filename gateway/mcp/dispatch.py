"""JSON-RPC dispatch of the MCP methods: initialize, ping, tools/list, tools/call, notifications.

Sources (``shared/spec/mcp_protocol.md``): lifecycle and negotiation §1.2, notifications §1.3,
progress §1.4, cancellation §1.5, ping §1.6, pagination §1.8, tools and their errors §1.9,
error codes §1.10, long calls §4.

- ``initialize`` echoes a supported ``protocolVersion`` (else answers ``2025-11-25``), opens a
  session and returns its id in ``Mcp-Session-Id``.
- ``tools/list`` pages are encoded once at start-up; a cursor is an opaque token naming a page,
  and anything else is ``-32602``.
- ``tools/call`` resolves the name (aliases too). An unknown tool is ``-32602``; a tool hidden by
  the read-only switch or the toolset filter is an ``isError`` result saying why. The answer is
  SSE when the tool is ``long_running`` or the caller sent ``_meta.progressToken``, else JSON.
- Batches (a JSON array) are only served to sessions that negotiated 2025-03-26, whose revision
  requires them; each ``tools/call`` inside one runs in JSON mode (no progress), and the answer
  is one JSON array. Later revisions removed batching: HTTP 400 with ``-32600``.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from aiohttp import web

from gateway import __version__
from gateway.config import Settings
from gateway.errors import ToolError
from gateway.mcp.auth import Identity
from gateway.mcp.calls import (
    ActiveCalls,
    CallOutcome,
    ProgressReporter,
    ToolCall,
    await_call,
    settle,
    tool_outcome,
)
from gateway.mcp.protocol import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    LATEST_VERSION,
    METHOD_NOT_FOUND,
    SERVER_NAME,
    SERVER_TITLE,
    SESSION_HEADER,
    SUPPORTED_VERSIONS,
    RpcError,
    dumps,
    encode_result,
    invalid_params,
    invalid_request,
    is_request_id,
    method_label,
)
from gateway.mcp.sessions import Session, SessionsFull, SessionStore
from gateway.mcp.sse import SSE_HEADERS, SseStream
from gateway.mcp.telemetry import Telemetry
from gateway.tools.context import CallInfo, Services, ToolContext
from gateway.tools.registry import Registry, Tool, ToolResult

_EMPTY_RESULT = b"{}"


@dataclass
class Message:
    """One JSON-RPC message, checked for shape.

    Attributes:
        kind: ``request``, ``notification`` or ``response`` (a client's answer to a server request).
        method: the method name (None for a response).
        id: the request id (None for a notification).
        params: the ``params`` member as sent (None when absent).
    """

    kind: str
    method: str | None
    id: str | int | None
    params: Any


def parse_message(msg: Any) -> Message:
    """Classify a decoded JSON value as one JSON-RPC message.

    Raises:
        RpcError: ``-32600`` (HTTP 400) when it is not a JSON-RPC 2.0 request, notification or
            response; the message says what was wrong.
    """
    if not isinstance(msg, dict):
        raise invalid_request("Invalid Request: a JSON-RPC message must be a JSON object.")
    raw_id = msg.get("id")
    rpc_id = raw_id if is_request_id(raw_id) else None
    if msg.get("jsonrpc") != "2.0":
        raise invalid_request('Invalid Request: "jsonrpc" must be "2.0".')
    method = msg.get("method")
    if method is not None:
        if not isinstance(method, str):
            raise invalid_request('Invalid Request: "method" must be a string.')
        if "id" not in msg:
            return Message("notification", method, None, msg.get("params"))
        if rpc_id is None:
            raise invalid_request('Invalid Request: "id" must be a string or an integer.')
        return Message("request", method, rpc_id, msg.get("params"))
    if ("result" in msg or "error" in msg) and "id" in msg:
        return Message("response", None, rpc_id, None)
    raise invalid_request(
        'Invalid Request: a message needs "method" (request, notification) or "result"/"error".'
    )


def encode_cursor(offset: int) -> str:
    """An opaque, stable ``nextCursor`` for the ``tools/list`` page starting at ``offset``."""
    return base64.urlsafe_b64encode(f"tools:{offset}".encode()).decode().rstrip("=")


@dataclass
class Exchange:
    """One HTTP request to ``/mcp`` as the transport sees it, with what its log line reports.

    Attributes:
        request: the aiohttp request.
        request_id: the gateway's request id (``X-Request-Id``).
        headers: headers every response to it carries (``X-Request-Id``, ``Mcp-Session-Id``).
        session: the session, once known.
        identity: the caller, once authenticated.
        method: the JSON-RPC method (``batch`` for an array), for logs and metrics.
        rpc_id: the JSON-RPC id, for error responses.
        tool: the tool's declared name for ``tools/call``.
        outcome: ``ok``, ``error``, ``rejected``, a tool error reason, ``cancelled``...
        counted: the messages were already counted in ``mcp_requests`` (batches count each).
    """

    request: web.Request
    request_id: str
    headers: dict[str, str]
    session: Session | None = None
    identity: Identity | None = None
    method: str | None = None
    rpc_id: str | int | None = None
    tool: str | None = None
    outcome: str = "ok"
    counted: bool = False


def json_response(body: bytes, headers: Mapping[str, str], status: int = 200) -> web.Response:
    """An ``application/json`` response."""
    return web.Response(body=body, status=status, content_type="application/json", headers=headers)


def no_response(headers: Mapping[str, str]) -> web.Response:
    """The HTTP answer to a request that gets no JSON-RPC response (cancelled): an empty SSE
    stream. A request is never answered with 202 (§1.2); an SSE stream that ends without a
    response is how Streamable HTTP says "no answer"."""
    return web.Response(status=200, body=b"", headers={**SSE_HEADERS, **headers})


class Dispatcher:
    """Answers JSON-RPC messages of authenticated callers. One per app.

    Args:
        registry: the served tools.
        settings: the gateway's settings (``server.*`` limits).
        telemetry: the app's MCP metrics.
        sessions: the session store.
        calls: calls in flight (shutdown ends the long-running ones).
        services: returns the app's :class:`Services` (built at start-up).
    """

    def __init__(
        self,
        *,
        registry: Registry,
        settings: Settings,
        telemetry: Telemetry,
        sessions: SessionStore,
        calls: ActiveCalls,
        services: Any,
    ) -> None:
        self._registry = registry
        self._telemetry = telemetry
        self._sessions = sessions
        self._calls = calls
        self._services = services
        self._keepalive = settings.server.keepalive_seconds
        self._pages = self._encode_pages(registry, settings.server.tools_page_size)
        self._server_info = {"name": SERVER_NAME, "title": SERVER_TITLE, "version": __version__}

    @staticmethod
    def _encode_pages(registry: Registry, size: int) -> dict[str | None, bytes]:
        """Every ``tools/list`` result, encoded once: cursor (None: first page) → JSON."""
        pages: dict[str | None, bytes] = {}
        cursor: str | None = None
        offset = 0
        while True:
            tools, nxt = registry.list_page(offset, size)
            result: dict[str, Any] = {"tools": tools}
            if nxt is not None:
                result["nextCursor"] = encode_cursor(nxt)
            pages[cursor] = dumps(result)
            if nxt is None:
                return pages
            cursor, offset = result["nextCursor"], nxt

    # -- single messages ---------------------------------------------------------------------

    async def request(self, ex: Exchange, msg: Message) -> web.StreamResponse:
        """Answer one request; method-level errors are JSON-RPC errors with HTTP 200."""
        assert msg.id is not None and msg.method is not None
        try:
            params = self._params(msg)
            if msg.method == "tools/call":
                return await self._tools_call(ex, msg.id, params)
            body = self._simple(ex, msg.method, msg.id, params)
        except RpcError as err:
            ex.outcome = "error" if err.http_status < 400 else "rejected"
            return json_response(err.encode(msg.id), {**ex.headers, **err.headers}, err.http_status)
        return json_response(body, ex.headers)

    def notification(self, session: Session, msg: Message) -> None:
        """Apply a client notification (always accepted: the transport answers 202)."""
        if msg.method == "notifications/initialized":
            session.initialized = True
        elif msg.method == "notifications/cancelled" and isinstance(msg.params, dict):
            # Unknown or finished ids are ignored (MCP basic/utilities/cancellation).
            request_id = msg.params.get("requestId")
            if is_request_id(request_id):
                call = session.inflight.get(request_id)
                if call is not None:
                    call.cancel("client")

    @staticmethod
    def _params(msg: Message) -> dict[str, Any]:
        if msg.params is None:
            return {}
        if not isinstance(msg.params, dict):
            raise invalid_params(f"Invalid params: {msg.method} takes params as a JSON object.")
        return msg.params

    def _simple(self, ex: Exchange, method: str, rpc_id: str | int, params: dict[str, Any]) -> bytes:
        if method == "ping":
            return encode_result(rpc_id, _EMPTY_RESULT)
        if method == "tools/list":
            cursor = params.get("cursor")
            page = self._pages.get(cursor) if cursor is None or isinstance(cursor, str) else None
            if page is None:
                raise invalid_params(
                    "Invalid params: unknown cursor. Pass the nextCursor of a previous tools/list result, "
                    "or no cursor for the first page."
                )
            return encode_result(rpc_id, page)
        if method == "initialize":
            return encode_result(rpc_id, self._initialize(ex, params))
        raise RpcError(
            METHOD_NOT_FOUND,
            f"Method not found: {method[:100]}. This server implements initialize, ping, tools/list "
            "and tools/call.",
        )

    def _initialize(self, ex: Exchange, params: dict[str, Any]) -> dict[str, Any]:
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise invalid_params(
                "Invalid params: initialize needs params.protocolVersion, a string such as "
                f"{LATEST_VERSION!r}."
            )
        version = requested if requested in SUPPORTED_VERSIONS else LATEST_VERSION
        client_info = params.get("clientInfo")
        assert ex.identity is not None
        try:
            session = self._sessions.create(
                version,
                owner=ex.identity.owner,
                client_info=client_info if isinstance(client_info, dict) else None,
            )
        except SessionsFull:
            raise RpcError(
                INTERNAL_ERROR,
                f"The gateway already holds server.max_sessions ({self._sessions.max_sessions}) sessions, "
                "each with a call in flight; try again in a minute.",
                http_status=503,
                headers={"Retry-After": "60"},
            ) from None
        ex.session = session
        ex.headers[SESSION_HEADER] = session.id
        return {
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": self._server_info,
        }

    # -- tools/call --------------------------------------------------------------------------

    def _parse_call(self, params: dict[str, Any]) -> tuple[str, dict[str, Any] | None, str | int | None]:
        name = params.get("name")
        if not isinstance(name, str) or not name:
            raise invalid_params(
                "Invalid params: tools/call needs params.name, the tool's name from tools/list."
            )
        arguments = params.get("arguments")
        if arguments is not None and not isinstance(arguments, dict):
            raise invalid_params(f"Invalid params: params.arguments of {name[:128]} must be a JSON object.")
        meta = params.get("_meta")
        token: str | int | None = None
        if isinstance(meta, dict) and meta.get("progressToken") is not None:
            token = meta["progressToken"]
            if not is_request_id(token):
                raise invalid_params("Invalid params: _meta.progressToken must be a string or an integer.")
        return name, arguments, token

    def _resolve(self, ex: Exchange, rpc_id: str | int, name: str) -> Tool | bytes:
        """The tool, or the encoded ``isError`` result refusing a hidden one.

        Raises:
            RpcError: -32602 for a name no tool or alias has.
        """
        try:
            tool = self._registry.resolve(name)
        except ToolError as err:
            declared = self._registry.declared(name)
            result = ToolResult.from_error(err)
            self._count_call(declared.name if declared else "unknown", tool_outcome(result), None)
            ex.tool = declared.name if declared else None
            ex.outcome = err.reason
            return encode_result(rpc_id, result.to_mcp_json())
        if tool is None:
            raise invalid_params(
                f"Unknown tool: {name[:128]}. Call tools/list for the tools this gateway serves."
            )
        ex.tool = tool.name
        return tool

    async def _tools_call(
        self, ex: Exchange, rpc_id: str | int, params: dict[str, Any]
    ) -> web.StreamResponse:
        name, arguments, token = self._parse_call(params)
        resolved = self._resolve(ex, rpc_id, name)
        if isinstance(resolved, bytes):
            return json_response(resolved, ex.headers)
        tool = resolved
        session = ex.session
        assert session is not None
        if rpc_id in session.inflight:
            raise invalid_request(
                f"Invalid Request: request id {rpc_id!r} is already in flight in this session."
            )

        stream: SseStream | None = None
        reporter: ProgressReporter | None = None
        if tool.long_running or token is not None:
            stream = SseStream(
                ex.request,
                keepalive_seconds=self._keepalive,
                headers=ex.headers,
                gauge=self._telemetry.metrics.sse_streams_open,
            )
            if not await stream.open():
                ex.outcome = "client_gone"
                await stream.close()
                return stream.response
            if token is not None:
                reporter = ProgressReporter(stream, token)
        try:
            outcome = await self._run(ex, session, tool, rpc_id, arguments, stream, reporter)
            ex.outcome = outcome.outcome
            if stream is not None:
                delivered = outcome.message is not None and await stream.send(outcome.message, final=True)
                await settle(outcome.result, delivered, ex.request_id)
                return stream.response
        finally:
            if stream is not None:
                await stream.close()
        if outcome.message is None:
            await settle(outcome.result, False, ex.request_id)
            return no_response(ex.headers)
        response = json_response(outcome.message, ex.headers)
        result = outcome.result
        if result is not None and (result.on_delivered is not None or result.on_abandoned is not None):
            # Write it now, so the callbacks know whether it left.
            await settle(result, await _write_now(response, ex.request), ex.request_id)
        return response

    async def _run(
        self,
        ex: Exchange,
        session: Session,
        tool: Tool,
        rpc_id: str | int,
        arguments: dict[str, Any] | None,
        stream: SseStream | None,
        reporter: ProgressReporter | None,
    ) -> CallOutcome:
        """Run the handler in a task registered for cancellation; count and time it."""
        assert ex.identity is not None
        info = CallInfo(
            request_id=ex.request_id,
            principal=ex.identity.principal,
            session_id=session.id,
            has_progress_token=reporter is not None,
        )
        if reporter is not None:
            info.progress = reporter
        services: Services = self._services()
        started = perf_counter()
        task = asyncio.create_task(self._registry.call(tool, ToolContext(services, info), arguments))
        call = ToolCall(tool, rpc_id, task)
        if stream is not None:
            stream.on_broken = lambda: call.cancel("client_gone")
        session.inflight[rpc_id] = call
        self._calls.add(call)
        try:
            outcome = await await_call(call, ex.request_id)
        finally:
            if session.inflight.get(rpc_id) is call:
                del session.inflight[rpc_id]
            self._calls.discard(call)
            self._sessions.touch(session)
            if reporter is not None:
                reporter.stop()
        self._count_call(tool.name, outcome.outcome, perf_counter() - started)
        return outcome

    def _count_call(self, tool: str, outcome: str, seconds: float | None) -> None:
        self._telemetry.tool_call(tool, outcome, seconds)

    # -- batches (2025-03-26 only) -----------------------------------------------------------

    async def batch(self, ex: Exchange, messages: list[Any]) -> web.StreamResponse:
        """Answer a JSON-RPC batch of a 2025-03-26 session: one JSON array, or 202 when it held
        no request. ``initialize`` may not be batched (2025-03-26 basic/lifecycle)."""
        session = ex.session
        assert session is not None
        answers = await asyncio.gather(*(self._batch_item(ex, session, m) for m in messages))
        parts = [body for body, _ in answers if body is not None]
        if not parts:
            for _, result in answers:
                await settle(result, False, ex.request_id)
            return web.Response(status=202, headers=ex.headers)
        response = json_response(b"[" + b",".join(parts) + b"]", ex.headers)
        delivered = await _write_now(response, ex.request)
        for body, result in answers:
            await settle(result, delivered and body is not None, ex.request_id)
        return response

    async def _batch_item(
        self, ex: Exchange, session: Session, raw: Any
    ) -> tuple[bytes | None, ToolResult | None]:
        try:
            msg = parse_message(raw)
        except RpcError as err:
            self._telemetry.request("other", "error")
            return err.encode(None), None
        label = method_label(msg.method) if msg.kind != "response" else "response"
        if msg.kind == "notification":
            self.notification(session, msg)
            self._telemetry.request(label, "ok")
            return None, None
        if msg.kind == "response":
            self._telemetry.request(label, "ok")
            return None, None
        assert msg.id is not None and msg.method is not None
        item = Exchange(ex.request, ex.request_id, ex.headers, session=session, identity=ex.identity)
        try:
            if msg.method == "initialize":
                raise RpcError(INVALID_REQUEST, "Invalid Request: initialize cannot be part of a batch.")
            params = self._params(msg)
            if msg.method != "tools/call":
                body = self._simple(item, msg.method, msg.id, params)
                self._telemetry.request(label, "ok")
                return body, None
            name, arguments, _ = self._parse_call(params)
            resolved = self._resolve(item, msg.id, name)
            if isinstance(resolved, bytes):
                self._telemetry.request(label, "ok")
                return resolved, None
            if msg.id in session.inflight:
                raise RpcError(
                    INVALID_REQUEST, f"Invalid Request: request id {msg.id!r} is already in flight."
                )
            outcome = await self._run(item, session, resolved, msg.id, arguments, None, None)
        except RpcError as err:
            self._telemetry.request(label, "error")
            return err.encode(msg.id), None
        self._telemetry.request(label, "cancelled" if outcome.message is None else "ok")
        return outcome.message, outcome.result


async def _write_now(response: web.StreamResponse, request: web.Request) -> bool:
    """Send ``response`` at once; True when it was handed to the transport, False when the client left."""
    try:
        await response.prepare(request)
        await response.write_eof()
    except OSError:
        return False
    return True
