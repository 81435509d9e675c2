"""Delivery: ``wait_for_message`` leases a message and hands the transport its delivery callbacks.

Contract: broker.md "Delivery" (and MCP basic/utilities/cancellation). :meth:`Delivery.wait_for_message`
claims the first free message of the caller (priority, then age) with a lease in the database
(``broker.lease_seconds``; ``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so waits on several replicas
never take the same message) and returns two callbacks, the one interface this module has with
the transport: the message leaves its queue only when the transport reports the answer as
written (``on_delivered``, an acknowledgement fenced by the lease's token); a cancelled wait or a
client that went away (``on_abandoned``) gives the lease back. A replica that dies in between
leaves the lease to run out, and the message goes out again, through any replica, with the same
``messageId`` and a higher ``deliveryAttempt``: delivery is at-least-once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import SQLAlchemyError

from gateway.broker.changes import Changes
from gateway.broker.formats import iso, message_json
from gateway.broker.machine import Event, Refused, State, decide
from gateway.broker.roster import Roster
from gateway.broker.store import DatabaseUnavailable, MessageRow, Store, StoreError
from gateway.broker.wakeups import DEAF_RECHECK_SECONDS, Wakeups

if TYPE_CHECKING:
    from gateway.observability.metrics import Metrics

log = logging.getLogger(__name__)

#: How soon a wait looks again after finding a message free but not claimable (another replica's
#: claim of it has not committed yet).
BUSY_RECHECK_SECONDS = 0.05

#: ``await progress(elapsed, total, message)``, as ``ToolContext.progress``.
ProgressFn = Callable[[float, float | None, str | None], Awaitable[None]]


@dataclass
class WaitOutcome:
    """What :meth:`Delivery.wait_for_message` ended with.

    Attributes:
        message: the leased message (see ``gateway.broker.formats.message_json``), or None.
        timed_out: the timeout passed with nothing to deliver.
        stopped: the pipeline was stopped while waiting.
        shutdown: the gateway is shutting down; reconnect and wait again.
        reason: why a stop or shutdown ended the wait.
        waited_seconds: how long the call waited.
        on_delivered / on_abandoned: for a message, the lease's end (see the module docstring).
        read_check_seconds: for a message to an agent that does not acknowledge, how long the
            transport should watch for a reset (the client closed without reading the answer)
            before it reports the answer delivered; None: no check.
    """

    message: dict[str, Any] | None = None
    timed_out: bool = False
    stopped: bool = False
    shutdown: bool = False
    reason: str | None = None
    waited_seconds: float = 0.0
    on_delivered: Callable[[], Awaitable[None]] | None = None
    on_abandoned: Callable[[], Awaitable[None]] | None = None
    read_check_seconds: float | None = None


class Delivery:
    """The delivery side of one broker: waits, the leases they take, and how those end.

    Args:
        changes: shields leases; the committed state.
        roster: the agents (``lastSeen`` at the end of a wait).
        wakeups: this process's open waits.
        store: the opened database.
        metrics: the app's metrics.
        clock: Unix time source.
        progress_interval_seconds: default interval of a wait's progress notifications
            (``broker.progress_interval_seconds``).
        lease_seconds: how long a claimed message stays leased (``broker.lease_seconds``).
        recheck_seconds: how long a look that found nothing to claim is trusted without a
            signal (``broker.recheck_seconds``; ends of leases and holds are known sooner).
        ack_timeout_seconds: how long a written message waits for its acknowledgement
            (``broker.ack_timeout_seconds``).
        read_check_seconds: ``broker.read_check_seconds`` (see :class:`WaitOutcome`).
        closing: the shutdown reason, or None while the broker runs.
    """

    def __init__(
        self,
        changes: Changes,
        roster: Roster,
        wakeups: Wakeups,
        store: Store,
        metrics: Metrics,
        clock: Callable[[], float],
        *,
        progress_interval_seconds: float,
        lease_seconds: float,
        recheck_seconds: float,
        ack_timeout_seconds: float = 300.0,
        read_check_seconds: float = 0.0,
        closing: Callable[[], str | None],
    ) -> None:
        self._changes = changes
        self._roster = roster
        self._wakeups = wakeups
        self._lease_seconds = lease_seconds
        self._recheck = recheck_seconds
        self._deaf_recheck = min(recheck_seconds, DEAF_RECHECK_SECONDS)
        #: lease token → message id, for leases this process holds and has not ended.
        self._held: dict[str, str] = {}
        self._store = store
        self._metrics = metrics
        self._clock = clock
        self._progress_interval = progress_interval_seconds
        self._closing = closing
        self._ack_timeout = ack_timeout_seconds
        self._read_check = read_check_seconds
        #: Agents known to acknowledge (never forgotten: an agent that acknowledges always does).
        self._acknowledging: set[str] = set()

    async def wait_for_message(
        self,
        agent: str,
        seconds: float,
        progress: ProgressFn | None = None,
        progress_interval: float | None = None,
        ack: list[str] | None = None,
    ) -> WaitOutcome:
        """Block until ``agent``'s queue has a message it can lease, ``seconds`` pass, the pipeline
        stops or the gateway shuts down.

        Args:
            agent: the caller (already authorized).
            seconds: the longest wait; 0 looks without waiting.
            ack: messageIds the agent has processed (taken off its queue first); sending it, even
                empty, makes the agent one that acknowledges, for good.
            progress: ``await progress(elapsed, seconds, text)`` every ``progress_interval``
                seconds (``broker.progress_interval_seconds``) while waiting; None: no progress.

        Raises:
            BrokerError: ``conflict`` when the pipeline is STOPPED.
        """
        loop = asyncio.get_running_loop()
        start = loop.time()
        if (closing := self._closing()) is not None:
            return WaitOutcome(shutdown=True, reason=closing)
        if ack is not None:
            try:
                await self._changes.shielded(self._acknowledge(agent, ack))
            except DatabaseUnavailable:
                raise _wait_unavailable() from None
        interval = progress_interval or self._progress_interval
        deadline = start + seconds
        next_progress = start + interval
        first = True
        # Subscribe before looking: a message committed after the look still wakes this wait.
        with self._wakeups.subscribe(agent) as wake:
            self._metrics.broker_waits_open.inc()
            try:
                while True:
                    if (closing := self._closing()) is not None:
                        return WaitOutcome(shutdown=True, reason=closing, waited_seconds=loop.time() - start)
                    wake.clear()
                    failed = False
                    try:
                        state, row = await self._lease(agent)
                    except DatabaseUnavailable:
                        if first:
                            raise _wait_unavailable() from None
                        # Waiting through an outage: it looks again soon, and the timeout still
                        # ends the wait.
                        state, row, failed = self._changes.state, None, True
                    if state is State.STOPPED:
                        if first:
                            try:
                                decide(State.STOPPED, Event.WAIT_FOR_MESSAGE)
                            except Refused as err:
                                async with self._store.read() as q:
                                    p = await q.pipeline()
                                raise self._changes.refusal(p, err) from None
                        return WaitOutcome(
                            stopped=True,
                            reason="stop_pipeline was called",
                            waited_seconds=loop.time() - start,
                        )
                    first = False
                    if row is not None:
                        delivered, abandoned = self._lease_callbacks(agent, row)
                        # An agent that acknowledges gets the message again when it does not
                        # acknowledge it; one that does not is saved what a reset shows it missed.
                        acknowledges = row.acknowledges or agent in self._acknowledging
                        check = None if acknowledges or not self._read_check else self._read_check
                        return WaitOutcome(
                            message=message_json(row),
                            waited_seconds=loop.time() - start,
                            on_delivered=delivered,
                            on_abandoned=abandoned,
                            read_check_seconds=check,
                        )
                    now = loop.time()
                    if now >= deadline:
                        return WaitOutcome(timed_out=True, waited_seconds=now - start)
                    # Until a wake-up, or until the queue is no longer known empty (a lease or
                    # an acknowledgement hold of its messages ends, or the look is too old).
                    until = min(deadline, now + self._pause(agent, failed))
                    if progress is not None:
                        until = min(until, next_progress)
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout_at(until):
                            await wake.wait()
                    now = loop.time()
                    if progress is not None and now >= next_progress:
                        next_progress = now + interval
                        elapsed = now - start
                        try:
                            await progress(
                                elapsed, seconds, f"waiting for a message, {int(elapsed)} s elapsed"
                            )
                        except Exception as err:  # a gone client shows up as a cancel; best-effort
                            log.debug("progress notification failed: %s", err)
            finally:
                self._metrics.broker_waits_open.dec()
                self._roster.seen(agent)

    async def _acknowledge(self, agent: str, ids: list[str]) -> None:
        async with self._store.write() as q:
            if agent not in self._acknowledging:
                await q.set_acknowledges(agent)
            done = await q.acknowledge_ids(agent, ids, iso(self._clock()))
        self._acknowledging.add(agent)
        if done:
            self._metrics.broker_messages_delivered.labels(agent).inc(done)

    def _pause(self, agent: str, failed: bool) -> float:
        """How long a wait of ``agent`` whose look found nothing (or ``failed``) may sleep, at
        most, before it looks again: while its queue is known empty."""
        if failed:
            return self._deaf_recheck  # the database may be back by then
        now = self._clock()
        until = self._wakeups.empty_until(agent, now)
        # None: something was signalled since the look; look again now.
        return 0.0 if until is None else until - now

    async def _lease(self, agent: str) -> tuple[State, MessageRow | None]:
        """Lease ``agent``'s next message, shielded: a cancelled caller gives back what was leased."""

        def give_back(out: tuple[State, MessageRow | None]) -> None:
            row = out[1]
            if row is not None and row.lease_token is not None:
                self._changes.spawn(self._release(agent, row.id, row.lease_token))

        return await self._changes.shielded(self._lease_now(agent), if_cancelled=give_back)

    async def _lease_now(self, agent: str) -> tuple[State, MessageRow | None]:
        now = self._clock()
        if not self._wakeups.maybe_queued(agent, now):
            # Nothing was sent to this agent or given back, and none of its leases ended, since
            # its last empty look: no need to ask the database.
            return self._changes.state, None
        mark = self._wakeups.mark(agent)
        ends: float | None = None
        async with self._store.write_one() as q:
            row = await q.claim(agent, now, self._lease_seconds)
            if row is None:
                ends = await q.next_lease_end(agent)
        if row is not None:
            assert row.lease_token is not None
            self._held[row.lease_token] = row.id
            if not row.more:
                own = now + self._lease_seconds  # if its answer is never reported
                ends = own if row.next_lease_end is None else min(row.next_lease_end, own)
                self._wakeups.looked_empty(agent, mark, self._known_empty_until(now, ends))
            return self._changes.state, row
        self._wakeups.looked_empty(agent, mark, self._known_empty_until(now, ends))
        # The claim hands nothing out in STOPPED; the state as this process knows it says why
        # (a stop on another replica arrives as a signal before the woken wait looks again).
        return self._changes.state, None

    def _known_empty_until(self, now: float, ends: float | None) -> float:
        """Until when a look at ``now`` that found nothing (else) to claim holds: until the first
        lease of the agent's messages ``ends``, and no longer than the periodic re-check (a
        safety net for a signal missed; shorter while this replica may miss signals)."""
        trusted = now + (self._recheck if self._wakeups.listening else self._deaf_recheck)
        if ends is None:
            return trusted
        if ends <= now:
            # Free already, yet not claimed: another replica is claiming it right now (SKIP
            # LOCKED). Its claim commits in a moment; look again then.
            ends = now + BUSY_RECHECK_SECONDS
        return min(ends, trusted)

    async def _release(self, agent: str, message_id: str, token: str) -> None:
        """Give a lease back (the answer never went out): the next wait of ``agent`` takes it."""
        self._held.pop(token, None)
        try:
            async with self._store.write() as q:
                released = await q.release(message_id, token)
                if released:
                    await q.notify(agent)
        except (StoreError, SQLAlchemyError) as err:
            # The lease runs out by itself; the message then goes out again.
            log.warning(
                "lease of message %s not given back (%s); it is redelivered when it runs out", message_id, err
            )
            return
        if released:
            self._wakeups.queued(agent)
            self._wakeups.wake(agent)

    async def release_all(self) -> None:
        """At a clean close: give back every lease whose answer the transport did not report."""
        for token, message_id in list(self._held.items()):
            async with self._store.write() as q:
                await q.release(message_id, token)
            self._held.pop(token, None)

    def _lease_callbacks(
        self, agent: str, row: MessageRow
    ) -> tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]:
        token = row.lease_token
        assert token is not None
        message_id = row.id
        ended = False

        async def delivered() -> None:
            nonlocal ended
            if ended:
                return
            ended = True
            self._held.pop(token, None)

            async def mark() -> bool:
                if row.acknowledges:
                    self._acknowledging.add(agent)  # told by another replica, or before a restart
                if agent in self._acknowledging:
                    # Written, but it may not have reached the agent: it stays leased until the
                    # agent acknowledges it, and goes out again if that does not happen in time.
                    until = self._clock() + self._ack_timeout
                    async with self._store.write_one() as q:
                        held = await q.hold_for_ack(message_id, token, until)
                    if held:
                        self._wakeups.lease_ends(agent, until)  # its waits look again then
                    return False
                async with self._store.write_one() as q:
                    return await q.acknowledge(message_id, token, iso(self._clock()))

            try:
                removed = await self._changes.shielded(mark())
            except (StoreError, SQLAlchemyError) as err:
                # The answer went out but the queue could not be updated: the lease runs out and
                # the message goes out again (same messageId, higher deliveryAttempt).
                self._wakeups.queued(agent)
                log.warning("message %s delivered but not removed from its queue: %s", message_id, err)
                removed = False
            if removed:
                self._metrics.broker_messages_delivered.labels(agent).inc()

        async def abandoned() -> None:
            nonlocal ended
            if ended:
                return
            ended = True
            await self._changes.shielded(self._release(agent, message_id, token))

        return delivered, abandoned


def _wait_unavailable() -> DatabaseUnavailable:
    return DatabaseUnavailable(
        "The broker's database could not serve this call right now (the gateway's log says why; if it "
        "persists, an operator should look at it). No message was taken from your queue: call "
        "wait_for_message again in a moment, with the same `ack` if you sent one."
    )
