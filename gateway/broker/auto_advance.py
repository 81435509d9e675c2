"""The auto-advance timer: cooldown, then ``session_reset``, then the next phase starts by itself.

Rules: ``docs/broker.md`` "Auto-advance". An approved review with a next phase in the plan
and ``autoAdvance`` on schedules the ``cooldown`` stage (effect ``SCHEDULE_AUTO_ADVANCE``: the
plan's ``cooldownMinutes``, or ``broker.cooldown_seconds_override``); at its deadline every agent
gets a ``session_reset`` notice (effect ``SESSION_RESET``, ``broker.session_reset_seconds``); at
that deadline the next phase starts (``AUTO_ADVANCE_START``).

The stage and its deadline live in the database (``aa_stage``, ``aa_deadline``), written by the
change that schedules them. Every replica runs :class:`AutoAdvance`, one asyncio task that looks
at the stored stage at its deadline (and every ``broker.timer_poll_seconds``); a due step is
claimed with the pipeline row (``FOR UPDATE SKIP LOCKED``) and applied in the same transaction,
so it fires exactly once across replicas and restarts, and is skipped once the stored stage
moved on (cancelled, turned off, superseded). A step that fails for any other reason (a full
disk, a lost connection) is logged and tried again after a bounded backoff
(:data:`RETRY_SECONDS`), so the stage is never left stuck.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from gateway.broker.changes import Changes
from gateway.broker.effects import After, Facts, clear_auto_advance
from gateway.broker.errors import BrokerError
from gateway.broker.formats import BROKER, iso
from gateway.broker.machine import Event
from gateway.broker.store import DatabaseUnavailable, PipelineRow, PlanRow, Queries, StoreError

if TYPE_CHECKING:
    from gateway.config import BrokerSettings

log = logging.getLogger(__name__)

#: Seconds before a failed step is tried again, doubled after each failure up to
#: :data:`RETRY_MAX_SECONDS`; the stored deadline stays the one the step was set for.
RETRY_SECONDS = 5.0
RETRY_MAX_SECONDS = 60.0
#: How long ``close`` lets a look in progress finish before cancelling it.
STOP_GRACE_SECONDS = 5.0


class AutoAdvance:
    """The auto-advance timer of one replica.

    Every replica runs one loop that sleeps until the stage's deadline (known from its own
    commits and from ``*timer`` signals) or ``broker.timer_poll_seconds``, whichever comes
    first, then looks at the stored stage. A due step is claimed with the pipeline row
    (``Changes.run_due``: ``FOR UPDATE SKIP LOCKED``) and applied in that transaction: its commit
    is the "done" record, so across replicas and restarts each step happens exactly once; a
    crash rolls it back and the next look (here or on another replica) takes it again.

    Args:
        changes: runs each step as a change.
        clock: Unix time source (deadlines are Unix times).
        closing: the shutdown reason, or None while the broker runs; no timer starts once set.
        poll_seconds: the longest sleep between looks.
        on_tick: called after every look (the service saves lastSeen and refreshes gauges there).
    """

    def __init__(
        self,
        changes: Changes,
        clock: Callable[[], float],
        closing: Callable[[], str | None],
        *,
        poll_seconds: float = 1.0,
        on_tick: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._changes = changes
        self._clock = clock
        self._closing = closing
        self._poll = poll_seconds
        self._on_tick = on_tick
        self._deadline: float | None = None
        self._kick = asyncio.Event()
        self._timer: asyncio.Task[None] | None = None
        self._retry_in: float | None = None
        self._stopping = False

    def start(self) -> None:
        """Start the loop (once the broker is open)."""
        if self._timer is None and self._closing() is None:
            self._timer = asyncio.get_running_loop().create_task(self._loop())

    def reschedule(self, stage: str | None, deadline: float | None) -> None:
        """A stage was stored (or dropped: ``(None, None)``); look again at ``deadline``."""
        self._deadline = deadline if stage is not None else None
        self._kick.set()

    def kick(self) -> None:
        """Look at the stored stage now (another replica changed it)."""
        self._kick.set()

    async def close(self) -> None:
        """Stop the loop and wait until it has stopped; never raises what the loop raised.

        The loop is asked to stop between looks rather than cancelled in the middle of one, so a
        database connection it holds is returned, not dropped.
        """
        if self._timer is None:
            return
        self._stopping = True
        self._kick.set()
        done, _ = await asyncio.wait({self._timer}, timeout=STOP_GRACE_SECONDS)
        if not done:
            self._timer.cancel()
        await asyncio.gather(self._timer, return_exceptions=True)

    async def abort(self) -> None:
        """Stop the loop if it still runs (the last resort of a close that failed part way)."""
        if self._timer is not None and not self._timer.done():
            await AutoAdvance.close(self)

    async def _loop(self) -> None:
        while self._closing() is None and not self._stopping:
            now = self._clock()
            wake_at = now + self._poll
            if self._retry_in is not None:
                wake_at = now + self._retry_in
            elif self._deadline is not None:
                wake_at = min(wake_at, self._deadline)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, wake_at - now)):
                    await self._kick.wait()
            self._kick.clear()
            if self._closing() is not None or self._stopping:
                return
            await self.tick()

    async def tick(self) -> None:
        """One look: take the due step, if any; then the periodic chores."""
        try:
            await self._step()
            self._retry_in = None
        except DatabaseUnavailable:
            # Logged by the store; an outage is no bug to trace: look again after the backoff.
            self._retry_in = self._backoff()
        except (StoreError, BrokerError) as err:
            # The database is closed (shutdown), or the table refuses the step: nothing to retry.
            log.warning("auto-advance step not taken: %s", err)
        except Exception:
            # Anything else (a statement the database refused) rolled the step back: try again
            # after a bounded backoff rather than leave the stage stuck past its deadline.
            again = self._retry_in = self._backoff()
            log.exception("auto-advance step %s failed; trying again in %s s", self._stage, again)
        if self._on_tick is not None:
            try:
                await self._on_tick()
            except Exception as err:  # chores are best-effort; the next tick tries again
                log.warning("broker housekeeping failed: %s", err)

    def _backoff(self) -> float:
        """Seconds before a failed step is tried again: doubled after each failure, bounded."""
        return RETRY_SECONDS if self._retry_in is None else min(self._retry_in * 2, RETRY_MAX_SECONDS)

    _stage: str | None = None

    async def _step(self) -> None:
        now = self._clock()
        async with self._changes.store.read() as q:
            p = await q.pipeline()
        self._stage = p.aa_stage
        self._deadline = p.aa_deadline if p.aa_stage is not None else None
        if p.aa_stage is None or p.aa_deadline is None or p.aa_deadline > now:
            return
        await self._advance(now)

    async def _advance(self, now: float) -> None:
        """The due step of the stored stage, claimed with the pipeline row."""

        async def body(q: Queries, p: PipelineRow, after: After) -> None:
            if p.aa_stage == "cooldown":
                await self._changes.apply(q, p, Event.AUTO_ADVANCE_RESET, Facts(agent=None, now=now), after)
                return
            plan = await q.plan()
            entry = next((ph for ph in (plan.phases if plan else []) if ph["phase"] == p.aa_next_phase), None)
            if entry is None:
                await clear_auto_advance(q, after, iso(now))
                after.pipeline_log.append(
                    (BROKER, f"auto-advance dropped: phase {p.aa_next_phase} is no longer in the phase plan")
                )
                return
            f = Facts(agent=None, now=now, phase=entry["phase"], issues=list(entry["issues"]))
            await self._changes.apply(q, p, Event.AUTO_ADVANCE_START, f, after)
            after.pipeline_log.append((BROKER, f"auto-advance started phase {entry['phase']}"))

        await self._changes.run_due(now, body)


def cooldown_seconds(config: BrokerSettings, plan: PlanRow | None) -> float:
    """The cooldown to schedule, seconds: ``broker.cooldown_seconds_override`` when set, else the
    plan's ``cooldownMinutes`` (5 without a plan)."""
    if config.cooldown_seconds_override is not None:
        return config.cooldown_seconds_override
    return (plan.cooldown_minutes if plan is not None else 5.0) * 60.0


def next_plan_phase(plan: PlanRow | None, current: int | None) -> int | None:
    """The plan's next phase after ``current``, or None when there is none (broker.md, "hasNextPhase
    omitted").

    The first phase not completed that comes after ``current`` in plan order; when ``current`` is
    not in the plan (the PM ran it by hand), the first one numbered above ``current``.
    """
    if plan is None or current is None:
        return None
    numbers = [int(ph["phase"]) for ph in plan.phases]
    if current in numbers:
        later = numbers[numbers.index(current) + 1 :]
    else:
        later = [n for n in numbers if n > current]
    done = set(plan.completed_phases)
    return next((n for n in later if n not in done), None)
