"""Running one ``tools/call``: the handler task, cancellation, progress and delivery callbacks.

Rules (MCP 2025-11-25 basic/utilities/progress, basic/utilities/cancellation):

- The handler runs in its own task, registered under its handshake session and JSON-RPC id, so
  ``notifications/cancelled {requestId}`` (handshake era, same replica) cancels it; in the stateless
  era the client's going away cancels it, as the transport tells (the events' ``on_broken``, or
  ``RequestContext.disconnected``: :func:`cancel_when_closed`). A cancelled call gets no response.
- Progress: ``notifications/progress`` go to the call's events only when the request carried
  ``_meta.progressToken``; values must increase strictly (others are dropped) and nothing is sent
  once the response was written.
- Delivery: the transport settles a result it was given (``gateway.mcp.http.delivery``): it
  awaits ``on_delivered`` once the response reached the client, ``on_abandoned`` otherwise. A
  message broker acks or re-queues on these. A result the transport never gets (its handler was
  cancelled under it) is abandoned here, by :func:`finish_result`.
- On app shutdown, calls of ``long_running`` tools are cancelled at once and answered with a
  JSON-RPC error (-32000) telling the caller to call again; short calls are left to finish within
  the shutdown timeout.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gateway.errors import REASONS
from gateway.mcp.protocol.context import Events
from gateway.mcp.protocol.wire import INTERNAL_ERROR, SHUTTING_DOWN, RpcError, notification
from gateway.tools.input_requests import InputRequired
from gateway.tools.registry import Tool, ToolResult

log = logging.getLogger("gateway.mcp")

#: Why a call was stopped. ``client``: notifications/cancelled; ``session_closed``: DELETE of its
#: session on this replica; ``client_gone``: a write to its stream failed, or the connection of a
#: 2026-07-28 request closed; ``shutdown``: the app is stopping; ``server``: the transport cancelled
#: the request's handler (shutdown timeout).
CancelReason = str


class ToolCall:
    """One ``tools/call`` in flight, cancellable by the session, the stream or shutdown."""

    __slots__ = ("cancel_reason", "long_running", "rpc_id", "session", "task", "tool")

    def __init__(
        self,
        tool: Tool,
        rpc_id: str | int,
        task: asyncio.Task[ToolResult],
        session: str | None = None,
        *,
        long_running: bool | None = None,
    ) -> None:
        self.tool = tool
        #: The tool is long-running, or this call of it waits (``Tool.runs_long``).
        self.long_running = tool.long_running if long_running is None else long_running
        self.rpc_id = rpc_id
        self.task = task
        self.session = session
        self.cancel_reason: CancelReason | None = None

    def cancel(self, reason: CancelReason) -> None:
        """Stop the handler (if still running) and remember why; the first reason wins."""
        if self.cancel_reason is None:
            self.cancel_reason = reason
        if not self.task.done():
            self.task.cancel()


#: How often a 2026-07-28 call answered as JSON checks that its client is still connected.
CLOSE_WATCH_SECONDS = 0.1


async def cancel_when_closed(call: ToolCall, closed: Callable[[], bool]) -> None:
    """Cancel ``call`` (``client_gone``) once ``closed()`` says its client closed the connection.
    Runs until cancelled itself, when the call is over."""
    while True:
        await asyncio.sleep(CLOSE_WATCH_SECONDS)
        if closed():
            call.cancel("client_gone")
            return


class ProgressReporter:
    """``CallInfo.progress`` of a call whose request carried ``_meta.progressToken``."""

    __slots__ = ("_active", "_last", "_stream", "_token")

    def __init__(self, stream: Events, token: str | int) -> None:
        self._stream = stream
        self._token = token
        self._last: float | None = None
        self._active = True

    async def __call__(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Send ``notifications/progress``; dropped after the response or when not increasing."""
        if not self._active or not math.isfinite(progress):
            return
        if self._last is not None and progress <= self._last:
            log.debug("progress %s dropped: not above %s", progress, self._last)
            return
        self._last = progress
        params: dict[str, Any] = {"progressToken": self._token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self._stream.send(notification("notifications/progress", params))

    def stop(self) -> None:
        """No more progress: the call is over."""
        self._active = False


class LogReporter:
    """``CallInfo.log`` of a call answered with events whose client takes log messages: every
    handshake session (``logging/setLevel`` is accepted) and stateless requests whose ``_meta``
    names a log level."""

    __slots__ = ("_active", "_stream")

    def __init__(self, stream: Events) -> None:
        self._stream = stream
        self._active = True

    async def __call__(self, level: str, data: str) -> None:
        """Send ``notifications/message``; dropped after the response."""
        if self._active:
            await self._stream.send(notification("notifications/message", {"level": level, "data": data}))

    def stop(self) -> None:
        """No more messages: the call is over."""
        self._active = False


@dataclass
class CallOutcome:
    """What a finished call has to say.

    Attributes:
        message: the encoded JSON-RPC error, or None: the result is to be answered (``result``
            set) or the call must not be answered (cancelled).
        result: the tool's result, whose delivery callbacks the writer runs.
        outcome: for metrics and logs: ``ok``, an error reason, ``cancelled``, ``internal_error``
            or ``input_required``.
        asked: the handler ended asking the client for input (2026-07-28), else None.
    """

    message: bytes | None
    result: ToolResult | None
    outcome: str
    asked: InputRequired | None = None


def tool_outcome(result: ToolResult) -> str:
    """``ok``, or the error reason of an ``isError`` result (bounded: :data:`REASONS`)."""
    if not result.is_error:
        return "ok"
    error = result.structured.get("error")
    reason = error.get("reason") if isinstance(error, dict) else None
    return reason if reason in REASONS else "error"


async def finish_result(result: ToolResult, delivered: bool, request_id: str) -> None:
    """Await ``on_delivered`` (``delivered``) or ``on_abandoned``; log their failures."""
    callback: Callable[[], Awaitable[None]] | None = result.on_delivered if delivered else result.on_abandoned
    if callback is None:
        return
    try:
        await callback()
    except Exception:
        log.exception(
            "%s callback failed",
            "on_delivered" if delivered else "on_abandoned",
            extra={"request_id": request_id},
        )


class ActiveCalls:
    """Every call in flight in one app, so shutdown can end the long-running ones."""

    def __init__(self) -> None:
        self._calls: set[ToolCall] = set()
        self._by_session: dict[tuple[str, str | int], ToolCall] = {}
        self.shutting_down = False

    def add(self, call: ToolCall) -> None:
        self._calls.add(call)
        if call.session is not None:
            self._by_session[(call.session, call.rpc_id)] = call
        if self.shutting_down and call.long_running:
            call.cancel("shutdown")

    def discard(self, call: ToolCall) -> None:
        self._calls.discard(call)
        if call.session is not None and self._by_session.get((call.session, call.rpc_id)) is call:
            del self._by_session[(call.session, call.rpc_id)]

    def in_session(self, session: str, rpc_id: str | int) -> bool:
        """True when ``rpc_id`` is in flight in ``session`` on this replica."""
        return (session, rpc_id) in self._by_session

    def cancel_in_session(self, session: str, rpc_id: str | int, reason: CancelReason) -> None:
        """Cancel the call ``rpc_id`` of ``session`` if it runs here."""
        call = self._by_session.get((session, rpc_id))
        if call is not None:
            call.cancel(reason)

    def end_session(self, session: str) -> None:
        """Cancel every call of an ended session (DELETE) that runs here."""
        for (owner, _), call in list(self._by_session.items()):
            if owner == session:
                call.cancel("session_closed")

    def shutdown(self) -> None:
        """Cancel every long-running call (their streams then end with a -32000 error)."""
        self.shutting_down = True
        for call in list(self._calls):
            if call.long_running:
                call.cancel("shutdown")

    def __len__(self) -> int:
        return len(self._calls)


#: Abandon-on-cancel tasks still running (asyncio keeps only weak references to tasks).
_ABANDONING: set[asyncio.Task[None]] = set()


async def _abandon(task: asyncio.Task[ToolResult], request_id: str) -> None:
    """Wait for a cancelled handler to unwind; a result it still returned is abandoned."""
    await asyncio.wait((task,))
    if not task.cancelled() and task.exception() is None:
        await finish_result(task.result(), False, request_id)


async def await_call(call: ToolCall, request_id: str) -> CallOutcome:
    """Wait for ``call``'s task and turn how it ended into a :class:`CallOutcome`.

    Raises:
        asyncio.CancelledError: the HTTP handler itself was cancelled; the task is cancelled
            too and awaited, and a result it holds or still returns while unwinding (a broker
            message it already took) is abandoned (``on_abandoned``) before this is re-raised.
    """
    task = call.task
    try:
        await asyncio.wait((task,))
    except asyncio.CancelledError:
        call.cancel("server")
        abandoning = asyncio.ensure_future(_abandon(task, request_id))
        _ABANDONING.add(abandoning)
        abandoning.add_done_callback(_ABANDONING.discard)
        # Shielded: a second cancellation of this handler must not drop the result on the floor.
        await asyncio.shield(abandoning)
        raise
    if task.cancelled():
        if call.cancel_reason == "shutdown":
            error = RpcError(
                SHUTTING_DOWN,
                f"The gateway is shutting down and stopped {call.tool.name}; call it again in a few "
                "seconds, once the gateway is back.",
            )
            return CallOutcome(error.encode(call.rpc_id), None, "cancelled")
        return CallOutcome(None, None, "cancelled")
    exc = task.exception()
    if isinstance(exc, InputRequired):
        return CallOutcome(None, None, "input_required", asked=exc)
    if exc is not None:
        log.error(
            "tool %s crashed",
            call.tool.name,
            exc_info=exc,
            extra={"request_id": request_id, "tool": call.tool.name},
        )
        error = RpcError(
            INTERNAL_ERROR,
            f"Internal error while running {call.tool.name}; the gateway logged it with request id "
            f"{request_id}. Report it with that id; retrying may not help.",
        )
        return CallOutcome(error.encode(call.rpc_id), None, "internal_error")
    result = task.result()
    if call.cancel_reason is not None and call.cancel_reason != "shutdown":
        # Finished just as it was cancelled: the caller no longer wants the answer.
        return CallOutcome(None, result, "cancelled")
    return CallOutcome(None, result, tool_outcome(result))
