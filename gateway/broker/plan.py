"""The phase plan and its auto-advance switch: ``set_phase_plan``, ``get_phase_plan``,
``set_auto_advance``, ``cancel_auto_advance``.

Contract: broker.md ("Auto-advance"). The timer that runs an auto-advance is
``gateway.broker.auto_advance``; these calls store the plan and the switch, and drop or cancel an
auto-advance under way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.broker.changes import Changes
from gateway.broker.effects import After, Facts, clear_auto_advance
from gateway.broker.errors import BrokerError
from gateway.broker.formats import iso
from gateway.broker.machine import Event, State
from gateway.broker.store import PipelineRow, PlanRow, Queries


class Plan:
    """The phase plan of one broker.

    Args:
        changes: runs each change; its store answers ``get_phase_plan``.
        clock: Unix time source.
    """

    def __init__(self, changes: Changes, clock: Callable[[], float]) -> None:
        self._changes = changes
        self._clock = clock

    async def set_phase_plan(
        self,
        agent: str,
        plan_id: str,
        phases: list[dict[str, Any]],
        auto_advance: bool,
        cooldown_minutes: float,
    ) -> dict[str, Any]:
        """``set_phase_plan``: store the plan and the auto-advance switch.

        Completed phases are kept when ``plan_id`` is the stored plan's, else reset. Turning
        auto-advance off drops an auto-advance under way (the pipeline stays IDLE).
        Returns ``{success, totalPhases, totalIssues}``.
        """

        async def body(q: Queries, p: PipelineRow, after: After) -> dict[str, Any]:
            self._changes.decide(p, Event.SET_PHASE_PLAN)
            now_iso = iso(self._clock())
            old = await q.plan()
            completed = old.completed_phases if old is not None and old.plan_id == plan_id else []
            await q.save_plan(PlanRow(plan_id, phases, cooldown_minutes, completed), now_iso)
            await q.update_pipeline(now_iso, auto_advance=int(auto_advance))
            if not auto_advance and p.aa_stage is not None:
                await clear_auto_advance(q, after, now_iso)
                after.pipeline_log.append(
                    (agent, f"auto-advance ({p.aa_stage}) dropped: autoAdvance turned off")
                )
            total = sum(len(ph["issues"]) for ph in phases)
            after.pipeline_log.append(
                (
                    agent,
                    f"phase plan {plan_id}: {len(phases)} phases, {total} issues, autoAdvance {auto_advance}",
                )
            )
            return {"success": True, "totalPhases": len(phases), "totalIssues": total}

        return await self._changes.run(agent, body)

    async def get_phase_plan(self) -> dict[str, Any]:
        """``get_phase_plan`` → ``{planId, phases, currentPhase, completedPhases, autoAdvance,
        cooldownMinutes}``.

        Without a plan, ``planId`` and ``cooldownMinutes`` are null and the lists empty.
        """
        async with self._changes.store.read() as q:
            p = await q.pipeline()
            plan = await q.plan()
        return {
            "planId": plan.plan_id if plan else None,
            "phases": plan.phases if plan else [],
            "currentPhase": p.phase,
            "completedPhases": plan.completed_phases if plan else [],
            "autoAdvance": p.auto_advance,
            "cooldownMinutes": plan.cooldown_minutes if plan else None,
        }

    async def set_auto_advance(self, agent: str, enabled: bool) -> dict[str, Any]:
        """``set_auto_advance`` → ``{success, autoAdvance}`` (+ ``cancelledStage`` when one was dropped)."""

        async def body(q: Queries, p: PipelineRow, after: After) -> dict[str, Any]:
            self._changes.decide(p, Event.SET_AUTO_ADVANCE)
            now_iso = iso(self._clock())
            await q.update_pipeline(now_iso, auto_advance=int(enabled))
            out: dict[str, Any] = {"success": True, "autoAdvance": enabled}
            if not enabled and p.aa_stage is not None:
                await clear_auto_advance(q, after, now_iso)
                out["cancelledStage"] = p.aa_stage
            after.pipeline_log.append((agent, f"autoAdvance {'on' if enabled else 'off'}"))
            return out

        return await self._changes.run(agent, body)

    async def cancel_auto_advance(self, agent: str, reason: str) -> dict[str, Any]:
        """``cancel_auto_advance``: stop the auto-advance under way → PAUSED; ``{success, stage}``.

        Raises:
            BrokerError: ``conflict`` when no auto-advance is under way.
        """

        async def body(q: Queries, p: PipelineRow, after: After) -> dict[str, Any]:
            if p.aa_stage is None and p.state is not State.STOPPED:
                raise BrokerError(
                    "conflict",
                    f"No auto-advance is under way (state {p.state}, autoAdvance "
                    f"{'on' if p.auto_advance else 'off'}): cancel_auto_advance is only allowed during its "
                    "cooldown or session_reset stage. To keep the next phase from starting by itself, "
                    "call set_auto_advance(enabled: false). Nothing was changed.",
                    state=p.state.value,
                )
            f = Facts(agent=agent, now=self._clock(), reason=reason)
            await self._changes.apply(q, p, Event.CANCEL_AUTO_ADVANCE, f, after)
            after.pipeline_log.append((agent, f"auto-advance cancelled in its {p.aa_stage} stage: {reason}"))
            return {"success": True, "stage": p.aa_stage}

        return await self._changes.run(agent, body)
