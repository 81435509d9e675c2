"""A transition's effects, carried out inside the transaction of the change that fires it.

The pure table (``gateway.broker.machine``) names each transition's effects; :class:`Effects`
writes them to the store and notes in :class:`After` what must happen in-process once the
transaction commits (wake-ups, queue depths, the pipeline log, the auto-advance timer, the stop
file), which ``gateway.broker.changes`` then applies. Nothing here touches in-process state, so a
change that rolls back leaves no trace.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gateway.broker.formats import BROKER, PRIORITIES, iso, new_message_id
from gateway.broker.machine import Effect, State
from gateway.broker.roster import Roster
from gateway.broker.store import PipelineRow, Queries


@dataclass
class Facts:
    """The inputs an effect may need, gathered by the operation before deciding.

    Attributes:
        agent: the caller, or None for the broker itself (the timer, a stop found at start).
        now: Unix time of the change.
        issue: the issue reported on (``report_completion``).
        phase / issues: the phase to start and its issue ids.
        reason: why a person is needed, why the pipeline stopped, or why an auto-advance was cancelled.
        next_plan_phase: the plan's phase after the current one (auto-advance).
        cooldown_seconds: the auto-advance cooldown to schedule.
    """

    agent: str | None
    now: float
    issue: str | None = None
    phase: int | None = None
    issues: list[str] = field(default_factory=list)
    reason: str | None = None
    next_plan_phase: int | None = None
    cooldown_seconds: float = 0.0


@dataclass
class After:
    """In-process consequences of a committed change, applied by ``Changes.after_commit``.

    Attributes:
        wake: agents whose open waits are woken.
        sent: one recipient per message queued (queue depths, metrics).
        transitions: ``(from, to, event, by)`` for the metrics and the pipeline log.
        pipeline_log: ``(who, text)`` lines for ``pipeline.log``.
        state: the committed state, when the change set one.
        timer: ``(stage, deadline)`` for the auto-advance timer; ``(None, None)`` stops it.
        stop: the pipeline stopped: write ``.stop-pipeline`` and wake every wait.
        results: values effects hand back to the operation (``currentIssue``, ``failCount``...).
    """

    wake: set[str] = field(default_factory=set)
    sent: list[str] = field(default_factory=list)
    transitions: list[tuple[State, State, str, str | None]] = field(default_factory=list)
    pipeline_log: list[tuple[str, str]] = field(default_factory=list)
    state: State | None = None
    timer: tuple[str | None, float | None] | None = None
    stop: bool = False
    #: An operator started over: remove ``.stop-pipeline``, archive the log files, tell replicas.
    reset: bool = False
    results: dict[str, Any] = field(default_factory=dict)
    #: ``(log, at, who, text)`` lines written to the database, for the log files after commit.
    log_lines: list[tuple[str, str, str, str]] = field(default_factory=list)


class Effects:
    """Carries out :class:`~gateway.broker.machine.Effect` values against the store.

    Args:
        roster: the agents (who gets a notice, who is connected).
        session_reset_seconds: auto-advance's ``session_reset`` stage length
            (``broker.session_reset_seconds``).
        fail_limit: failed reports of one issue that call for a person (``broker.fail_limit``).
        fix_limit: reviews of one phase asking for changes that call for a person
            (``broker.fix_limit``).
    """

    def __init__(
        self, roster: Roster, *, session_reset_seconds: float, fail_limit: int, fix_limit: int
    ) -> None:
        self._roster = roster
        self._session_reset_seconds = session_reset_seconds
        self._fail_limit = fail_limit
        self._fix_limit = fix_limit

    async def apply(
        self, effect: Effect, q: Queries, p: PipelineRow, f: Facts, after: After, now_iso: str
    ) -> None:
        """Write ``effect`` in ``q``'s transaction; ``p`` is the pipeline row before the change."""
        if effect is Effect.INIT_PHASE:
            await q.replace_issues(f.issues)
            await q.update_pipeline(now_iso, phase=f.phase, fix_count=0)
        elif effect is Effect.CLEAR_AUTO_ADVANCE:
            if p.aa_stage is not None:
                await clear_auto_advance(q, after, now_iso)
        elif effect is Effect.FIRST_IN_PROGRESS:
            issues = await q.issues()
            if issues:
                await q.set_issue(issues[0].id, status="in_progress")
                after.results["currentIssue"] = issues[0].id
        elif effect is Effect.MARK_DONE_NEXT:
            assert f.issue is not None
            await q.set_issue(f.issue, status="done")
            nxt = next(i for i in await q.issues() if i.status == "todo")
            await q.set_issue(nxt.id, status="in_progress")
            after.results["nextIssue"] = nxt.id
        elif effect is Effect.MARK_DONE:
            assert f.issue is not None
            await q.set_issue(f.issue, status="done")
        elif effect is Effect.RAISE_FAIL:
            issue = next(i for i in await q.issues() if i.id == f.issue)
            await q.set_issue(issue.id, fail_count=issue.fail_count + 1)
            after.results["failCount"] = issue.fail_count + 1
        elif effect is Effect.COMPLETE_PHASE:
            plan = await q.plan()
            if plan is not None and p.phase is not None and p.phase not in plan.completed_phases:
                plan.completed_phases.append(p.phase)
                await q.save_plan(plan, now_iso)
        elif effect is Effect.SCHEDULE_AUTO_ADVANCE:
            deadline = f.now + f.cooldown_seconds
            await q.update_pipeline(
                now_iso, aa_stage="cooldown", aa_deadline=deadline, aa_next_phase=f.next_plan_phase
            )
            after.timer = ("cooldown", deadline)
            after.results["autoAdvance"] = {
                "stage": "cooldown",
                "nextPhase": f.next_plan_phase,
                "deadline": iso(deadline),
            }
            after.pipeline_log.append(
                (BROKER, f"auto-advance: cooldown until {iso(deadline)}, then phase {f.next_plan_phase}")
            )
        elif effect is Effect.RAISE_FIX:
            await q.update_pipeline(now_iso, fix_count=p.fix_count + 1)
            after.results["fixCount"] = p.fix_count + 1
        elif effect is Effect.REOPEN_ISSUES:
            await q.reopen_issues()
        elif effect is Effect.REOPEN_IF_ALL_DONE:
            if all(i.status == "done" for i in await q.issues()):
                await q.reopen_issues()
        elif effect is Effect.REMEMBER_ORIGIN:
            origin = p.human_origin if p.state is State.HUMAN_NEEDED else p.state
            await q.update_pipeline(
                now_iso, human_origin=origin, human_reason=f.reason, human_by=f.agent, human_at=now_iso
            )
        elif effect is Effect.NOTIFY_HUMAN_NEEDED:
            origin = p.human_origin if p.state is State.HUMAN_NEEDED else p.state
            body = {
                "reason": f.reason,
                "requestedBy": f.agent,
                "previousState": p.state.value,
                "phase": p.phase,
                "origin": origin.value if origin else None,
            }
            await notify(q, after, await self._connected(q), "human_needed", body, now_iso)
        elif effect is Effect.NOTIFY_RESUMED:
            await q.update_pipeline(
                now_iso, human_origin=None, human_reason=None, human_by=None, human_at=None
            )
            await notify(
                q,
                after,
                await self._connected(q),
                "resumed",
                {"resumedBy": f.agent, "phase": p.phase},
                now_iso,
            )
        elif effect is Effect.RESET_REACHED_LIMITS:
            failed = [i.id for i in await q.issues() if i.fail_count >= self._fail_limit]
            for failed_id in failed:
                await q.set_issue(failed_id, fail_count=0)
            if failed:
                after.pipeline_log.append(
                    (f.agent or BROKER, f"failCount of {', '.join(failed)} back to 0: resumed to try again")
                )
            if p.fix_count >= self._fix_limit:
                await q.update_pipeline(now_iso, fix_count=0)
                after.pipeline_log.append(
                    (f.agent or BROKER, f"fixCount of phase {p.phase} back to 0: resumed to try again")
                )
        elif effect is Effect.NOTIFY_AUTO_ADVANCE_CANCELLED:
            # Every agent, as for the auto-advance's own notices: after a session_reset they wait
            # for a phase_started that now comes only after the PM resumes.
            body = {
                "stage": p.aa_stage,
                "nextPhase": p.aa_next_phase,
                "reason": f.reason,
                "cancelledBy": f.agent,
                "state": State.PAUSED.value,
            }
            await notify(q, after, self._roster.agents, "auto_advance_cancelled", body, now_iso)
        elif effect is Effect.SESSION_RESET:
            deadline = f.now + self._session_reset_seconds
            await q.update_pipeline(now_iso, aa_stage="session_reset", aa_deadline=deadline)
            after.timer = ("session_reset", deadline)
            await notify(
                q,
                after,
                self._roster.agents,
                "session_reset",
                {"nextPhase": p.aa_next_phase, "phaseStartsAt": iso(deadline)},
                now_iso,
            )
            after.pipeline_log.append(
                (
                    BROKER,
                    f"auto-advance: session_reset sent, phase {p.aa_next_phase} starts at {iso(deadline)}",
                )
            )
        elif effect is Effect.NOTIFY_PHASE_STARTED:
            await notify(
                q,
                after,
                self._roster.agents,
                "phase_started",
                {"phase": f.phase, "issues": f.issues, "startedBy": "auto_advance"},
                now_iso,
            )
        elif effect is Effect.STOP:
            await q.update_pipeline(now_iso, stopped_by=f.agent or BROKER, stopped_at=now_iso)
            after.stop = True
            after.results["stopped_by"] = f.agent or BROKER
            after.results["stopped_at"] = now_iso

    async def _connected(self, q: Queries) -> list[str]:
        # broker.md, request_human: "every connected agent is told"; the caller too (it is
        # connected), so every agent's queue carries the same notices. Agents connected through
        # other replicas are known from their saved lastSeen.
        self._roster.merge(await q.last_seen())
        return [a for a in self._roster.agents if self._roster.connected(a)]


async def clear_auto_advance(q: Queries, after: After, now_iso: str) -> None:
    """Drop the auto-advance under way (``q``'s transaction) and stop the timer after commit."""
    await q.update_pipeline(now_iso, aa_stage=None, aa_deadline=None, aa_next_phase=None)
    after.timer = (None, None)


async def queue_message(
    q: Queries,
    after: After,
    *,
    sender: str,
    recipient: str,
    subject: str,
    body: dict[str, Any],
    priority: int,
    created_at: str,
    reply_to: str | None = None,
    thread_id: str | None = None,
) -> str:
    """Insert one message in ``q``'s transaction and note its recipient's wake-up; its new ``messageId``.

    ``thread_id`` None starts a thread of its own (the message's id).
    """
    message_id = new_message_id()
    await q.insert_message(
        id=message_id,
        sender=sender,
        recipient=recipient,
        subject=subject,
        body=body,
        priority=priority,
        reply_to=reply_to,
        thread_id=thread_id or message_id,
        created_at=created_at,
    )
    after.sent.append(recipient)
    after.wake.add(recipient)
    return message_id


async def notify(
    q: Queries, after: After, recipients: Iterable[str], subject: str, body: dict[str, Any], now_iso: str
) -> None:
    """Queue one ``high`` priority notice from the broker to each of ``recipients`` (``q``'s transaction)."""
    for recipient in recipients:
        await queue_message(
            q,
            after,
            sender=BROKER,
            recipient=recipient,
            subject=subject,
            body=body,
            priority=PRIORITIES["high"],
            created_at=now_iso,
        )
