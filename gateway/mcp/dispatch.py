"""JSON-RPC dispatch of the MCP methods, for both eras; it knows nothing of HTTP.

It takes a classified message (``mcp_types`` envelope) with its :class:`Exchange` and gives back a
:class:`Reply`, or writes events (progress, then the response) to an :class:`EventStream` it
asks for. Request params are validated against the schema of the request's revision
(``mcp_types.methods``), and every result is shaped by that revision's result type, so a
2026-07-28 result carries ``resultType`` and a 2025-11-25 one does not.

Legacy era (MCP 2025-11-25 basic/lifecycle, server/tools): ``initialize`` (echoes a supported
``protocolVersion``, else answers the newest; issues a sealed session), ``ping``, ``tools/list``,
``tools/call``; notifications are accepted. Batches only for 2025-03-26 sessions.

Modern era (MCP 2026-07-28): ``server/discover``, ``tools/list`` (with ``ttlMs``,
``cacheScope``, in declaration order), ``tools/call``. Progress goes on the request's own stream
when it carries ``_meta.progressToken``; closing that stream cancels the call.

``tools/list`` lists the tools the caller may call: what the deployment serves, narrowed by the
caller's ``Identity.access`` (client token, ``X-MCP-*`` headers); such a list is
``cacheScope: private`` in the modern era. ``tools/call`` resolves the name (aliases too). An
unknown tool is ``-32602``, and so is a tool hidden from the caller, whose message adds which
setting hides it. The answer is an event
stream when the tool is ``long_running`` or the caller sent a ``progressToken``, else JSON.
"""

from __future__ import annotations

import asyncio
import base64
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import Any, Final

from mcp_types import (
    SERVER_INFO_META_KEY,
    Implementation,
    JSONRPCNotification,
    JSONRPCRequest,
    ServerCapabilities,
    ToolsCapability,
)
from mcp_types import methods as wire_methods
from pydantic import ValidationError

from gateway import __version__
from gateway.errors import ToolError
from gateway.mcp.calls import (
    ActiveCalls,
    ProgressReporter,
    ToolCall,
    await_call,
    cancel_when_closed,
    settle,
)
from gateway.mcp.eras import (
    LATEST_LEGACY_VERSION,
    LEGACY_VERSIONS,
    MODERN_METHODS,
    SUPPORTED_VERSIONS,
    Era,
    modern_status,
)
from gateway.mcp.exchange import EventStream, Exchange, Reply, StreamFactory
from gateway.mcp.fixtures import Fixtures
from gateway.mcp.sessions import SESSION_HEADER, SessionSealer
from gateway.mcp.telemetry import Telemetry
from gateway.mcp.wire import (
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    SERVER_NAME,
    SERVER_TITLE,
    RpcError,
    classify,
    invalid_params,
    is_request_id,
    method_label,
    response,
)
from gateway.observability import tracing
from gateway.tools.access import NO_LIMITS, ToolAccess
from gateway.tools.context import CallInfo, ToolContext, ToolServices
from gateway.tools.registry import Registry, Tool, ToolResult

#: How long a modern client may reuse ``tools/list`` and ``server/discover`` results: the tool
#: set is fixed for the life of the process, and a redeploy is picked up within this time.
LIST_TTL_MS: Final = 600_000

#: Distinct narrowed tool lists kept (one per client token and combination of ``X-MCP-*`` headers).
_NARROWED_PAGES_KEPT: Final = 64


_PARAMS_HINTS: Final = {
    "tools/list": " Pass the nextCursor of a previous tools/list result, or no cursor for the first page.",
    "tools/call": " Send params.name (a tool's name from tools/list) and params.arguments (a JSON object).",
}


def encode_cursor(offset: int) -> str:
    """An opaque, stable ``nextCursor`` for the ``tools/list`` page starting at ``offset``."""
    return base64.urlsafe_b64encode(f"tools:{offset}".encode()).decode().rstrip("=")


def shaped(method: str, version: str, result: dict[str, Any]) -> dict[str, Any]:
    """``result`` validated and dumped as ``method``'s result type of revision ``version``."""
    if version not in LEGACY_VERSIONS:
        result = {**result, "resultType": "complete"}
    return wire_methods.serialize_server_result(method, version, result)


def shaped_tool_result(version: str, result: ToolResult) -> dict[str, Any]:
    """A tool result as revision ``version``'s ``CallToolResult``, shaped as :func:`shaped` does.

    ``structuredContent`` is left out of the shaping and put back as it is: it is already JSON
    (a handler's dict, or its model dumped in JSON mode) and its only declared type is an object,
    so validating and copying it again (10 KB for a pipeline with 20 jobs) would change nothing.
    """
    answer = result.to_mcp()
    structured = answer.pop("structuredContent")
    out = shaped("tools/call", version, {**answer, "structuredContent": {}})
    if "structuredContent" in out:  # where the revision's result type keeps it
        out["structuredContent"] = structured
    return out


class Dispatcher:
    """Answers JSON-RPC messages of authenticated callers. One per app.

    Args:
        registry: the served tools.
        telemetry: the app's MCP metrics.
        sealer: issues legacy sessions.
        calls: calls in flight (shutdown and legacy ``notifications/cancelled`` reach them).
        services: returns the app-wide services (built at start-up).
        page_size: ``tools/list`` page size.
        fixtures: the conformance suite's fixture tools (test mode only), else None.
    """

    def __init__(
        self,
        *,
        registry: Registry,
        telemetry: Telemetry,
        sealer: SessionSealer,
        calls: ActiveCalls,
        services: Callable[[], ToolServices],
        page_size: int,
        fixtures: Fixtures | None = None,
    ) -> None:
        self._registry = registry
        self._telemetry = telemetry
        self._sealer = sealer
        self._calls = calls
        self._services = services
        self._fixtures = fixtures
        self._page_size = page_size
        self._pages = self._paginate(self._listed(NO_LIMITS), page_size)
        #: ``tools/list`` pages of narrowed callers, by their access; bounded, since a request's
        #: headers choose it.
        self._narrowed_pages: OrderedDict[ToolAccess, dict[str | None, dict[str, Any]]] = OrderedDict()
        #: The methods a 2026-07-28 request may name.
        self.modern_methods = MODERN_METHODS | ({"completion/complete"} if fixtures else set())
        capabilities = ServerCapabilities(tools=ToolsCapability(list_changed=False))
        if fixtures is not None:
            capabilities = fixtures.capabilities(capabilities)
        self._capabilities = capabilities.model_dump(by_alias=True, exclude_none=True, mode="json")
        self._server_info = Implementation(
            name=SERVER_NAME, title=SERVER_TITLE, version=__version__
        ).model_dump(by_alias=True, exclude_none=True, mode="json")

    def _listed(self, access: ToolAccess) -> list[dict[str, Any]]:
        return self._registry.listed_for(access) + (self._fixtures.tools if self._fixtures else [])

    def _pages_for(self, access: ToolAccess) -> dict[str | None, dict[str, Any]]:
        """The ``tools/list`` pages of a caller with ``access``, built once per distinct access."""
        if not access.layers:
            return self._pages
        pages = self._narrowed_pages.get(access)
        if pages is None:
            pages = self._paginate(self._listed(access), self._page_size)
            self._narrowed_pages[access] = pages
            if len(self._narrowed_pages) > _NARROWED_PAGES_KEPT:
                self._narrowed_pages.popitem(last=False)
        else:
            self._narrowed_pages.move_to_end(access)
        return pages

    @staticmethod
    def _paginate(tools: list[dict[str, Any]], size: int) -> dict[str | None, dict[str, Any]]:
        """Every ``tools/list`` page: cursor (None: first page) → result."""
        pages: dict[str | None, dict[str, Any]] = {}
        cursor: str | None = None
        for offset in range(0, max(len(tools), 1), size):
            page: dict[str, Any] = {"tools": tools[offset : offset + size]}
            if offset + size < len(tools):
                page["nextCursor"] = encode_cursor(offset + size)
            pages[cursor] = page
            cursor = page.get("nextCursor")
        return pages

    # -- single messages ---------------------------------------------------------------------

    def request(
        self, ex: Exchange, msg: JSONRPCRequest, open_stream: StreamFactory | None
    ) -> Awaitable[Reply | None]:
        """Answer one request: a :class:`Reply`, or None when it was answered on a stream.

        ``open_stream`` None: answer in JSON only (no progress), as inside a batch.

        Method-level errors are JSON-RPC errors with HTTP 200 in the legacy era; the modern era
        gives the statuses its transport names (e.g. 400 for invalid params).
        """
        if tracing.ENABLED:  # else no span and no coroutine frame of its own
            return self._traced(ex, msg, open_stream)
        return self._answer(ex, msg, open_stream)

    async def _traced(
        self, ex: Exchange, msg: JSONRPCRequest, open_stream: StreamFactory | None
    ) -> Reply | None:
        """:meth:`_answer` under the request's span (its parent: the caller's trace context)."""
        meta = (msg.params or {}).get("_meta")
        # The method's label: a closed set, so a caller cannot name spans at will.
        method = method_label(msg.method)
        span = tracing.mcp_span(method, msg.id, meta if isinstance(meta, dict) else {}, ex.headers)
        reply: Reply | None = None
        outcome: str | None = None
        try:
            reply = await self._answer(ex, msg, open_stream)
            return reply
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        except Exception:
            outcome = "internal_error"  # the transport logs it and answers -32603
            raise
        finally:
            result = reply.result if reply is not None else None
            span.finish(
                tool=ex.tool,
                outcome=outcome or ex.outcome,
                tool_error=result is not None and result.is_error,
                session=ex.session.log_id if ex.session is not None else None,
                # initialize: the session it opened says the version agreed on.
                version=ex.version if ex.envelope is not None or ex.session is not None else None,
            )

    async def _answer(
        self, ex: Exchange, msg: JSONRPCRequest, open_stream: StreamFactory | None
    ) -> Reply | None:
        try:
            if msg.method == "tools/call":
                return await self._tools_call(ex, msg, open_stream)
            return Reply(response(msg.id, self._simple(ex, msg)))
        except RpcError as err:
            ex.outcome = "error" if err.http_status < 400 else "rejected"
            if ex.era is Era.MODERN:
                err.http_status = modern_status(err)
            return Reply(err.encode(msg.id), err.http_status)

    def notification(self, ex: Exchange, msg: JSONRPCNotification) -> None:
        """Apply a client notification (always accepted with 202)."""
        if msg.method == "notifications/cancelled" and ex.session is not None and msg.params:
            # Unknown or finished ids are ignored (MCP basic/utilities/cancellation).
            request_id = msg.params.get("requestId")
            if is_request_id(request_id):
                self._calls.cancel_in_session(ex.session.number, request_id, "client")

    def _parse(self, ex: Exchange, msg: JSONRPCRequest) -> Any:
        """The typed request of ``msg`` in its revision.

        Raises:
            RpcError: -32601 for a method the revision does not have, -32602 for bad params.
        """
        try:
            return wire_methods.parse_client_request(msg.method, ex.version, msg.params)
        except KeyError:
            raise self._method_not_found(msg.method) from None
        except ValidationError as err:
            where = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'][1:]) or 'params'}: {e['msg']}" for e in err.errors()[:3]
            )
            hint = _PARAMS_HINTS.get(msg.method, "")
            raise invalid_params(f"Invalid params of {msg.method}: {where}.{hint}") from None

    def _method_not_found(self, method: str) -> RpcError:
        served = "initialize, ping, tools/list and tools/call"
        if self._fixtures is not None:
            served += ", logging/setLevel and completion/complete"
        return RpcError(
            METHOD_NOT_FOUND, f"Method not found: {method[:100]}. This server implements {served}."
        )

    def _simple(self, ex: Exchange, msg: JSONRPCRequest) -> dict[str, Any]:
        method = msg.method
        if method == "initialize":
            return self._initialize(ex, msg)
        request = self._parse(ex, msg)
        if method == "ping":
            return {}
        assert ex.identity is not None
        access = ex.identity.access
        # A list narrowed for this caller must not be served to others from a shared cache.
        cache_scope = "private" if access.layers else "public"
        if method == "server/discover":
            return shaped(
                method,
                ex.version,
                {
                    "supportedVersions": list(SUPPORTED_VERSIONS),
                    "capabilities": self._capabilities,
                    "ttlMs": LIST_TTL_MS,
                    "cacheScope": cache_scope,
                    "_meta": {SERVER_INFO_META_KEY: self._server_info},
                },
            )
        if method == "tools/list":
            cursor = request.params.cursor if request.params is not None else None
            page = self._pages_for(access).get(cursor)
            if page is None:
                raise invalid_params(
                    "Invalid params: unknown cursor. Pass the nextCursor of a previous tools/list result, "
                    "or no cursor for the first page."
                )
            if ex.era is Era.MODERN:
                page = {**page, "ttlMs": LIST_TTL_MS, "cacheScope": cache_scope}
            return shaped(method, ex.version, page)
        if self._fixtures is not None and method in ("logging/setLevel", "completion/complete"):
            return shaped(method, ex.version, self._fixtures.answer(method))
        raise self._method_not_found(method)

    def _initialize(self, ex: Exchange, msg: JSONRPCRequest) -> dict[str, Any]:
        params = msg.params or {}
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise invalid_params(
                "Invalid params: initialize needs params.protocolVersion, a string such as "
                f"{LATEST_LEGACY_VERSION!r}."
            )
        version = requested if requested in LEGACY_VERSIONS else LATEST_LEGACY_VERSION
        capabilities = params.get("capabilities")
        assert ex.identity is not None
        session = self._sealer.issue(
            version, capabilities if isinstance(capabilities, dict) else {}, ex.identity.owner
        )
        ex.session = session
        ex.response_headers[SESSION_HEADER] = session.id
        return shaped(
            "initialize",
            version,
            {"protocolVersion": version, "capabilities": self._capabilities, "serverInfo": self._server_info},
        )

    # -- tools/call --------------------------------------------------------------------------

    def _resolve(self, ex: Exchange, name: str) -> Tool | None:
        """The tool, or None (a fixture tool).

        Raises:
            RpcError: -32602 for a name no tool or alias has, or a tool hidden from this caller
                (then saying which setting hides it).
        """
        assert ex.identity is not None
        unknown = f"Unknown tool: {name[:128]}. Call tools/list for the tools this gateway serves."
        try:
            tool = self._registry.resolve(name, ex.identity.access)
        except ToolError as err:
            # Hidden tools are answered as unknown ones (the caller's tools/list does not have
            # them), with the setting to change; counted, so an operator sees agents reach for them.
            declared = self._registry.declared(name)
            self._telemetry.tool_call(declared.name if declared else "unknown", "unauthorized", None)
            ex.tool = declared.name if declared else None
            raise invalid_params(f"{unknown} {err.message}.") from None
        if tool is None:
            if self._fixtures is not None and self._fixtures.has(name):
                ex.tool = name
                return None
            raise invalid_params(unknown)
        ex.tool = tool.name
        return tool

    async def _tools_call(
        self, ex: Exchange, msg: JSONRPCRequest, open_stream: StreamFactory | None
    ) -> Reply | None:
        request = self._parse(ex, msg)
        params = request.params
        if not params.name:
            raise invalid_params(
                "Invalid params: tools/call needs params.name, the tool's name from tools/list."
            )
        raw_meta = (msg.params or {}).get("_meta")
        meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
        token = meta.get("progressToken")
        if token is not None and not is_request_id(token):
            raise invalid_params("Invalid params: _meta.progressToken must be a string or an integer.")
        resolved = self._resolve(ex, params.name)
        if resolved is None:
            assert self._fixtures is not None
            declared = (
                ex.envelope.client_capabilities
                if ex.envelope is not None
                else (ex.session.capabilities if ex.session is not None else {})
            )
            self._fixtures.check_capabilities(params.name, ex.era, declared)
            if open_stream is None:
                raise RpcError(INVALID_REQUEST, "Invalid Request: fixture tools cannot be batched.")
            await self._fixtures.serve(params.name, msg.id, meta, ex.version, open_stream())
            return None
        tool = resolved
        session_number = ex.session.number if ex.session is not None else None
        if session_number is not None and self._calls.in_session(session_number, msg.id):
            raise RpcError(
                INVALID_REQUEST,
                f"Invalid Request: request id {msg.id!r} is already in flight in this session.",
                http_status=400,
            )
        stream: EventStream | None = None
        reporter: ProgressReporter | None = None
        if open_stream is not None and (tool.runs_long(params.arguments) or token is not None):
            stream = open_stream()
            if not await stream.open():
                ex.outcome = "client_gone"
                await stream.close()
                return None
            if token is not None:
                reporter = ProgressReporter(stream, token)
        try:
            return await self._run(ex, msg, tool, params.arguments, stream, reporter)
        finally:
            if stream is not None:
                await stream.close()

    async def _run(
        self,
        ex: Exchange,
        msg: JSONRPCRequest,
        tool: Tool,
        arguments: dict[str, Any] | None,
        stream: EventStream | None,
        reporter: ProgressReporter | None,
    ) -> Reply | None:
        """Run the handler in a task registered for cancellation; count, time and answer it."""
        assert ex.identity is not None
        session_number = ex.session.number if ex.session is not None else None
        info = CallInfo(
            request_id=ex.request_id,
            principal=ex.identity.principal,
            session_id=session_number,
            has_progress_token=reporter is not None,
        )
        if reporter is not None:
            info.progress = reporter
        started = perf_counter()
        task = asyncio.create_task(self._registry.call(tool, ToolContext(self._services(), info), arguments))
        call = ToolCall(tool, msg.id, task, session_number, long_running=tool.runs_long(arguments))
        watcher: asyncio.Task[None] | None = None
        if stream is not None:
            stream.on_broken = lambda: call.cancel("client_gone")
        elif ex.connection_closed is not None:
            watcher = asyncio.create_task(cancel_when_closed(call, ex.connection_closed))
        self._calls.add(call)
        try:
            outcome = await await_call(call, ex.request_id)
        finally:
            if watcher is not None:
                watcher.cancel()
            self._calls.discard(call)
            if reporter is not None:
                reporter.stop()
        self._telemetry.tool_call(tool.name, outcome.outcome, perf_counter() - started)
        ex.outcome = outcome.outcome
        message = outcome.message
        if outcome.result is not None and message is None and outcome.outcome != "cancelled":
            message = response(msg.id, shaped_tool_result(ex.version, outcome.result))
        if stream is not None:
            delivered = message is not None and await stream.send(message, final=True)
            await settle(outcome.result, delivered, ex.request_id, stream.receipt)
            return None
        if message is None:
            await settle(outcome.result, False, ex.request_id)
            return None
        return Reply(message, result=outcome.result)

    # -- batches (2025-03-26 only) -----------------------------------------------------------

    async def batch(self, ex: Exchange, items: list[Any]) -> tuple[list[bytes], list[ToolResult]]:
        """Answer a JSON-RPC batch of a 2025-03-26 session: the responses (none when it held no
        request) and the results whose delivery the writer settles. ``initialize`` may not be
        batched (2025-03-26 basic/lifecycle); each ``tools/call`` runs without a stream."""
        answers = await asyncio.gather(*(self._batch_item(ex, raw) for raw in items))
        return [b for b, _ in answers if b is not None], [r for _, r in answers if r is not None]

    async def _batch_item(self, ex: Exchange, raw: Any) -> tuple[bytes | None, ToolResult | None]:
        try:
            msg = classify(raw)
        except RpcError as err:
            self._telemetry.request("other", "error")
            return err.encode(None), None
        if not isinstance(msg, JSONRPCRequest):
            if isinstance(msg, JSONRPCNotification):
                self.notification(ex, msg)
            self._telemetry.request(method_label(getattr(msg, "method", "response")), "ok")
            return None, None
        label = method_label(msg.method)
        item = Exchange(ex.request_id, ex.headers, ex.remote, {}, ex.era, None, ex.session, ex.identity)

        if msg.method == "initialize":
            error = RpcError(INVALID_REQUEST, "Invalid Request: initialize cannot be part of a batch.")
            self._telemetry.request(label, "error")
            return error.encode(msg.id), None
        reply = await self.request(item, msg, None)
        self._telemetry.request(label, "ok" if item.outcome not in ("error", "rejected") else "error")
        if reply is None:
            return None, None
        return reply.body, reply.result
