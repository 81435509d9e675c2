"""A task's work on this replica (``gateway.mcp.protocol.tasks``): the tool call run as one of the
calls in flight, its lease renewed every third of ``broker.lease_seconds``, and how it ended
stored in the broker's database (a result completes the task, an exception fails it, a question
parks it as ``input_required``, a shutdown releases the lease for another replica).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Mapping
from time import perf_counter
from typing import Any

from gateway.broker.tasks import CANCELLED, COMPLETED, FAILED, TaskStore
from gateway.mcp.protocol.calls import ActiveCalls, ToolCall, tool_outcome
from gateway.mcp.protocol.eras import STATELESS_VERSIONS
from gateway.mcp.protocol.shaping import shaped_tool_result
from gateway.mcp.protocol.task_parts import TaskAsker, error_object
from gateway.mcp.protocol.telemetry import Telemetry
from gateway.mcp.protocol.wire import INTERNAL_ERROR, RpcError
from gateway.tools.caller import Caller
from gateway.tools.context import CallInfo, ToolContext, ToolServices
from gateway.tools.input_requests import InputRequired
from gateway.tools.registry import Registry, Tool

log = logging.getLogger("gateway.mcp.tasks")


class TaskWork:
    """Runs tasks' work here. One per :class:`~gateway.mcp.protocol.tasks.Tasks`.

    Args:
        registry: the served tools.
        telemetry: the app's MCP metrics (a task's call counts as a tool call when it ends).
        calls: calls in flight; a task's work is one of them, so shutdown stops it (its lease then
            lapses and another replica resumes it).
        services: the app-wide services.
        replica: this process, as a lease holder.
        lease: ``broker.lease_seconds``, read when needed.
    """

    def __init__(
        self,
        registry: Registry,
        telemetry: Telemetry,
        calls: ActiveCalls,
        services: Callable[[], ToolServices],
        replica: str,
        lease: Callable[[], float],
    ) -> None:
        self._registry = registry
        self._telemetry = telemetry
        self._calls = calls
        self._services = services
        self._replica = replica
        self._lease = lease
        #: The work running here, by task hash.
        self.running: dict[str, asyncio.Task[None]] = {}

    def start(
        self,
        store: TaskStore,
        task_hash: str,
        *,
        request_id: str,
        caller: Caller,
        capabilities: frozenset[str],
        tool: Tool,
        arguments: dict[str, Any],
        answers: Mapping[str, Any],
    ) -> None:
        """Run the work here, as ``caller``; it may ask what ``capabilities`` (those of the client
        of the request that starts or resumes it) say the client can answer."""
        info = CallInfo(
            request_id=request_id,
            caller=caller,
            client_capabilities=capabilities,
            ask=TaskAsker(capabilities, answers, task_hash),
        )
        run = asyncio.create_task(self._registry.call(tool, ToolContext(self._services(), info), arguments))
        call = ToolCall(tool, request_id, run, long_running=True)
        self._calls.add(call)
        work = asyncio.create_task(self._work(store, task_hash, call, request_id, caller))
        self.running[task_hash] = work
        work.add_done_callback(lambda _: self.running.pop(task_hash, None))

    async def _work(
        self, store: TaskStore, task_hash: str, call: ToolCall, request_id: str, caller: Caller
    ) -> None:
        """Await the call while renewing the lease; store how it ended."""
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
                    await store.release(task_hash, self._replica)
        elif isinstance(exc := call.task.exception(), InputRequired):
            outcome = "input_required"
            asked = {key: request.to_mcp() for key, request in exc.requests.items()}
            message = "Waiting for the client's answer: send it with tasks/update (inputResponses)."
            log.info("task of %s waits for the client: %s", name, ", ".join(asked))
            try:
                await store.ask(task_hash, self._replica, asked, message)
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
            await self._finish(store, task_hash, FAILED, error_object(error), error.message)
        else:
            result = call.task.result()
            outcome = tool_outcome(result)
            shaped = shaped_tool_result(STATELESS_VERSIONS[0], result, summary_text=caller.summary_text)
            shaped.pop("resultType", None)
            stored = await self._finish(store, task_hash, COMPLETED, shaped, None)
            # The task's row is the result's delivery: a broker message is then the caller's.
            callback = result.on_delivered if stored else result.on_abandoned
            if callback is not None:
                with contextlib.suppress(Exception):
                    await callback()
        self._telemetry.tool_call(
            name, outcome, perf_counter() - started, toolset=call.tool.toolset, caller=caller
        )

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
                ours = await store.renew(task_hash, self._replica, self._lease())
            except Exception:
                log.warning("task lease not renewed; trying again", exc_info=True)
                continue
            if not ours:
                row = await store.get(task_hash)
                call.cancel("client" if row is not None and row.status == CANCELLED else "server")
                return
