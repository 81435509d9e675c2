"""``tools/call``: resolve the tool for this caller, run it as a cancellable call, answer it.

``tools/call`` resolves the name (aliases too). An unknown tool is ``-32602``, and so is a tool
hidden from the caller, whose message adds which setting hides it; a tool that needs a client
capability the client did not declare is ``-32021``. The reply follows events (the transport's
stream) when the tool runs long or the caller sent a ``progressToken``; a call is cancelled when
its client goes away (``RequestContext.events``' ``on_broken``, or ``disconnected``) or by
``notifications/cancelled`` (:class:`~gateway.mcp.protocol.calls.ActiveCalls`).

A handler may ask the client for input (``ToolContext.ask``): in the stateless era the call then
ends with an input-required result and is answered by the same call sent again
(:mod:`~gateway.mcp.protocol.input_required`); in a handshake session the question is a request
on the call's stream (:mod:`~gateway.mcp.protocol.client_requests`). A call that becomes a task
(:mod:`~gateway.mcp.protocol.tasks`) is answered with its ``CreateTaskResult`` at once, or, for a
tool that asks before its task (``Tool.asks_before_task``), once its first questions are answered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from time import perf_counter
from typing import Any

from mcp_types import LOG_LEVEL_META_KEY, JSONRPCRequest

from gateway.errors import ToolError
from gateway.mcp.protocol.calls import (
    ActiveCalls,
    LogReporter,
    ProgressReporter,
    ToolCall,
    await_call,
    cancel_when_closed,
)
from gateway.mcp.protocol.client_requests import PendingRequests, StreamAsker
from gateway.mcp.protocol.context import Events, Reply, RequestContext
from gateway.mcp.protocol.eras import Era
from gateway.mcp.protocol.input_required import InputRound, StateSealer, start_round
from gateway.mcp.protocol.shaping import shaped_tool_result
from gateway.mcp.protocol.task_parts import (
    TASKS_EXTENSION,
    StartTask,
    asking_before_task,
    declares_tasks,
    missing_tasks_capability,
)
from gateway.mcp.protocol.tasks import Tasks
from gateway.mcp.protocol.telemetry import Telemetry
from gateway.mcp.protocol.wire import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    RpcError,
    invalid_params,
    is_request_id,
    response,
)
from gateway.tools.context import CallInfo, ToolContext, ToolServices
from gateway.tools.registry import Registry, Tool

#: Parses a request in its revision (:meth:`McpServer._parse`).
Parse = Callable[[RequestContext, JSONRPCRequest], Any]


class ToolCalls:
    """Answers ``tools/call``. One per :class:`~gateway.mcp.protocol.server.McpServer`."""

    def __init__(
        self,
        registry: Registry,
        telemetry: Telemetry,
        calls: ActiveCalls,
        services: Callable[[], ToolServices],
        parse: Parse,
        sealer: StateSealer,
        pending: PendingRequests,
        tasks: Tasks | None = None,
    ) -> None:
        self._registry = registry
        self._telemetry = telemetry
        self._calls = calls
        self._services = services
        self._parse = parse
        self._sealer = sealer
        self._pending = pending
        self._tasks = tasks

    def _operator_confirms(self, tool: Tool) -> bool:
        """Whether an operator confirms ``tool``'s destructive calls here (they wait for it)."""
        return tool.confirms_when is not None and self._services().settings.confirm_by == "operator"

    def _resolve(self, ctx: RequestContext, name: str) -> Tool:
        """The tool called ``name`` this caller may call.

        Raises:
            RpcError: -32602 for a name no tool or alias has, or a tool hidden from this caller
                (then saying which setting hides it).
        """
        unknown = f"Unknown tool: {name[:128]}. Call tools/list for the tools this gateway serves."
        try:
            tool = self._registry.resolve(name, ctx.caller.access)
        except ToolError as err:
            # Hidden tools are answered as unknown ones (the caller's tools/list does not have
            # them), with the setting to change; counted, so an operator sees agents reach for them.
            declared = self._registry.declared(name)
            self._telemetry.tool_call(
                declared.name if declared else "unknown",
                "unauthorized",
                None,
                toolset=declared.toolset if declared else "unknown",
                source="gateway",
                caller=ctx.caller,
            )
            ctx.report.tool = declared.name if declared else None
            raise invalid_params(f"{unknown} {err.message}.") from None
        if tool is None:
            raise invalid_params(unknown)
        ctx.report.tool = tool.name
        return tool

    @staticmethod
    def _check_client_capabilities(ctx: RequestContext, tool: Tool) -> None:
        """-32021 when ``tool`` needs a capability the client did not declare (in the request's
        ``_meta``, or at ``initialize`` for a session)."""
        if TASKS_EXTENSION in tool.client_capabilities and not declares_tasks(ctx.client_capabilities):
            raise missing_tasks_capability(tool.name)
        missing = [
            name
            for name in tool.client_capabilities
            if name not in ctx.client_capabilities and name != TASKS_EXTENSION
        ]
        if missing:
            required: dict[str, Any] = {name: {} for name in tool.client_capabilities}
            raise RpcError(
                MISSING_REQUIRED_CLIENT_CAPABILITY,
                f"Missing required client capability: {tool.name} needs {', '.join(required)}; declare it "
                "in _meta clientCapabilities.",
                data={"requiredCapabilities": required},
            )

    async def call(self, ctx: RequestContext, msg: JSONRPCRequest) -> Reply:
        """Answer one ``tools/call``.

        Raises:
            RpcError: the request is refused (see the module docs).
        """
        params = self._parse(ctx, msg).params
        if not params.name:
            raise invalid_params(
                "Invalid params: tools/call needs params.name, the tool's name from tools/list."
            )
        raw_meta = (msg.params or {}).get("_meta")
        meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
        token = meta.get("progressToken")
        if token is not None and not is_request_id(token):
            raise invalid_params("Invalid params: _meta.progressToken must be a string or an integer.")
        tool = self._resolve(ctx, params.name)
        if tool.client_capabilities:
            self._check_client_capabilities(ctx, tool)
        if ctx.session is not None and self._calls.in_session(ctx.session, msg.id):
            raise RpcError(
                INVALID_REQUEST,
                f"Invalid Request: request id {msg.id!r} is already in flight in this session.",
            )
        wants_task = self._tasks is not None and self._tasks.wants_task(ctx, tool, params.arguments)
        if self._tasks is not None and wants_task and not tool.asks_before_task:
            created = await self._tasks.create(ctx, msg, tool, params.arguments)
            if created is not None:
                return created
        events: Events | None = None
        long = tool.runs_long(params.arguments, operator_confirms=self._operator_confirms(tool))
        if ctx.events is not None and (long or token is not None):
            if not await ctx.events.open():
                ctx.report.outcome = "client_gone"
                return Reply(None)
            events = ctx.events
        info = CallInfo(
            request_id=ctx.request_id,
            caller=ctx.caller,
            session_id=ctx.session,
            has_progress_token=events is not None and token is not None,
            client_capabilities=frozenset(ctx.client_capabilities),
        )
        round_: InputRound | None = None
        if ctx.era is Era.STATELESS:
            round_ = start_round(
                self._sealer,
                method="tools/call",
                params=msg.params or {},
                owner=ctx.caller.owner,
                capabilities=ctx.client_capabilities,
            )
            info.ask = round_.asker
            if wants_task and tool.asks_before_task:
                info.ask = asking_before_task(round_.asker, round_.asker.used)
        elif ctx.session is not None and ctx.events is not None:
            # Its questions go on the call's stream, which they open if nothing else did.
            info.ask = StreamAsker(ctx.events, ctx.session, self._pending, info.client_capabilities)
        progress: ProgressReporter | None = None
        log: LogReporter | None = None
        if events is not None:
            if token is not None:
                info.progress = progress = ProgressReporter(events, token)
            if ctx.era is Era.HANDSHAKE or LOG_LEVEL_META_KEY in meta:
                info.log = log = LogReporter(events)
        try:
            stream = events if events is not None or round_ is not None else ctx.events
            return await self._run(ctx, msg, tool, params.arguments, info, stream, round_, long)
        finally:
            if progress is not None:
                progress.stop()
            if log is not None:
                log.stop()

    async def _run(
        self,
        ctx: RequestContext,
        msg: JSONRPCRequest,
        tool: Tool,
        arguments: dict[str, Any] | None,
        info: CallInfo,
        events: Events | None,
        round_: InputRound | None,
        long: bool,
    ) -> Reply:
        """Run the handler in a task registered for cancellation; count, time and answer it.
        ``events``: the stream whose breaking cancels the call (it may open only when the handler
        asks the client something); ``long``: the call may wait (:meth:`Tool.runs_long`)."""
        started = perf_counter()
        task = asyncio.create_task(self._registry.call(tool, ToolContext(self._services(), info), arguments))
        call = ToolCall(tool, msg.id, task, ctx.session, long_running=long)
        watcher: asyncio.Task[None] | None = None
        if events is not None:
            events.on_broken = lambda: call.cancel("client_gone")
        elif ctx.disconnected is not None:
            watcher = asyncio.create_task(cancel_when_closed(call, ctx.disconnected))
        self._calls.add(call)
        try:
            outcome = await await_call(call, ctx.request_id)
        finally:
            if watcher is not None:
                watcher.cancel()
            self._calls.discard(call)
        refused = outcome.result is not None and outcome.result.by_gateway
        self._telemetry.tool_call(
            tool.name,
            outcome.outcome,
            perf_counter() - started,
            toolset=tool.toolset,
            source="gateway" if refused else "tool",
            caller=ctx.caller,
        )
        ctx.report.outcome = outcome.outcome
        message = outcome.message
        if isinstance(outcome.asked, StartTask) and self._tasks is not None:
            created = await self._tasks.create(ctx, msg, tool, arguments, outcome.asked.answered)
            if created is not None:
                return created
            raise RpcError(
                INTERNAL_ERROR,
                f"Internal error: {tool.name} runs as a task and the gateway's task database cannot "
                "store it; call it again in a few seconds.",
            )
        if outcome.asked is not None and round_ is not None:
            assert ctx.version is not None
            result = round_.result(self._sealer, outcome.asked, ctx.version, "tools/call")
            return Reply(response(msg.id, result))
        if outcome.asked is not None:  # a handshake-era ask answers on the stream, never so
            raise RuntimeError(f"{tool.name} ended input-required outside the 2026-07-28 era")
        if outcome.result is not None and message is None and outcome.outcome != "cancelled":
            assert ctx.version is not None
            shaped = shaped_tool_result(ctx.version, outcome.result, summary_text=ctx.caller.summary_text)
            message = response(msg.id, shaped)
        return Reply(message, result=outcome.result)
