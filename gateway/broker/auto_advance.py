"""The auto-advance timer: cooldown, then ``session_reset``, then the next phase starts by itself.

Rules: ``docs/broker.md`` "Auto-advance". An approved review with a next phase in the plan
and ``autoAdvance`` on schedules the ``cooldown`` stage (effect ``SCHEDULE_AUTO_ADVANCE``: the
plan's ``cooldownMinutes``, or ``broker.cooldown_seconds_override``); at its deadline every agent
gets a ``session_reset`` notice (effect ``SESSION_RESET``, ``broker.session_reset_seconds``); at
that deadline the next phase starts (``AUTO_ADVANCE_START``).

The stage and its deadline live in the database (``aa_stage``, ``aa_deadline``), written by the
change that schedules them; :class:`AutoAdvance` only keeps one asyncio task sleeping until the
deadline, whose step is a change of its own and is skipped when the stored stage moved on
(cancelled, turned off, superseded). A step that fails for any other reason (a full disk, a
locked database) is logged and tried again after a bounded backoff (:data:`RETRY_SECONDS`), so
the stage is never left stuck. After a restart the service reschedules the stored stage, so an
advance resumes where it was.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from gateway.broker.changes import Changes
from gateway.broker.effects import After, Facts
from gateway.broker.errors import BrokerError
from gateway.broker.formats import BROKER, iso
from gateway.broker.machine import Event
from gateway.broker.store import PipelineRow, PlanRow, Queries, StoreError

if TYPE_CHECKING:
    from gateway.config import BrokerSettings

log = logging.getLogger(__name__)

#: Seconds before a failed step is tried again, doubled after each failure up to
#: :data:`RETRY_MAX_SECONDS`; the stored deadline stays the one the step was set for.
RETRY_SECONDS = 5.0
RETRY_MAX_SECONDS = 60.0


class AutoAdvance:
    """The one timer of a broker.

    Args:
        changes: runs each step as a change.
        clock: Unix time source (deadlines are Unix times).
        closing: the shutdown reason, or None while the broker runs; no timer starts once set.
    """

    def __init__(
        self, changes: Changes, clock: Callable[[], float], closing: Callable[[], str | None]
    ) -> None:
        self._changes = changes
        self._clock = clock
        self._closing = closing
        self._timer: asyncio.Task[None] | None = None

    def reschedule(self, stage: str | None, deadline: float | None, *, retry_in: float | None = None) -> None:
        """Replace the timer: sleep until ``deadline`` (Unix time), then take ``stage``'s step.

        ``(None, None)`` only stops the timer. ``retry_in``: sleep that many seconds instead (a
        failed step tried again), the step still checking the stored stage against ``deadline``.

        The old timer task is cancelled, unless it is the caller (a retry). A step's change runs
        in its own shielded task (``Changes.shielded``), whose commit reschedules: the timer task
        awaiting it is then cancelled, and the step itself still finishes.
        """
        if self._timer is not None and self._timer is not asyncio.current_task():
            self._timer.cancel()
        self._timer = None
        if stage is not None and deadline is not None and self._closing() is None:
            self._timer = asyncio.get_running_loop().create_task(self._run(stage, deadline, retry_in))

    async def close(self) -> None:
        """Stop the timer and wait until it has stopped; never raises what the timer task raised."""
        if self._timer is not None:
            self._timer.cancel()
            await asyncio.gather(self._timer, return_exceptions=True)

    async def _run(self, stage: str, deadline: float, retry_in: float | None) -> None:
        wake_at = deadline if retry_in is None else self._clock() + retry_in
        await asyncio.sleep(max(0.0, wake_at - self._clock()))
        try:
            await self._advance(stage, deadline)
        except (StoreError, BrokerError) as err:
            # The database is closed (shutdown), or the table refuses the step: nothing to retry.
            log.warning("auto-advance step %s not taken: %s", stage, err)
        except Exception:
            # Anything else (sqlite3.OperationalError "database or disk is full", ...) rolled the
            # step back: try again rather than leave the stage stuck past its deadline.
            again = RETRY_SECONDS if retry_in is None else min(retry_in * 2, RETRY_MAX_SECONDS)
            log.exception("auto-advance step %s failed; trying again in %s s", stage, again)
            if self._timer is asyncio.current_task():  # not replaced meanwhile
                self.reschedule(stage, deadline, retry_in=again)

    async def _advance(self, stage: str, deadline: float) -> None:
        """One auto-advance step, if the stored stage is still the one this timer was set for."""

        async def body(q: Queries, p: PipelineRow, after: After) -> None:
            if p.aa_stage != stage or p.aa_deadline != deadline:
                return  # cancelled or superseded since
            now = self._clock()
            if stage == "cooldown":
                await self._changes.apply(q, p, Event.AUTO_ADVANCE_RESET, Facts(agent=None, now=now), after)
                return
            plan = await q.plan()
            entry = next((ph for ph in (plan.phases if plan else []) if ph["phase"] == p.aa_next_phase), None)
            if entry is None:
                await q.update_pipeline(iso(now), aa_stage=None, aa_deadline=None, aa_next_phase=None)
                after.timer = (None, None)
                after.pipeline_log.append(
                    (BROKER, f"auto-advance dropped: phase {p.aa_next_phase} is no longer in the phase plan")
                )
                return
            f = Facts(agent=None, now=now, phase=entry["phase"], issues=list(entry["issues"]))
            await self._changes.apply(q, p, Event.AUTO_ADVANCE_START, f, after)
            after.pipeline_log.append((BROKER, f"auto-advance started phase {entry['phase']}"))

        await self._changes.run(None, body)


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
