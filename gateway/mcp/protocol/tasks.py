"""The MCP tasks extension (``io.modelcontextprotocol/tasks``) for ``tools/call``, stateless era.

Source: https://github.com/modelcontextprotocol/ext-tasks (``specification/draft/tasks.md``).

- Advertised in ``server/discover`` under ``capabilities.extensions``.
- A ``tools/call`` whose request declares the extension in its ``_meta`` client capabilities,
  of a tool that may wait (``Tool.wait_argument``) for :data:`TASK_FROM_SECONDS` or longer,
  is answered with a ``CreateTaskResult`` (``resultType: "task"``) once the task is committed to
  the broker's database (:mod:`gateway.broker.tasks`), so a ``tasks/get`` on any replica finds it.
  Other calls, and every call of a client that did not declare the extension, are answered as
  usual. A tool that needs a task (``client_capabilities`` naming the extension) is refused with
  -32021 for such a client, by ``tools/call`` itself.
- The work runs on the replica that created the task, which renews a lease on it every third of
  ``broker.lease_seconds`` (the time after which the broker takes a replica that stopped
  renewing for gone, as for the messages it leases). A replica that answers ``tasks/get`` for a
  working task whose lease lapsed (its replica was killed) takes the task over and resumes the
  call with the time left (the wait argument set to it); the call polls GitLab through the
  same shared poller every wait uses (``gateway.tools.waiting``).
- ``tasks/get`` answers the ``DetailedTask``; ``tasks/cancel`` and ``tasks/update`` answer an
  empty ack (``resultType: "complete"``). A tool result (``isError`` too) completes a task; an
  exception of the tool fails it with the JSON-RPC error the call would have had.
- Task ids are 256 random bits; the database keeps a SHA-256 of the id and of the caller's
  binding (:func:`~gateway.mcp.protocol.task_parts.task_owner`: its client token, in
  passthrough its GitLab credential's digest, and its agent id). A task of another caller is
  answered as not found (-32602), exactly as an unknown id. A request whose tools are narrowed
  (its token's or its headers' toolsets) so that the task's tool is hidden from it is refused
  (-32602, saying which setting hides it): it neither reads the result nor takes the task over.
  A replica that takes a lapsed task over runs it as the caller of the ``tasks/get`` that found
  it, which is the task's own caller (same token or credential, same agent): its rights.
- Live tasks (working or waiting for input) per caller are capped at
  ``broker.tasks_per_caller``: a ``tools/call`` that would make one more is answered with a tool
  error (``rate_limited``) saying how many are live and what to do, counted as a gateway refusal
  in ``gateway_tool_calls_total``, and logged (``task refused: ...``).
- ``tasks/result`` and ``tasks/list`` (removed from the extension) answer -32601 as any
  unserved method; a client that did not declare the extension gets -32021 on ``tasks/*``.

Input during a task reuses the tool side of input-required results
(``gateway.tools.input_requests``): the work's ``ctx.ask`` (``task_parts.TaskAsker``) answers
from the task's stored answers; a question without one ends the run and parks the task as
``input_required``, its questions stored by key and surfaced as ``inputRequests`` by
``tasks/get``. ``tasks/update`` checks the ``inputResponses`` for outstanding keys as a
``tools/call``'s are checked (each the result its question's method defines), and an accepted
elicitation's content against the question's ``requestedSchema`` (-32602 naming the key
otherwise), then stores them (others are ignored, as the extension says); once none is
outstanding the replica that took the last answer runs the work again from the start, with every
answer. A tool that asks before its work becomes
a task (``Tool.asks_before_task``) asks in the ``tools/call`` itself, with input-required results,
and its task starts with those answers (``task_parts.StartTask``). ``notifications/tasks`` are
not sent (clients poll).
"""

from __future__ import annotations

import json
import logging
import math
import secrets
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from mcp_types import JSONRPCRequest

from gateway.broker.database import StoreError
from gateway.broker.tasks import FAILED, TERMINAL, WORKING, NewTask, TaskRow, TaskStore, id_hash
from gateway.errors import ToolError, gateway_refusal
from gateway.mcp.protocol.calls import ActiveCalls
from gateway.mcp.protocol.context import Reply, RequestContext
from gateway.mcp.protocol.eras import Era
from gateway.mcp.protocol.shaping import shaped_tool_result
from gateway.mcp.protocol.task_parts import (
    KEEP_SECONDS,
    LONGEST_WAIT_SECONDS,
    NOT_FOUND,
    POLL_MAX_MS,
    POLL_MIN_MS,
    TASK_FROM_SECONDS,
    TASKS_EXTENSION,
    check_responses,
    declares_tasks,
    detailed,
    error_object,
    missing_tasks_capability,
    requested_wait,
    task_owner,
)
from gateway.mcp.protocol.task_work import TaskWork
from gateway.mcp.protocol.telemetry import Telemetry
from gateway.mcp.protocol.wire import INTERNAL_ERROR, RpcError, invalid_params, response
from gateway.tools.context import ToolServices
from gateway.tools.registry import Registry, Tool
from gateway.tools.result import ToolResult

log = logging.getLogger("gateway.mcp.tasks")


class Tasks:
    """Creates tasks for ``tools/call`` and answers ``tasks/*``. One per protocol core.

    Args:
        registry: the served tools.
        telemetry: the app's MCP metrics (a task's call counts as a tool call when it ends).
        calls: calls in flight; a task's work is one of them, so shutdown stops it (its lease then
            lapses and another replica resumes it).
        services: the app-wide services (the broker's :class:`TaskStore` among them).
    """

    def __init__(
        self,
        registry: Registry,
        telemetry: Telemetry,
        calls: ActiveCalls,
        services: Callable[[], ToolServices],
    ) -> None:
        self._registry = registry
        self._telemetry = telemetry
        self._services = services
        #: This process, as a lease holder.
        self.replica = uuid.uuid4().hex
        self._work = TaskWork(registry, telemetry, calls, services, self.replica, self._lease)

    def _lease(self) -> float:
        return self._services().settings.broker.lease_seconds

    def _store(self) -> TaskStore | None:
        broker = self._services().broker
        return None if broker is None else broker.tasks

    def wants_task(self, ctx: RequestContext, tool: Tool, arguments: Mapping[str, Any] | None) -> bool:
        """Whether this ``tools/call`` is answered with a task: a tool that needs the extension
        always is; another when it may wait long enough (an operator's approval included)."""
        if not (ctx.era is Era.STATELESS and declares_tasks(ctx.client_capabilities)):
            return False
        settings = self._services().settings
        return (
            TASKS_EXTENSION in tool.client_capabilities
            or requested_wait(tool, arguments) >= TASK_FROM_SECONDS
            or (settings.confirm_by == "operator" and tool.runs_long(arguments, operator_confirms=True))
        ) and self._store() is not None

    async def create(
        self,
        ctx: RequestContext,
        msg: JSONRPCRequest,
        tool: Tool,
        arguments: dict[str, Any] | None,
        answers: Mapping[str, Any] | None = None,
    ) -> Reply | None:
        """Store a task for this call, start its work here, answer the ``CreateTaskResult``; a
        ``rate_limited`` tool error when the caller has its most live tasks already; None when the
        database cannot store it (the call is then answered without a task). ``answers``: those
        the call gathered before becoming a task (its work gets them)."""
        store = self._store()
        assert store is not None
        task_id = secrets.token_urlsafe(32)
        task_hash = id_hash(task_id)
        owner_hash = id_hash(task_owner(ctx.caller))
        wait = min(requested_wait(tool, arguments), LONGEST_WAIT_SECONDS)
        now = store.now()
        poll_ms = int(min(max(wait * 100, POLL_MIN_MS), POLL_MAX_MS))
        settings = self._services().settings
        hold = wait  # how long the call may run: its wait, or an operator's approval
        if settings.confirm_by == "operator" and tool.runs_long(arguments, operator_confirms=True):
            hold = max(wait, settings.confirm_wait_seconds)
        new = NewTask(
            id_hash=task_hash,
            owner_hash=owner_hash,
            tool=tool.name,
            arguments=json.dumps(arguments or {}),
            deadline=now + wait,
            expires=now + hold + KEEP_SECONDS,
            poll_ms=poll_ms,
            answers=json.dumps(dict(answers)) if answers else None,
        )
        cap = settings.broker.tasks_per_caller
        try:
            row = await store.create(new, self.replica, self._lease(), cap=cap)
        except StoreError as err:
            log.warning(
                "no task for %s: the database cannot store it (%s); answering the call without one",
                tool.name,
                err,
                extra={"request_id": ctx.request_id, "tool": tool.name},
            )
            return None
        if row is None:
            return self._refused(ctx, msg, tool, cap)
        self._start(store, task_hash, ctx, tool, arguments or {}, answers or {})
        ctx.report.outcome = "task"
        log.info("task created for %s", tool.name, extra={"request_id": ctx.request_id, "tool": tool.name})
        return Reply(response(msg.id, {"resultType": "task", **detailed(task_id, row)}))

    def _refused(self, ctx: RequestContext, msg: JSONRPCRequest, tool: Tool, cap: int) -> Reply:
        """The answer of a call past the caller's live tasks."""
        log.warning(
            "task refused: the caller has %d live tasks (broker.tasks_per_caller)",
            cap,
            extra={"request_id": ctx.request_id, "tool": tool.name},
        )
        self._telemetry.tool_call(
            tool.name, "rate_limited", None, toolset=tool.toolset, source="gateway", caller=ctx.caller
        )
        ctx.report.outcome = "rate_limited"
        error = gateway_refusal(
            "rate_limited",
            f"You have {cap} live tasks (working or waiting for input), the most this gateway keeps per "
            "caller (broker.tasks_per_caller), so no task was made for this call and nothing was done. "
            "Wait for some to end (tasks/get) or cancel those you no longer need (tasks/cancel), then call "
            "again.",
            live_tasks=cap,
        )
        assert ctx.version is not None
        result = ToolResult.from_error(error)
        shaped = shaped_tool_result(ctx.version, result, summary_text=ctx.caller.summary_text)
        return Reply(response(msg.id, shaped), result=result)

    # -- tasks/* ------------------------------------------------------------------------------

    async def answer(self, ctx: RequestContext, msg: JSONRPCRequest) -> Reply:
        """Answer ``tasks/get``, ``tasks/update`` or ``tasks/cancel``.

        Raises:
            RpcError: -32021 for a client that did not declare the extension, -32602 for a
                missing, unknown, foreign or expired task id, a task whose tool this request may
                not call, or answers that do not answer the task's questions.
        """
        if not declares_tasks(ctx.client_capabilities):
            raise missing_tasks_capability(msg.method)
        try:
            return await self._answer(ctx, msg)
        except StoreError:
            log.warning("%s not answered: the database failed", msg.method, exc_info=True)
            raise RpcError(
                INTERNAL_ERROR,
                f"Internal error: the gateway's task database cannot be reached; send {msg.method} "
                "again in a few seconds.",
            ) from None

    async def _answer(self, ctx: RequestContext, msg: JSONRPCRequest) -> Reply:
        params = msg.params or {}
        task_id = params.get("taskId")
        if not isinstance(task_id, str) or not task_id:
            raise invalid_params(
                f"Invalid params: {msg.method} needs params.taskId, the taskId tools/call gave."
            )
        store = self._store()
        if store is None:
            raise invalid_params(NOT_FOUND)
        task_hash = id_hash(task_id)
        row = await store.get(task_hash)
        if row is None or not secrets.compare_digest(row.owner_hash, id_hash(task_owner(ctx.caller))):
            raise invalid_params(NOT_FOUND)
        ctx.report.tool = row.tool
        if row.expires <= store.now():
            raise invalid_params("Failed to retrieve task: Task has expired. Call the tool again.")
        tool = self._tool_for(ctx, row)
        if msg.method == "tasks/cancel":
            await self._cancel(store, task_hash, row)
            return Reply(response(msg.id, {"resultType": "complete"}))
        if msg.method == "tasks/update":
            responses = params.get("inputResponses", {})
            if not isinstance(responses, dict):
                raise invalid_params(
                    "Invalid params: tasks/update needs params.inputResponses, an object of answers by "
                    "the keys of the task's inputRequests."
                )
            check_responses(json.loads(row.input_requests or "{}"), responses)
            resumed = await store.answer(task_hash, responses, self.replica, self._lease())
            if resumed is not None:
                await self._resume(store, task_hash, resumed, ctx, tool, "its last question was answered")
            return Reply(response(msg.id, {"resultType": "complete"}))
        lapsed = row.status == WORKING and row.lease_until < store.now()
        if lapsed and task_hash not in self._work.running:
            await self._take_over(store, task_hash, row, ctx, tool)
        return Reply(response(msg.id, {"resultType": "complete", **detailed(task_id, row)}))

    def _tool_for(self, ctx: RequestContext, row: TaskRow) -> Tool | None:
        """The task's tool as this request may call it; None when the gateway no longer serves it.

        Raises:
            RpcError: -32602 when this request's tools are narrowed so that the tool is hidden.
        """
        try:
            return self._registry.resolve(row.tool, ctx.caller.access)
        except ToolError as err:
            raise invalid_params(
                f"Invalid params: this task is a call of {row.tool}, which this request may not call "
                f"({err.message}), so it cannot read, answer or cancel it."
            ) from None

    async def _cancel(self, store: TaskStore, task_hash: str, row: TaskRow) -> None:
        if row.status in TERMINAL:
            return  # idempotent: the ack, and the task stays as it ended
        await store.cancel(task_hash, "Cancelled by the client (tasks/cancel).")
        running = self._work.running.get(task_hash)
        if running is not None:
            running.cancel()
        # Elsewhere, the replica running it sees the status at its next lease renewal.

    async def _take_over(
        self, store: TaskStore, task_hash: str, row: TaskRow, ctx: RequestContext, tool: Tool | None
    ) -> None:
        """Resume the work of a replica that went away, with the time it had left."""
        if await store.take_over(task_hash, self.replica, self._lease()):
            await self._resume(store, task_hash, row, ctx, tool, "its replica's lease lapsed")

    async def _resume(
        self, store: TaskStore, task_hash: str, row: TaskRow, ctx: RequestContext, tool: Tool | None, why: str
    ) -> None:
        """Run a task's work again here (its lease is ours), from the start, with its answers, as
        the caller of ``ctx`` (the task's own: :meth:`_answer` checked it)."""
        arguments: dict[str, Any] = json.loads(row.arguments)
        if tool is None:
            error = invalid_params(
                f"Unknown tool: {row.tool}. Call tools/list for the tools this gateway serves."
            )
            await store.finish(task_hash, FAILED, json.dumps(error_object(error)), error.message)
            return
        if tool.wait_argument is not None:
            arguments[tool.wait_argument] = max(0, math.ceil(row.deadline - store.now()))
        log.info(
            "task of %s resumed: %s",
            tool.name,
            why,
            extra={"request_id": ctx.request_id, "tool": tool.name},
        )
        self._start(store, task_hash, ctx, tool, arguments, json.loads(row.answers or "{}"))

    def _start(
        self,
        store: TaskStore,
        task_hash: str,
        ctx: RequestContext,
        tool: Tool,
        arguments: dict[str, Any],
        answers: Mapping[str, Any],
    ) -> None:
        """Run the work here as the caller of ``ctx``; it may ask what that request's client
        declared it can answer."""
        self._work.start(
            store,
            task_hash,
            request_id=ctx.request_id,
            caller=ctx.caller,
            capabilities=frozenset(ctx.client_capabilities),
            tool=tool,
            arguments=arguments,
            answers=answers,
        )
