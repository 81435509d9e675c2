"""A phase's work flow: ``start_phase``, ``begin_developing``, ``report_completion``, ``report_review``.

Contract: broker.md ("States"). Each call is one change (``gateway.broker.changes``):
the pure classifiers of ``gateway.broker.machine`` turn the call and the counters into an event,
and the change applies its transition. The fail and fix limits are ``broker.fail_limit`` and
``broker.fix_limit``; an approved review may schedule the next phase's auto-advance
(``gateway.broker.auto_advance``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway.broker.auto_advance import cooldown_seconds, next_plan_phase
from gateway.broker.changes import Changes
from gateway.broker.effects import After, Facts
from gateway.broker.errors import BrokerError
from gateway.broker.machine import Event, completion_event, review_event
from gateway.broker.store import PipelineRow, Queries

if TYPE_CHECKING:
    from gateway.config import BrokerSettings


class Phases:
    """The phase work flow of one broker.

    Args:
        changes: runs each call as a change.
        config: the ``broker`` settings (limits, cooldown override).
        clock: Unix time source.
    """

    def __init__(self, changes: Changes, config: BrokerSettings, clock: Callable[[], float]) -> None:
        self._changes = changes
        self._config = config
        self._clock = clock

    async def start_phase(self, agent: str, phase: int, issues: list[str]) -> dict[str, Any]:
        """``start_phase``: IDLE → PHASE_PREPARING with ``issues`` all ``todo``.

        Returns ``{success, phase, issueCount, state}``. Raises BrokerError ``conflict`` outside IDLE.
        """

        async def body(q: Queries, p: PipelineRow, after: After) -> dict[str, Any]:
            f = Facts(agent=agent, now=self._clock(), phase=phase, issues=issues)
            t = await self._changes.apply(q, p, Event.START_PHASE, f, after)
            after.pipeline_log.append((agent, f"phase {phase} prepared: {', '.join(issues)}"))
            return {"success": True, "phase": phase, "issueCount": len(issues), "state": t.target.value}

        return await self._changes.run(agent, body)

    async def begin_developing(self, agent: str) -> dict[str, Any]:
        """``begin_developing``: PHASE_PREPARING → PHASE_DEVELOPING; the first issue goes in progress.

        Returns ``{success, state, currentIssue}``.
        """

        async def body(q: Queries, p: PipelineRow, after: After) -> dict[str, Any]:
            t = await self._changes.apply(
                q, p, Event.BEGIN_DEVELOPING, Facts(agent=agent, now=self._clock()), after
            )
            return {
                "success": True,
                "state": t.target.value,
                "currentIssue": after.results.get("currentIssue"),
            }

        return await self._changes.run(agent, body)

    async def report_completion(self, agent: str, issue: str, result: str) -> dict[str, Any]:
        """``report_completion``: pass moves to the next issue or to review; fail raises the fail count.

        Returns ``{success, allDone, nextIssue?, failCount?, state}``.

        Raises:
            BrokerError: ``conflict`` outside PHASE_DEVELOPING or when ``issue`` is not the one in
                progress; ``bad_request`` when ``issue`` is not in the phase.
        """

        async def body(q: Queries, p: PipelineRow, after: After) -> dict[str, Any]:
            self._changes.decide(p, Event.PASS_NEXT)  # the state check comes before looking at the issue
            issues = await q.issues()
            target = next((i for i in issues if i.id == issue), None)
            if target is None:
                raise BrokerError(
                    "bad_request",
                    f"Issue {issue!r} is not in phase {p.phase}; its issues are: "
                    f"{', '.join(i.id for i in issues)}. Nothing was changed.",
                    phase=p.phase,
                    issues=[i.id for i in issues],
                )
            if target.status != "in_progress":
                current = next((i.id for i in issues if i.status == "in_progress"), None)
                raise BrokerError(
                    "conflict",
                    f"Issue {issue} is {target.status}, not in progress"
                    + (f"; the issue in progress is {current}: report that one" if current else "")
                    + ". Nothing was changed.",
                    issue=issue,
                    status=target.status,
                    in_progress=current,
                )
            todo_left = sum(1 for i in issues if i.status == "todo")
            event = completion_event(
                result,
                todo_left=todo_left,
                fail_count_after=target.fail_count + 1,
                fail_limit=self._config.fail_limit,
            )
            reason = None
            if event is Event.FAIL_LIMIT:
                reason = (
                    f"issue {issue} failed {target.fail_count + 1} times "
                    f"(fail limit {self._config.fail_limit})"
                )
            f = Facts(agent=agent, now=self._clock(), issue=issue, reason=reason)
            t = await self._changes.apply(q, p, event, f, after)
            after.pipeline_log.append((agent, f"report_completion {issue} {result}"))
            out: dict[str, Any] = {"success": True, "allDone": event is Event.PASS_LAST}
            if "nextIssue" in after.results:
                out["nextIssue"] = after.results["nextIssue"]
            if "failCount" in after.results:
                out["failCount"] = after.results["failCount"]
            out["state"] = t.target.value
            return out

        return await self._changes.run(agent, body)

    async def report_review(
        self, agent: str, result: str, pr_id: str | None, has_next_phase: bool | None
    ) -> dict[str, Any]:
        """``report_review``: approved → IDLE (auto-advance) or COMPLETED; changes → back to development.

        Returns ``{success, state, fixCount?, autoAdvance?}``.
        """

        async def body(q: Queries, p: PipelineRow, after: After) -> dict[str, Any]:
            self._changes.decide(p, Event.APPROVED_NEXT)
            plan = await q.plan()
            next_phase = next_plan_phase(plan, p.phase)
            has_next = has_next_phase if has_next_phase is not None else next_phase is not None
            event = review_event(
                result,
                has_next_phase=has_next,
                auto_advance=p.auto_advance,
                next_plan_phase=next_phase,
                fix_count_after=p.fix_count + 1,
                fix_limit=self._config.fix_limit,
            )
            reason = None
            if event is Event.CHANGES_LIMIT:
                reason = (
                    f"the review asked for changes {p.fix_count + 1} times in phase {p.phase} "
                    f"(fix limit {self._config.fix_limit})" + (f", {pr_id}" if pr_id else "")
                )
            f = Facts(
                agent=agent,
                now=self._clock(),
                reason=reason,
                next_plan_phase=next_phase,
                cooldown_seconds=cooldown_seconds(self._config, plan),
            )
            t = await self._changes.apply(q, p, event, f, after)
            after.pipeline_log.append((agent, f"report_review {result}" + (f" {pr_id}" if pr_id else "")))
            out: dict[str, Any] = {"success": True, "state": t.target.value}
            if "fixCount" in after.results:
                out["fixCount"] = after.results["fixCount"]
            if "autoAdvance" in after.results:
                out["autoAdvance"] = after.results["autoAdvance"]
            return out

        return await self._changes.run(agent, body)
