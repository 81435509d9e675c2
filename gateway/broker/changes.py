"""The change unit: every change of the broker's state is one shielded write transaction.

How a change is made: :meth:`Changes.run` opens one write transaction, reads the pipeline row
holding it (``FOR UPDATE`` on PostgreSQL, so two replicas reporting at once advance the state
once; ``BEGIN IMMEDIATE`` on SQLite) and hands it to the operation's body, which asks the pure table
(``gateway.broker.machine``) for the transition (:meth:`Changes.apply`: refused with a
``conflict`` that says where the pipeline is), applies its effects (``gateway.broker.effects``)
writes the pipeline log lines and the wake-up signals (``pg_notify``) in the same transaction, and
commits; only then are in-process consequences applied (local wake-ups, metrics, the log files,
the timer, the stop file). The unit runs shielded from cancellation: a caller that
goes away mid-change cannot leave a committed change without its wake-ups.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gateway.broker.activity_log import PIPELINE_LOG, ActivityLogs
from gateway.broker.effects import After, Effects, Facts
from gateway.broker.errors import BrokerError
from gateway.broker.feed import ChangeFeed
from gateway.broker.formats import BROKER, iso
from gateway.broker.machine import Event, Refused, State, Transition, decide, tool_of
from gateway.broker.queries import RowLock
from gateway.broker.roster import Roster
from gateway.broker.state_dir import STOP_FILE, write_stop_file
from gateway.broker.store import PipelineRow, Queries, Store
from gateway.broker.wakeups import CHANGED, RESET, STOP, TIMER, Wakeups

if TYPE_CHECKING:
    from gateway.observability.metrics import Metrics

T = TypeVar("T")

MONITORING = "get_pipeline_status, get_activity_log, get_message_history, get_phase_plan, log_activity"


def _no_timer(stage: str | None, deadline: float | None) -> None:
    return None


class Changes:
    """Runs the broker's changes and keeps the in-process view of their outcome.

    Args:
        store: the opened database.
        wakeups: this process's open waits.
        logs: the activity logs (``pipeline.log``).
        metrics: the app's metrics.
        roster: the agents (``lastSeen`` is saved with each change of a caller).
        effects: carries out transitions' effects.
        state_dir: the state folder (``.stop-pipeline``).
        clock: Unix time source.

    Attributes:
        state: the state as of the last commit, for checks that need no transaction (waits).
        reschedule: ``reschedule(stage, deadline)`` of the auto-advance timer; the service binds it
            once both exist, because the timer's steps are themselves changes.
        feed: moves after every committed change (the live console watches it).
    """

    def __init__(
        self,
        store: Store,
        wakeups: Wakeups,
        logs: ActivityLogs,
        metrics: Metrics,
        roster: Roster,
        effects: Effects,
        state_dir: Path,
        clock: Callable[[], float],
    ) -> None:
        self.store = store
        self.state = State.IDLE
        self.reschedule: Callable[[str | None, float | None], None] = _no_timer
        self._wakeups = wakeups
        self._logs = logs
        self._metrics = metrics
        self._roster = roster
        self._effects = effects
        self._state_dir = state_dir
        self._clock = clock
        self._pending: set[asyncio.Task[Any]] = set()
        self.feed = ChangeFeed()

    async def run(
        self,
        agent: str | None,
        body: Callable[[Queries, PipelineRow, After], Awaitable[T]],
        *,
        lock: RowLock = "update",
        save_seen: bool = True,
    ) -> T:
        """Run ``body(q, pipeline_row, after)`` in one write transaction, shielded; then apply ``after``.

        Args:
            lock: how the pipeline row is held: ``update`` for a change that may move the state,
                ``share`` for one that only must not race a stop (a message sent).
            save_seen: save ``agent``'s lastSeen in the transaction (else the next timer look does).

        ``agent``'s ``lastSeen`` is saved in the same transaction. Whatever ``body`` raises rolls
        the transaction back and reaches the caller.
        """

        async def unit() -> T:
            after = After()
            async with self.store.write() as q:
                p = await q.pipeline(lock)
                result = await body(q, p, after)
                await self._finish(q, agent if save_seen else None, after)
            self.after_commit(after)
            return result

        return await self.shielded(unit())

    async def run_due(
        self, now: float, body: Callable[[Queries, PipelineRow, After], Awaitable[None]]
    ) -> bool:
        """A timer's step: claim the pipeline row when an auto-advance stage is due at ``now``
        (``FOR UPDATE SKIP LOCKED``: a replica in the middle of a change is not waited for; its
        commit moves the stage on or leaves it due for the next look), then run ``body`` in the
        same transaction. False when nothing was due or the row was busy.
        """

        async def unit() -> bool:
            after = After()
            async with self.store.write() as q:
                p = await q.due_pipeline(now)
                if p is None:
                    return False
                await body(q, p, after)
                await self._finish(q, None, after)
            self.after_commit(after)
            return True

        return await self.shielded(unit())

    async def _finish(self, q: Queries, agent: str | None, after: After) -> None:
        """The change's own bookkeeping, in its transaction: lastSeen, log lines, signals."""
        if agent is not None and (seen := self._roster.last_seen(agent)) is not None:
            await q.save_last_seen({agent: seen}, self._roster.replica)
        now_iso = iso(self._clock())
        lines = [
            (PIPELINE_LOG, now_iso, by or BROKER, f"{old} -> {new} ({event})")
            for old, new, event, by in after.transitions
        ]
        lines += [(PIPELINE_LOG, now_iso, who, text) for who, text in after.pipeline_log]
        await q.append_log(lines)
        after.log_lines = lines
        for recipient in sorted(after.wake):
            await q.notify(recipient)
        if after.stop:
            await q.notify(STOP)
        if after.timer is not None:
            await q.notify(TIMER)
        if after.reset:
            await q.notify(RESET)
        elif lines and not after.wake and not after.stop:
            # A change with nothing to wake (begin_developing, a plan, a switch): other replicas'
            # consoles still show it.
            await q.notify(CHANGED)

    async def shielded(
        self, coro: Coroutine[Any, Any, T], *, if_cancelled: Callable[[T], None] | None = None
    ) -> T:
        """Await ``coro`` as a task its caller's cancellation does not stop.

        Args:
            coro: the work.
            if_cancelled: when the caller was cancelled, called with the result once the work
                finishes (not when it failed), to give back what nobody will use.
        """
        task: asyncio.Task[T] = asyncio.ensure_future(coro)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            # The work goes on; nobody will read its outcome.
            def finished(t: asyncio.Task[T]) -> None:
                if t.cancelled() or t.exception() is not None:
                    return
                if if_cancelled is not None:
                    if_cancelled(t.result())

            task.add_done_callback(finished)
            raise

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` in the background; :meth:`drain` waits for it at close."""
        task = asyncio.ensure_future(coro)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def drain(self) -> None:
        """Wait for every shielded task still running (at close)."""
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

    def refusal(self, p: PipelineRow | None, err: Refused) -> BrokerError:
        """The ``conflict`` for an event the table refuses, saying where the pipeline is and why."""
        tool = tool_of(err.event)
        if err.state is State.STOPPED:
            by = f" by {p.stopped_by}" if p is not None and p.stopped_by else ""
            at = f" at {p.stopped_at}" if p is not None and p.stopped_at else ""
            return BrokerError(
                "conflict",
                f"The pipeline is STOPPED (stop_pipeline{by}{at}): {tool} and every other "
                f"state-changing call are refused. Monitoring tools still work ({MONITORING}). Only a "
                "person can start a new pipeline (the stopped one is archived): from the broker console "
                "(/broker, 'Start over') or with `gitlab-mcp-gateway broker reset`.",
                state=err.state.value,
                allowed_states=[s.value for s in err.allowed],
            )
        hint = ""
        if err.state is State.HUMAN_NEEDED:
            hint = " The pipeline waits for a person: the PM calls resume once they have decided."
        elif err.state is State.PAUSED:
            hint = " The pipeline is paused (an auto-advance was cancelled): the PM calls resume."
        elif err.state is State.COMPLETED:
            hint = (
                " The plan is complete. To run another from here: call request_human, then the PM calls "
                "resume (back to IDLE) and start_phase."
            )
        allowed = ", ".join(s.value for s in err.allowed)
        return BrokerError(
            "conflict",
            f"{tool} is not allowed in state {err.state}; it is allowed in: {allowed}. Nothing was changed."
            f"{hint} Call get_pipeline_status to see where the pipeline is.",
            state=err.state.value,
            allowed_states=[s.value for s in err.allowed],
        )

    def decide(self, p: PipelineRow, event: Event) -> Transition:
        """The table's transition for ``event`` in ``p``'s state.

        Raises:
            BrokerError: ``conflict`` (:meth:`refusal`) when the state does not allow ``event``.
        """
        try:
            return decide(p.state, event)
        except Refused as err:
            raise self.refusal(p, err) from None

    async def apply(self, q: Queries, p: PipelineRow, event: Event, f: Facts, after: After) -> Transition:
        """Decide ``event`` and apply its transition's effects and state change in ``q``'s transaction."""
        t = self.decide(p, event)
        now_iso = iso(f.now)
        for effect in t.effects:
            await self._effects.apply(effect, q, p, f, after, now_iso)
        if t.target is not p.state:
            await q.update_pipeline(now_iso, state=t.target)
            await q.record_transition(now_iso, p.state, t.target, event.value, f.agent)
            after.transitions.append((p.state, t.target, event.value, f.agent))
            after.state = t.target
        elif event is Event.STOP:
            after.state = t.target
        return t

    def after_commit(self, after: After) -> None:
        """Apply a committed change's in-process consequences (see :class:`~gateway.broker.effects.After`)."""
        if after.reset:
            # Before this change's own lines are written: they are the new pipeline's first.
            self.remove_stop_file()
            self._logs.archive(after.results["archivedGeneration"])
        for recipient in after.sent:
            self._metrics.broker_messages_sent.labels(recipient).inc()
        for agent in after.wake:
            self._wakeups.wake(agent)
        for old, new, _event, _by in after.transitions:
            self._metrics.broker_transitions.labels(old.value, new.value).inc()
        self._logs.write_files(after.log_lines)
        if after.state is not None:
            self.state = after.state
            self.set_state_metrics()
        if after.stop:
            self.write_stop_file(after.results.get("stopped_by"), after.results.get("stopped_at"))
            self._wakeups.wake_all()
        if after.timer is not None:
            self.reschedule(*after.timer)
        self.feed.changed()

    def set_state_metrics(self) -> None:
        """``gateway_broker_state``: 1 for :attr:`state`, 0 for every other state."""
        for s in State:
            self._metrics.broker_state.labels(s.value).set(1 if s is self.state else 0)

    def remove_stop_file(self) -> None:
        """Remove ``.stop-pipeline`` (an operator started over; the database says so already)."""
        with contextlib.suppress(FileNotFoundError):
            (self._state_dir / STOP_FILE).unlink()

    def write_stop_file(self, by: str | None, at: str | None) -> None:
        """Write ``.stop-pipeline`` for a stop ``by`` an agent ``at`` a time (now when None)."""
        write_stop_file(self._state_dir, by, at or iso(self._clock()))
