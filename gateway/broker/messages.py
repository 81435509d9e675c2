"""Messages between agents: send and reply, wait with leases and delivery callbacks, history.

Contract: broker.md ("send_message", "reply_message", "wait_for_message", "get_message_history",
"Delivery"). A send is a change (``gateway.broker.changes``): refused in
STOPPED, committed before the recipient's waits are woken.

Delivery (broker.md "Delivery"; MCP basic/utilities/cancellation):
:meth:`Messages.wait_for_message` leases the first queued message of the caller (priority, then
time) and returns callbacks; the message leaves its queue only when the transport reports the
answer as written
(``on_delivered``). A cancelled wait or a client that went away (``on_abandoned``) gives it
back. A crash between the write and the database update redelivers the message after restart
with the same ``messageId`` and a higher ``deliveryAttempt``: delivery is at-least-once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.broker.changes import Changes
from gateway.broker.effects import After, queue_message
from gateway.broker.errors import BrokerError
from gateway.broker.formats import PRIORITIES, PRIORITY_NAMES, iso
from gateway.broker.machine import Event, Refused, State, decide
from gateway.broker.queues import Queues
from gateway.broker.roster import Roster
from gateway.broker.store import MessageRow, PipelineRow, Queries, Store, StoreError

if TYPE_CHECKING:
    from gateway.observability.metrics import Metrics

log = logging.getLogger(__name__)

#: ``await progress(elapsed, total, message)``, as ``ToolContext.progress``.
ProgressFn = Callable[[float, float | None, str | None], Awaitable[None]]


@dataclass
class WaitOutcome:
    """What :meth:`Messages.wait_for_message` ended with.

    Attributes:
        message: the leased message (see :func:`message_json`), or None.
        timed_out: the timeout passed with nothing to deliver.
        stopped: the pipeline was stopped while waiting.
        shutdown: the gateway is shutting down; reconnect and wait again.
        reason: why a stop or shutdown ended the wait.
        waited_seconds: how long the call waited.
        on_delivered / on_abandoned: for a message, the lease's end (see the module docstring).
    """

    message: dict[str, Any] | None = None
    timed_out: bool = False
    stopped: bool = False
    shutdown: bool = False
    reason: str | None = None
    waited_seconds: float = 0.0
    on_delivered: Callable[[], Awaitable[None]] | None = None
    on_abandoned: Callable[[], Awaitable[None]] | None = None


def message_json(m: MessageRow) -> dict[str, Any]:
    """A message as tools show it.

    ``{messageId, from, to, subject, body, priority, replyTo, threadId, createdAt,
    deliveryAttempt, delivered}``; ``deliveryAttempt`` > 1 means an earlier answer carrying
    this message may have reached the receiver (at-least-once delivery).
    """
    return {
        "messageId": m.id,
        "from": m.sender,
        "to": m.recipient,
        "subject": m.subject,
        "body": m.body,
        "priority": PRIORITY_NAMES.get(m.priority, "normal"),
        "replyTo": m.reply_to,
        "threadId": m.thread_id,
        "createdAt": m.created_at,
        "deliveryAttempt": m.delivery_attempts,
        "delivered": m.delivered_at is not None,
    }


class Messages:
    """The message side of one broker.

    Args:
        changes: runs sends as changes; shields leases; the committed state.
        roster: the agents (recipients, ``lastSeen`` at the end of a wait).
        queues: the agents' in-process queues (wake-ups, leases, depths).
        store: the opened database.
        metrics: the app's metrics.
        clock: Unix time source.
        progress_interval_seconds: default interval of a wait's progress notifications
            (``broker.progress_interval_seconds``).
        closing: the shutdown reason, or None while the broker runs.
    """

    def __init__(
        self,
        changes: Changes,
        roster: Roster,
        queues: Queues,
        store: Store,
        metrics: Metrics,
        clock: Callable[[], float],
        *,
        progress_interval_seconds: float,
        closing: Callable[[], str | None],
    ) -> None:
        self._changes = changes
        self._roster = roster
        self._queues = queues
        self._store = store
        self._metrics = metrics
        self._clock = clock
        self._progress_interval = progress_interval_seconds
        self._closing = closing

    def _check_recipient(self, to: str) -> None:
        agents = self._roster.agents
        if to not in agents:
            raise BrokerError(
                "bad_request",
                f"`to`: {to!r} is not an agent of this broker; send to one of: {', '.join(agents)}. "
                "Nothing was sent.",
                agents=list(agents),
            )

    async def send_message(
        self,
        agent: str,
        to: str,
        subject: str,
        body: dict[str, Any],
        priority: str = "normal",
        *,
        reply_to: str | None = None,
    ) -> dict[str, Any]:
        """``send_message`` / ``reply_message``: queue one message; ``{messageId, queued}``.

        With ``reply_to`` the message goes to that message's sender, in its thread, and ``to`` is
        ignored; the result then also has ``to`` and ``threadId``.

        Raises:
            BrokerError: ``bad_request`` for an unknown recipient, ``not_found`` for an unknown
                ``reply_to``, ``conflict`` in STOPPED.
        """
        if reply_to is None:
            self._check_recipient(to)

        async def run(q: Queries, p: PipelineRow, after: After) -> dict[str, Any]:
            self._changes.decide(p, Event.REPLY_MESSAGE if reply_to is not None else Event.SEND_MESSAGE)
            recipient, thread = to, None
            if reply_to is not None:
                original = await q.message(reply_to)
                if original is None:
                    raise BrokerError(
                        "not_found",
                        f"`replyTo`: no message has id {reply_to!r}. Use the messageId of a message you "
                        "received (wait_for_message) or found with get_message_history. Nothing was sent.",
                    )
                if original.sender not in self._roster.agents:
                    raise BrokerError(
                        "bad_request",
                        f"`replyTo`: message {reply_to} is a notice from the {original.sender}, "
                        "which takes no replies; use send_message to reach an agent. Nothing was sent.",
                    )
                recipient, thread = original.sender, original.thread_id
            message_id = await queue_message(
                q,
                after,
                sender=agent,
                recipient=recipient,
                subject=subject,
                body=body,
                priority=PRIORITIES[priority],
                created_at=iso(self._clock()),
                reply_to=reply_to,
                thread_id=thread,
            )
            out: dict[str, Any] = {"messageId": message_id, "queued": True}
            if reply_to is not None:
                out["to"] = recipient
                out["threadId"] = thread
            return out

        return await self._changes.run(agent, run)

    async def wait_for_message(
        self,
        agent: str,
        seconds: float,
        progress: ProgressFn | None = None,
        progress_interval: float | None = None,
    ) -> WaitOutcome:
        """Block until ``agent``'s queue has a message it can lease, ``seconds`` pass, the pipeline
        stops or the gateway shuts down.

        Args:
            agent: the caller (already authorized).
            seconds: the longest wait; 0 looks without waiting.
            progress: ``await progress(elapsed, seconds, text)`` every ``progress_interval``
                seconds (``broker.progress_interval_seconds``) while waiting; None: no progress.

        Raises:
            BrokerError: ``conflict`` when the pipeline is STOPPED.
        """
        loop = asyncio.get_running_loop()
        start = loop.time()
        queue = self._queues[agent]
        if (closing := self._closing()) is not None:
            return WaitOutcome(shutdown=True, reason=closing)
        if self._changes.state is State.STOPPED:
            try:
                decide(State.STOPPED, Event.WAIT_FOR_MESSAGE)
            except Refused as err:
                async with self._store.read() as q:
                    p = await q.pipeline()
                raise self._changes.refusal(p, err) from None
        interval = progress_interval or self._progress_interval
        deadline = start + seconds
        next_progress = start + interval
        wake = asyncio.Event()
        queue.waiters.add(wake)
        self._metrics.broker_waits_open.inc()
        try:
            while True:
                if (closing := self._closing()) is not None:
                    return WaitOutcome(shutdown=True, reason=closing, waited_seconds=loop.time() - start)
                if self._changes.state is State.STOPPED:
                    return WaitOutcome(
                        stopped=True, reason="stop_pipeline was called", waited_seconds=loop.time() - start
                    )
                wake.clear()  # before looking, so a send from now on is not missed
                row = await self._lease(agent)
                if row is not None:
                    delivered, abandoned = self._lease_callbacks(agent, row.id)
                    return WaitOutcome(
                        message=message_json(row),
                        waited_seconds=loop.time() - start,
                        on_delivered=delivered,
                        on_abandoned=abandoned,
                    )
                now = loop.time()
                if now >= deadline:
                    return WaitOutcome(timed_out=True, waited_seconds=now - start)
                until = min(deadline, next_progress) if progress is not None else deadline
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout_at(until):
                        await wake.wait()
                now = loop.time()
                if progress is not None and now >= next_progress:
                    next_progress = now + interval
                    elapsed = now - start
                    try:
                        await progress(elapsed, seconds, f"waiting for a message, {int(elapsed)} s elapsed")
                    except Exception as err:  # a gone client shows up as a cancel; progress is best-effort
                        log.debug("progress notification failed: %s", err)
        finally:
            queue.waiters.discard(wake)
            self._metrics.broker_waits_open.dec()
            self._roster.seen(agent)

    async def _lease(self, agent: str) -> MessageRow | None:
        """Lease ``agent``'s next message, shielded: a cancelled caller gives back what was leased."""

        def give_back(row: MessageRow | None) -> None:
            if row is not None:
                self._queues[agent].leased.discard(row.id)
                self._queues[agent].wake()

        return await self._changes.shielded(self._lease_now(agent), if_cancelled=give_back)

    async def _lease_now(self, agent: str) -> MessageRow | None:
        queue = self._queues[agent]
        if queue.depth <= len(queue.leased):
            # Depths are kept in step with every commit of this (single-writer) process, so an
            # empty queue needs no database round trip.
            return None
        async with queue.lock:
            async with self._store.write() as q:
                # lastSeen rides on this transaction, so a kill -9 does not lose the calls of an
                # agent that only waits (they change no state; a clean close saves the rest).
                self._roster.seen(agent)
                await q.save_last_seen({agent: iso(self._roster.last_call[agent])})
                row = await q.next_queued(agent, queue.leased)
                if row is None:
                    return None
                await q.count_attempt(row.id)
            # No await between the commit and here: no other wait can pick this message.
            queue.leased.add(row.id)
        row.delivery_attempts += 1
        return row

    def _lease_callbacks(
        self, agent: str, message_id: str
    ) -> tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]:
        queue = self._queues[agent]
        ended = False

        async def delivered() -> None:
            nonlocal ended
            if ended:
                return
            ended = True

            async def mark() -> bool:
                async with self._store.write() as q:
                    return await q.mark_delivered(message_id, iso(self._clock()))

            try:
                removed = await self._changes.shielded(mark())
            except StoreError as err:
                # The answer went out but the queue could not be updated: the lease is dropped
                # below, so the message stays queued and the next wait that looks at the queue
                # gets it again (same messageId, higher deliveryAttempt).
                log.warning("message %s delivered but not removed from its queue: %s", message_id, err)
                removed = False
            finally:
                queue.leased.discard(message_id)
            if removed:
                queue.depth -= 1
                self._metrics.broker_messages_delivered.labels(agent).inc()
                self._metrics.broker_queue_depth.labels(agent).set(queue.depth)

        async def abandoned() -> None:
            nonlocal ended
            if ended:
                return
            ended = True
            queue.leased.discard(message_id)
            queue.wake()  # another wait of this agent may take it now

        return delivered, abandoned

    async def message_history(self, issue: str | None, limit: int) -> dict[str, Any]:
        """``get_message_history`` → ``{messages}``: the newest ``limit``, oldest first."""
        async with self._store.read() as q:
            rows = await q.history(issue, limit)
        return {"messages": [message_json(m) for m in rows]}
