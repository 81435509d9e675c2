"""The MCP protocol core: a parsed JSON-RPC message and its :class:`RequestContext` in, protocol
replies out, for both eras. It knows no transport: no HTTP status, no header, no connection;
stdio could drive it as HTTP does (``gateway.mcp.http``).

Request params are validated against the schema of the request's revision
(``mcp_types.methods``), and every result is shaped by that revision's result type
(``shaping``).

Handshake era (MCP 2025-11-25 basic/lifecycle, server/tools): ``initialize`` (echoes a supported
``protocolVersion``, else answers the newest, and asks the transport to open a session),
``ping``, ``tools/list``, ``tools/call``; notifications are accepted. Batches (2025-03-26) are
answered item by item.

Stateless era (MCP 2026-07-28): ``server/discover``, ``tools/list`` (with ``ttlMs``,
``cacheScope``, in declaration order), ``tools/call``.

``tools/list`` lists the tools the caller may call: what the deployment serves, narrowed by the
caller's ``Caller.access``; such a list is ``cacheScope: private`` in the stateless era.
``tools/call`` is :mod:`gateway.mcp.protocol.tool_calls`.

A test mode may add methods and capabilities (:class:`Extension`); its tools are ordinary tools
of the registry.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from mcp_types import (
    SERVER_INFO_META_KEY,
    Implementation,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    ServerCapabilities,
    ToolsCapability,
)
from pydantic import ValidationError

from gateway import __version__
from gateway.mcp.protocol.calls import ActiveCalls
from gateway.mcp.protocol.client_requests import PendingRequests
from gateway.mcp.protocol.context import Reply, Report, RequestContext
from gateway.mcp.protocol.eras import (
    HANDSHAKE_VERSIONS,
    LATEST_HANDSHAKE_VERSION,
    STATELESS_METHODS,
    SUPPORTED_VERSIONS,
    Era,
)
from gateway.mcp.protocol.input_required import StateSealer, start_round
from gateway.mcp.protocol.shaping import paginate, shaped
from gateway.mcp.protocol.task_parts import TASK_METHODS, TASKS_EXTENSION
from gateway.mcp.protocol.tasks import Tasks
from gateway.mcp.protocol.telemetry import Telemetry
from gateway.mcp.protocol.tool_calls import ToolCalls
from gateway.mcp.protocol.wire import (
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
from gateway.tools.context import ToolServices
from gateway.tools.input_requests import AskFn, InputRequired
from gateway.tools.registry import Registry

#: How long a stateless client may reuse ``tools/list`` and ``server/discover`` results: the tool
#: set is fixed for the life of the process, and a redeploy is picked up within this time.
LIST_TTL_MS: Final = 600_000

#: Distinct narrowed tool lists kept (one per client token and combination of ``X-MCP-*`` headers).
_NARROWED_PAGES_KEPT: Final = 64

_PARAMS_HINTS: Final = {
    "tools/list": " Pass the nextCursor of a previous tools/list result, or no cursor for the first page.",
    "tools/call": " Send params.name (a tool's name from tools/list) and params.arguments (a JSON object).",
}


@dataclass(frozen=True)
class Extension:
    """Methods and capabilities a test mode adds to the core.

    Attributes:
        methods: method → its (fixed) result, in the order the method-not-found message names them.
        stateless: those of ``methods`` the stateless era serves too.
        capabilities: ``ServerCapabilities`` fields to add (by field name).
    """

    methods: Mapping[str, dict[str, Any]]
    stateless: frozenset[str] = frozenset()
    capabilities: Mapping[str, Any] = field(default_factory=dict)
    #: Methods answered by a handler that may ask the client for input (2026-07-28 only):
    #: ``(params, ask) -> result``.
    handlers: Mapping[str, ExtensionHandler] = field(default_factory=dict)


#: A test mode's method: its params and the client's ``ask`` in, its result out.
ExtensionHandler = Callable[[Mapping[str, Any], AskFn], Awaitable[dict[str, Any]]]


class McpServer:
    """Answers the JSON-RPC messages of authenticated callers. One per app.

    Args:
        registry: the served tools.
        telemetry: the app's MCP metrics.
        calls: calls in flight (shutdown and ``notifications/cancelled`` reach them).
        services: returns the app-wide services (built at start-up).
        page_size: ``tools/list`` page size.
        extension: what a test mode adds, else None.
        state_sealer: seals the ``requestState`` of input-required results (None: a key of this
            process's own, as tests use).
        pending: server-to-client requests awaiting their responses (handshake sessions).
    """

    def __init__(
        self,
        *,
        registry: Registry,
        telemetry: Telemetry,
        calls: ActiveCalls,
        services: Callable[[], ToolServices],
        page_size: int,
        extension: Extension | None = None,
        state_sealer: StateSealer | None = None,
        pending: PendingRequests | None = None,
        batch_concurrency: int = 4,
    ) -> None:
        self._registry = registry
        self._batch_concurrency = batch_concurrency
        self._telemetry = telemetry
        self._calls = calls
        self._extension = extension or Extension(methods={})
        self._page_size = page_size
        #: ``tools/list`` pages of callers without limits, built at the first (with the tools'
        #: schemas, and the registry's first use imports the tool modules): not at start.
        self._pages: dict[str | None, dict[str, Any]] | None = None
        #: ``tools/list`` pages of narrowed callers, by their access; bounded, since a request's
        #: headers choose it.
        self._narrowed_pages: OrderedDict[ToolAccess, dict[str | None, dict[str, Any]]] = OrderedDict()
        #: The methods a stateless request may name.
        self.stateless_methods = STATELESS_METHODS | TASK_METHODS | self._extension.stateless
        capabilities = ServerCapabilities(tools=ToolsCapability(list_changed=False))
        if self._extension.capabilities:
            capabilities = capabilities.model_copy(update=dict(self._extension.capabilities))
        self._capabilities = capabilities.model_dump(by_alias=True, exclude_none=True, mode="json")
        #: What ``server/discover`` says: the capabilities and the extensions of the stateless era.
        self._discover_capabilities = {**self._capabilities, "extensions": {TASKS_EXTENSION: {}}}
        self._server_info = Implementation(
            name=SERVER_NAME, title=SERVER_TITLE, version=__version__
        ).model_dump(by_alias=True, exclude_none=True, mode="json")
        self._tasks = Tasks(registry, telemetry, calls, services)
        self._sealer = state_sealer or StateSealer(os.urandom(32))
        self._pending = pending or PendingRequests()
        self._tool_calls = ToolCalls(
            registry,
            telemetry,
            calls,
            services,
            self._parse,
            self._sealer,
            self._pending,
            self._tasks,
        )

    def _pages_for(self, access: ToolAccess) -> dict[str | None, dict[str, Any]]:
        """The ``tools/list`` pages of a caller with ``access``, built once per distinct access."""
        if not access.layers:
            if self._pages is None:
                self._pages = paginate(self._registry.listed_for(NO_LIMITS), self._page_size)
            return self._pages
        pages = self._narrowed_pages.get(access)
        if pages is None:
            pages = paginate(self._registry.listed_for(access), self._page_size)
            self._narrowed_pages[access] = pages
            if len(self._narrowed_pages) > _NARROWED_PAGES_KEPT:
                self._narrowed_pages.popitem(last=False)
        else:
            self._narrowed_pages.move_to_end(access)
        return pages

    # -- single messages ---------------------------------------------------------------------

    def request(self, ctx: RequestContext, msg: JSONRPCRequest) -> Awaitable[Reply]:
        """Answer one request. Its notifications (progress) go to ``ctx.events`` first, when the
        context has them; without, the reply alone is given (as inside a batch)."""
        if tracing.ENABLED:  # else no span and no coroutine frame of its own
            return self._traced(ctx, msg)
        return self._answer(ctx, msg)

    async def _traced(self, ctx: RequestContext, msg: JSONRPCRequest) -> Reply:
        """:meth:`_answer` under the request's span (its parent: the caller's trace context)."""
        meta = (msg.params or {}).get("_meta")
        # The method's label: a closed set, so a caller cannot name spans at will.
        method = method_label(msg.method)
        span = tracing.mcp_span(method, msg.id, meta if isinstance(meta, dict) else {}, ctx.trace_carrier)
        reply: Reply | None = None
        outcome: str | None = None
        try:
            reply = await self._answer(ctx, msg)
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
                tool=ctx.report.tool,
                outcome=outcome or ctx.report.outcome,
                tool_error=result is not None and result.is_error,
                session=ctx.session_log_id,
                version=ctx.version,
                agent=ctx.caller.agent_id,
                user=ctx.caller.gitlab_user,
            )

    async def _answer(self, ctx: RequestContext, msg: JSONRPCRequest) -> Reply:
        try:
            if msg.method == "tools/call":
                return await self._tool_calls.call(ctx, msg)
            if msg.method in TASK_METHODS and ctx.era is Era.STATELESS:
                return await self._tasks.answer(ctx, msg)
            if msg.method in self._extension.handlers and ctx.era is Era.STATELESS:
                return Reply(response(msg.id, await self._extension_call(ctx, msg)))
            return Reply(response(msg.id, self._simple(ctx, msg)))
        except RpcError as err:
            ctx.report.outcome = "rejected" if err.code == INVALID_REQUEST else "error"
            return Reply(err.encode(msg.id), error=err)

    def notification(self, ctx: RequestContext, msg: JSONRPCNotification) -> None:
        """Apply a client notification (always accepted)."""
        if msg.method == "notifications/cancelled" and ctx.session is not None and msg.params:
            # Unknown or finished ids are ignored (MCP basic/utilities/cancellation).
            request_id = msg.params.get("requestId")
            if is_request_id(request_id):
                self._calls.cancel_in_session(ctx.session, request_id, "client")

    def client_response(self, ctx: RequestContext, msg: JSONRPCResponse | JSONRPCError) -> None:
        """Hand a client's response (to a request the gateway sent on a call's stream) to the
        call waiting for it; one that nothing waits for is dropped."""
        if ctx.session is None:
            return
        if isinstance(msg, JSONRPCResponse):
            self._pending.resolve(ctx.session, msg.id, True, msg.result)
        else:
            self._pending.resolve(ctx.session, msg.id, False, msg.error)

    async def _extension_call(self, ctx: RequestContext, msg: JSONRPCRequest) -> dict[str, Any]:
        """A test mode's method that may end input-required (2026-07-28)."""
        self._parse(ctx, msg)
        assert ctx.version is not None
        params = msg.params or {}
        round_ = start_round(
            self._sealer,
            method=msg.method,
            params=params,
            owner=ctx.caller.owner,
            capabilities=ctx.client_capabilities,
        )
        try:
            result = await self._extension.handlers[msg.method](params, round_.asker)
        except InputRequired as asked:
            return round_.result(self._sealer, asked, ctx.version, msg.method)
        return shaped(msg.method, ctx.version, result)

    def _parse(self, ctx: RequestContext, msg: JSONRPCRequest) -> Any:
        """The typed request of ``msg`` in its revision.

        Raises:
            RpcError: -32601 for a method the revision does not have, -32602 for bad params.
        """
        assert ctx.version is not None, "a request is parsed in the revision it speaks"
        # Both revisions' models (about 7 MiB, a tenth of a second to build) load at the first
        # request that needs them, not at start; afterwards this import is a lookup in
        # sys.modules (``from mcp_types import methods`` would also run importlib's Python-level
        # ``_handle_fromlist`` on every request).
        import mcp_types.methods

        try:
            return mcp_types.methods.parse_client_request(msg.method, ctx.version, msg.params)
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
        if self._extension.methods or self._extension.handlers:
            served += ", " + " and ".join([*self._extension.methods, *self._extension.handlers])
        return RpcError(
            METHOD_NOT_FOUND, f"Method not found: {method[:100]}. This server implements {served}."
        )

    def _simple(self, ctx: RequestContext, msg: JSONRPCRequest) -> dict[str, Any]:
        method = msg.method
        if method == "initialize":
            return self._initialize(ctx, msg)
        request = self._parse(ctx, msg)
        assert ctx.version is not None
        if method == "ping":
            return {}
        access = ctx.caller.access
        # A list narrowed for this caller must not be served to others from a shared cache.
        cache_scope = "private" if access.layers else "public"
        if method == "server/discover":
            return shaped(
                method,
                ctx.version,
                {
                    "supportedVersions": list(SUPPORTED_VERSIONS),
                    "capabilities": self._discover_capabilities,
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
            if ctx.era is Era.STATELESS:
                page = {**page, "ttlMs": LIST_TTL_MS, "cacheScope": cache_scope}
            return shaped(method, ctx.version, page)
        extra = self._extension.methods.get(method)
        if extra is not None:
            return shaped(method, ctx.version, extra)
        raise self._method_not_found(method)

    def _initialize(self, ctx: RequestContext, msg: JSONRPCRequest) -> dict[str, Any]:
        params = msg.params or {}
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise invalid_params(
                "Invalid params: initialize needs params.protocolVersion, a string such as "
                f"{LATEST_HANDSHAKE_VERSION!r}."
            )
        version = requested if requested in HANDSHAKE_VERSIONS else LATEST_HANDSHAKE_VERSION
        capabilities = params.get("capabilities")
        assert ctx.open_session is not None, "initialize is answered where sessions can be opened"
        ctx.session_log_id = ctx.open_session(version, capabilities if isinstance(capabilities, dict) else {})
        ctx.version = version
        return shaped(
            "initialize",
            version,
            {"protocolVersion": version, "capabilities": self._capabilities, "serverInfo": self._server_info},
        )

    # -- batches (2025-03-26 only) -----------------------------------------------------------

    async def batch(self, ctx: RequestContext, items: list[Any]) -> list[Reply]:
        """Answer a JSON-RPC batch of a 2025-03-26 session: a reply per request (none for
        notifications and responses). ``initialize`` may not be batched (2025-03-26
        basic/lifecycle); each ``tools/call`` is answered without events. At most
        ``batch_concurrency`` of its messages run at a time (each ``tools/call`` counted against
        its caller's limits as a single call is), so one POST cannot start a crowd of GitLab
        requests at once."""
        turns = asyncio.Semaphore(self._batch_concurrency)

        async def in_turn(raw: Any) -> Reply | None:
            async with turns:
                return await self._batch_item(ctx, raw)

        replies = await asyncio.gather(*(in_turn(raw) for raw in items))
        return [reply for reply in replies if reply is not None]

    async def _batch_item(self, ctx: RequestContext, raw: Any) -> Reply | None:
        try:
            msg = classify(raw)
        except RpcError as err:
            self._telemetry.request("other", "error")
            return Reply(err.encode(None), error=err)
        if not isinstance(msg, JSONRPCRequest):
            if isinstance(msg, JSONRPCNotification):
                self.notification(ctx, msg)
            self._telemetry.request(method_label(getattr(msg, "method", "response")), "ok")
            return None
        label = method_label(msg.method)
        if msg.method == "initialize":
            error = RpcError(INVALID_REQUEST, "Invalid Request: initialize cannot be part of a batch.")
            self._telemetry.request(label, "error")
            return Reply(error.encode(msg.id), error=error)
        item = dataclasses.replace(ctx, events=None, disconnected=None, report=Report())
        reply = await self.request(item, msg)
        self._telemetry.request(label, "ok" if item.report.outcome not in ("error", "rejected") else "error")
        return reply
