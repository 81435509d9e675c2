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
  binding (``Caller.owner``: its client token's agent, its GitLab credential's digest). A task of
  another caller is answered as not found (-32602), exactly as an unknown id.
- ``tasks/result`` and ``tasks/list`` (removed from the extension) answer -32601 as any
  unserved method; a client that did not declare the extension gets -32021 on ``tasks/*``.

Input during a task reuses the tool side of input-required results
(``gateway.tools.input_requests``): the work's ``ctx.ask`` (:class:`TaskAsker`) answers from the
task's stored answers; a question without one ends the run and parks the task as
``input_required``, its questions stored by key and surfaced as ``inputRequests`` by
``tasks/get``. ``tasks/update`` stores the ``inputResponses`` for outstanding keys (others are
ignored, as the extension says); once none is outstanding the replica that took the last answer
runs the work again from the start, with every answer. A tool that asks before its work becomes
a task (``Tool.asks_before_task``) asks in the ``tools/call`` itself, with input-required results,
and its task starts with those answers (:class:`StartTask`). ``notifications/tasks`` are not
sent (clients poll).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import secrets
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from time import perf_counter
from typing import Any, Final

from mcp_types import JSONRPCRequest

from gateway.broker.database import StoreError
from gateway.broker.tasks import (
    CANCELLED,
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    TERMINAL,
    WORKING,
    NewTask,
    TaskRow,
    TaskStore,
    id_hash,
)
from gateway.errors import ToolError
from gateway.mcp.protocol.calls import ActiveCalls, ToolCall, tool_outcome
from gateway.mcp.protocol.context import Reply, RequestContext
from gateway.mcp.protocol.eras import STATELESS_VERSIONS, Era
from gateway.mcp.protocol.shaping import shaped_tool_result
from gateway.mcp.protocol.telemetry import Telemetry
from gateway.mcp.protocol.wire import (
    INTERNAL_ERROR,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    RpcError,
    invalid_params,
    response,
)
from gateway.tools.caller import Caller
from gateway.tools.context import CallInfo, ToolContext, ToolServices
from gateway.tools.input_requests import Answers, AskFn, CannotAsk, InputRequest, InputRequired
from gateway.tools.registry import Registry, Tool, parse_arguments

log = logging.getLogger("gateway.mcp.tasks")

#: The extension's identifier, in ``capabilities.extensions`` both ways.
TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"
#: The methods it adds, served in the stateless era.
TASK_METHODS: Final = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})
#: A call that may wait this long or longer becomes a task (for a client of the extension).
TASK_FROM_SECONDS: Final = 1.0
#: A wait argument left out and without a default (``wait_for_message``'s ``timeout_sec``).
LONGEST_WAIT_SECONDS: Final = 3600.0
#: How long a task stays readable after its wait could have ended (its TTL is this plus the wait).
KEEP_SECONDS: Final = 3600.0
#: ``pollIntervalMs`` bounds: a tenth of the wait, within these.
POLL_MIN_MS: Final = 500
POLL_MAX_MS: Final = 5000

_NOT_FOUND: Final = "Failed to retrieve task: Task not found. Pass the taskId of a task you created."


def iso_ms(ts: float) -> str:
    """Unix time → ISO 8601 UTC with milliseconds (``2026-07-28T10:30:00.123Z``)."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def declares_tasks(capabilities: Mapping[str, Any]) -> bool:
    """Whether a request's client capabilities name the extension."""
    extensions = capabilities.get("extensions")
    return isinstance(extensions, Mapping) and TASKS_EXTENSION in extensions


def requested_wait(tool: Tool, arguments: Mapping[str, Any] | None) -> float:
    """The seconds a call of ``tool`` may wait: its wait argument as validated (its default when
    left out); 0 for a tool that does not wait and for arguments the call refuses at once."""
    name = tool.wait_argument
    if name is None:
        return 0.0
    try:
        parsed = parse_arguments(tool, dict(arguments or {}))
    except ToolError:
        return 0.0
    value = getattr(parsed, name, None)
    return LONGEST_WAIT_SECONDS if value is None else float(value)


def missing_tasks_capability(what: str) -> RpcError:
    """-32021 naming the extension in ``requiredCapabilities``."""
    return RpcError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        f"Missing required client capability: {what} needs the {TASKS_EXTENSION} extension; declare it "
        "in _meta clientCapabilities.extensions.",
        data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
    )


def detailed(task_id: str, row: TaskRow) -> dict[str, Any]:
    """The extension's ``Task`` of ``row``, with its status's payload (``result``, ``error``)."""
    out: dict[str, Any] = {
        "taskId": task_id,
        "status": row.status,
        "createdAt": iso_ms(row.created),
        "lastUpdatedAt": iso_ms(row.updated),
        "ttlMs": round((row.expires - row.created) * 1000),
        "pollIntervalMs": row.poll_ms,
    }
    if row.status_message:
        out["statusMessage"] = row.status_message
    if row.status == COMPLETED and row.outcome is not None:
        out["result"] = json.loads(row.outcome)
    elif row.status == FAILED and row.outcome is not None:
        out["error"] = json.loads(row.outcome)
    elif row.status == INPUT_REQUIRED:
        out["inputRequests"] = json.loads(row.input_requests or "{}")
    return out


class StartTask(InputRequired):
    """Raised by the ``ask`` of the ``tools/call`` of a tool that asks before its task
    (``Tool.asks_before_task``) once every question it asked is answered: the call becomes a
    task that starts with ``answered``."""

    def __init__(self, answered: Mapping[str, Any]) -> None:
        super().__init__({}, answered)


def asking_before_task(asker: AskFn, used: Mapping[str, Any]) -> AskFn:
    """The ``ask`` of such a ``tools/call``: ``asker`` (the round's, which ends the call
    input-required while an answer is missing), then :class:`StartTask` with ``used`` (every
    answer the round used)."""

    async def ask(requests: Mapping[str, InputRequest]) -> Answers:
        await asker(requests)
        raise StartTask(used)

    return ask


class TaskAsker:
    """``CallInfo.ask`` of a task's work: the stored answers by key; a question without one
    ends the run with :class:`InputRequired` (the task then waits on it)."""

    def __init__(self, capabilities: Iterable[str], answers: Mapping[str, Any]) -> None:
        self._capabilities = frozenset(capabilities)
        self._answers = dict(answers)

    async def __call__(self, requests: Mapping[str, InputRequest]) -> Answers:
        for request in requests.values():
            if request.capability not in self._capabilities:
                raise CannotAsk(request.capability)
        known = {key: self._answers[key] for key in requests if key in self._answers}
        missing = {key: request for key, request in requests.items() if key not in self._answers}
        if missing:
            raise InputRequired(missing, known)
        return Answers(known)


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
        self._calls = calls
        self._services = services
        #: This process, as a lease holder.
        self.replica = uuid.uuid4().hex
        #: The work running here, by task hash.
        self._running: dict[str, asyncio.Task[None]] = {}

    def _lease(self) -> float:
        return self._services().settings.broker.lease_seconds

    def _store(self) -> TaskStore | None:
        broker = self._services().broker
        return None if broker is None else broker.tasks

    def wants_task(self, ctx: RequestContext, tool: Tool, arguments: Mapping[str, Any] | None) -> bool:
        """Whether this ``tools/call`` is answered with a task: a tool that needs the extension
        always is; another when it may wait long enough."""
        return (
            ctx.era is Era.STATELESS
            and declares_tasks(ctx.client_capabilities)
            and (
                TASKS_EXTENSION in tool.client_capabilities
                or requested_wait(tool, arguments) >= TASK_FROM_SECONDS
            )
            and self._store() is not None
        )

    async def create(
        self,
        ctx: RequestContext,
        msg: JSONRPCRequest,
        tool: Tool,
        arguments: dict[str, Any] | None,
        answers: Mapping[str, Any] | None = None,
    ) -> Reply | None:
        """Store a task for this call, start its work here, answer the ``CreateTaskResult``; None
        when the database cannot store it (the call is then answered without a task).
        ``answers``: those the call gathered before becoming a task (its work gets them)."""
        store = self._store()
        assert store is not None
        task_id = secrets.token_urlsafe(32)
        task_hash = id_hash(task_id)
        wait = min(requested_wait(tool, arguments), LONGEST_WAIT_SECONDS)
        now = store.now()
        poll_ms = int(min(max(wait * 100, POLL_MIN_MS), POLL_MAX_MS))
        new = NewTask(
            id_hash=task_hash,
            owner_hash=id_hash(ctx.caller.owner),
            tool=tool.name,
            arguments=json.dumps(arguments or {}),
            deadline=now + wait,
            expires=now + wait + KEEP_SECONDS,
            poll_ms=poll_ms,
            answers=json.dumps(dict(answers)) if answers else None,
        )
        try:
            row = await store.create(new, self.replica, self._lease())
        except StoreError as err:
            log.warning(
                "no task for %s: the database cannot store it (%s); answering the call without one",
                tool.name,
                err,
                extra={"request_id": ctx.request_id, "tool": tool.name},
            )
            return None
        self._start(store, task_hash, ctx, tool, arguments or {}, answers or {})
        ctx.report.outcome = "task"
        log.info("task created for %s", tool.name, extra={"request_id": ctx.request_id, "tool": tool.name})
        return Reply(response(msg.id, {"resultType": "task", **detailed(task_id, row)}))

    # -- tasks/* ------------------------------------------------------------------------------

    async def answer(self, ctx: RequestContext, msg: JSONRPCRequest) -> Reply:
        """Answer ``tasks/get``, ``tasks/update`` or ``tasks/cancel``.

        Raises:
            RpcError: -32021 for a client that did not declare the extension, -32602 for a
                missing, unknown, foreign or expired task id.
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
            raise invalid_params(_NOT_FOUND)
        task_hash = id_hash(task_id)
        row = await store.get(task_hash)
        if row is None or not secrets.compare_digest(row.owner_hash, id_hash(ctx.caller.owner)):
            raise invalid_params(_NOT_FOUND)
        ctx.report.tool = row.tool
        if row.expires <= store.now():
            raise invalid_params("Failed to retrieve task: Task has expired. Call the tool again.")
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
            resumed = await store.answer(task_hash, responses, self.replica, self._lease())
            if resumed is not None:
                await self._resume(store, task_hash, resumed, ctx, "its last question was answered")
            return Reply(response(msg.id, {"resultType": "complete"}))
        if row.status == WORKING and row.lease_until < store.now() and task_hash not in self._running:
            await self._take_over(store, task_hash, row, ctx)
        return Reply(response(msg.id, {"resultType": "complete", **detailed(task_id, row)}))

    async def _cancel(self, store: TaskStore, task_hash: str, row: TaskRow) -> None:
        if row.status in TERMINAL:
            return  # idempotent: the ack, and the task stays as it ended
        await store.cancel(task_hash, "Cancelled by the client (tasks/cancel).")
        running = self._running.get(task_hash)
        if running is not None:
            running.cancel()
        # Elsewhere, the replica running it sees the status at its next lease renewal.

    async def _take_over(self, store: TaskStore, task_hash: str, row: TaskRow, ctx: RequestContext) -> None:
        """Resume the work of a replica that went away, with the time it had left."""
        if not await store.take_over(task_hash, self.replica, self._lease()):
            return  # another replica did, at the same time
        await self._resume(store, task_hash, row, ctx, "its replica's lease lapsed")

    async def _resume(
        self, store: TaskStore, task_hash: str, row: TaskRow, ctx: RequestContext, why: str
    ) -> None:
        """Run a task's work again here (its lease is ours), from the start, with its answers."""
        arguments: dict[str, Any] = json.loads(row.arguments)
        try:
            tool = self._registry.resolve(row.tool, ctx.caller.access)
        except ToolError:
            tool = None
        if tool is None:
            error = invalid_params(
                f"Unknown tool: {row.tool}. Call tools/list for the tools this gateway serves."
            )
            await store.finish(task_hash, FAILED, json.dumps(_error_object(error)), error.message)
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

    # -- the work -----------------------------------------------------------------------------

    def _start(
        self,
        store: TaskStore,
        task_hash: str,
        ctx: RequestContext,
        tool: Tool,
        arguments: dict[str, Any],
        answers: Mapping[str, Any],
    ) -> None:
        """Run the work here; it may ask what the client of ``ctx`` (the request that starts or
        resumes it) declared it can answer."""
        request_id = ctx.request_id
        capabilities = frozenset(ctx.client_capabilities)
        info = CallInfo(
            request_id=request_id,
            caller=ctx.caller,
            client_capabilities=capabilities,
            ask=TaskAsker(capabilities, answers),
        )
        run = asyncio.create_task(self._registry.call(tool, ToolContext(self._services(), info), arguments))
        call = ToolCall(tool, request_id, run, long_running=True)
        self._calls.add(call)
        work = asyncio.create_task(self._work(store, task_hash, call, request_id, ctx.caller))
        self._running[task_hash] = work
        work.add_done_callback(lambda _: self._running.pop(task_hash, None))

    async def _work(
        self, store: TaskStore, task_hash: str, call: ToolCall, request_id: str, caller: Caller
    ) -> None:
        """Await the call while renewing the lease; store how it ended."""
        summary_text = caller.summary_text
        started = perf_counter()
        renewing = asyncio.create_task(self._renew(store, task_hash, call))
        try:
            await asyncio.wait((call.task,))
        except asyncio.CancelledError:  # tasks/cancel on this replica
            call.cancel("client")
            await asyncio.wait((call.task,))
        finally:
            renewing.cancel()
            self._calls.discard(call)
        name = call.tool.name
        if call.task.cancelled():
            outcome = "cancelled"
            if call.cancel_reason == "shutdown":
                log.info("task of %s left to another replica: shutting down", name)
                with contextlib.suppress(Exception):  # else its lease lapses by itself
                    await store.release(task_hash, self.replica)
        elif isinstance(exc := call.task.exception(), InputRequired):
            outcome = "input_required"
            asked = {key: request.to_mcp() for key, request in exc.requests.items()}
            message = "Waiting for the client's answer: send it with tasks/update (inputResponses)."
            log.info("task of %s waits for the client: %s", name, ", ".join(asked))
            try:
                await store.ask(task_hash, self.replica, asked, message)
            except Exception:
                # Not stored: the lease lapses and another replica's tasks/get runs it again.
                log.exception("task question not stored")
        elif exc is not None:
            outcome = "internal_error"
            log.error("tool %s crashed", name, exc_info=exc, extra={"request_id": request_id, "tool": name})
            error = RpcError(
                INTERNAL_ERROR,
                f"Internal error while running {name}; the gateway logged it with request id "
                f"{request_id}. Report it with that id; retrying may not help.",
            )
            await self._finish(store, task_hash, FAILED, _error_object(error), error.message)
        else:
            result = call.task.result()
            outcome = tool_outcome(result)
            shaped = shaped_tool_result(STATELESS_VERSIONS[0], result, summary_text=summary_text)
            shaped.pop("resultType", None)
            stored = await self._finish(store, task_hash, COMPLETED, shaped, None)
            # The task's row is the result's delivery: a broker message is then the caller's.
            callback = result.on_delivered if stored else result.on_abandoned
            if callback is not None:
                with contextlib.suppress(Exception):
                    await callback()
        self._telemetry.tool_call(name, outcome, perf_counter() - started, caller=caller)

    async def _finish(
        self, store: TaskStore, task_hash: str, status: str, outcome: dict[str, Any], message: str | None
    ) -> bool:
        try:
            return await store.finish(task_hash, status, json.dumps(outcome), message)
        except Exception:
            # Not stored: the lease lapses and another replica's tasks/get runs the call again.
            log.exception("task outcome not stored")
            return False

    async def _renew(self, store: TaskStore, task_hash: str, call: ToolCall) -> None:
        """Renew the lease every third of it; stop the call once the task is no longer ours
        (cancelled, by a replica without the work, or taken over after a long stall)."""
        while True:
            await asyncio.sleep(self._lease() / 3)
            try:
                ours = await store.renew(task_hash, self.replica, self._lease())
            except Exception:
                log.warning("task lease not renewed; trying again", exc_info=True)
                continue
            if not ours:
                row = await store.get(task_hash)
                call.cancel("client" if row is not None and row.status == CANCELLED else "server")
                return


def _error_object(error: RpcError) -> dict[str, Any]:
    out: dict[str, Any] = {"code": error.code, "message": error.message}
    if error.data is not None:
        out["data"] = error.data
    return out
