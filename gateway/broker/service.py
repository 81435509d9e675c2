"""The phase broker service: state machine, queues, waits and the auto-advance timer.

Contract: ``shared/spec/broker.md`` (restating the seed ``003_36619a0b57b5c62f.txt``) and issue 5.
The tools (``gateway.tools.broker``) check arguments and identity, then call one method here.

How a change is made: :meth:`BrokerService._change` opens one ``BEGIN IMMEDIATE`` transaction,
reads the pipeline row, asks the pure table (``gateway.broker.machine``) for the transition,
applies its effects and commits; only then are in-process consequences applied (wake-ups,
queue depths, metrics, the pipeline log, the timer). The unit runs shielded from cancellation:
a caller that goes away mid-change cannot leave a committed change without its wake-ups.

Delivery (broker.md "Delivery", ``mcp_protocol.md`` §4.5): :meth:`wait_for_message` leases the
first queued message of the caller (priority, then time) and returns callbacks; the message
leaves its queue only when the transport reports the answer as written (``on_delivered``). A
cancelled wait or a client that went away (``on_abandoned``) gives it back. A crash between the
write and the database update redelivers the message after restart with the same ``messageId``
and a higher ``deliveryAttempt``: delivery is at-least-once.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gateway.broker.activity_log import PIPELINE_LOG, ActivityLogs, UnknownLog
from gateway.broker.machine import (
    Effect,
    Event,
    Refused,
    State,
    Transition,
    completion_event,
    decide,
    resume_event,
    review_event,
    tool_of,
)
from gateway.broker.queues import Queues
from gateway.broker.store import MessageRow, PipelineRow, PlanRow, Queries, Store, StoreError
from gateway.errors import ToolError

if TYPE_CHECKING:
    from gateway.config import Settings
    from gateway.observability.metrics import Metrics

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Sender of the broker's own notices.
BROKER = "broker"
#: The agent allowed to ``resume`` (broker.md: "The seed gives it to the PM, on a person's word").
PM = "pm"
PRIORITIES: dict[str, int] = {"high": 0, "normal": 1, "low": 2}
PRIORITY_NAMES = {v: k for k, v in PRIORITIES.items()}
STOP_FILE = ".stop-pipeline"
DB_FILE = "broker.db"
LOCK_FILE = "broker.lock"
#: Up to this many 10 ms steps for woken waits to return at shutdown.
SHUTDOWN_GRACE_STEPS = 100
MONITORING = "get_pipeline_status, get_activity_log, get_message_history, get_phase_plan, log_activity"

ProgressFn = Callable[[float, float | None, str | None], Awaitable[None]]


def iso(ts: float) -> str:
    """Unix time → ISO 8601 UTC with seconds, as the seed writes it (``2026-04-11T01:10:00Z``)."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def human_duration(seconds: float) -> str:
    """``8100`` → ``"2h 15m"`` (the seed's ``uptime`` form); ``95`` → ``"1m 35s"``."""
    s = int(seconds)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d {h}h {m}m"
    if h:
        return f"{h}h {m}m"
    if m:
        return f"{m}m {s}s"
    return f"{s}s"


@dataclass
class WaitOutcome:
    """What :meth:`BrokerService.wait_for_message` ended with.

    Attributes:
        message: the leased message (see :meth:`BrokerService.message_json`), or None.
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


@dataclass
class _Facts:
    """The inputs an effect may need, gathered by the tool method before deciding."""

    agent: str | None
    now: float
    issue: str | None = None
    phase: int | None = None
    issues: list[str] = field(default_factory=list)
    reason: str | None = None
    next_plan_phase: int | None = None
    cooldown_seconds: float = 0.0


@dataclass
class _After:
    """In-process consequences of a committed change, applied by :meth:`BrokerService._change`."""

    wake: set[str] = field(default_factory=set)
    sent: list[str] = field(default_factory=list)
    transitions: list[tuple[State, State, str, str | None]] = field(default_factory=list)
    pipeline_log: list[tuple[str, str]] = field(default_factory=list)
    state: State | None = None
    timer: tuple[str | None, float | None] | None = None
    stop: bool = False
    results: dict[str, Any] = field(default_factory=dict)


class BrokerService:
    """The broker of one gateway process. Build it with :func:`open_broker`.

    Args:
        settings: the gateway's settings (``broker`` section and ``state_dir``).
        metrics: the app's metrics.
        store: the opened database.
        logs: the activity logs.
        clock: Unix time source (tests may pass their own).
    """

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        store: Store,
        logs: ActivityLogs,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.config = settings.broker
        self.metrics = metrics
        self.store = store
        self.logs = logs
        self.clock = clock
        self.agents: tuple[str, ...] = tuple(settings.broker.agents)
        self.state_dir = Path(settings.state_dir)
        self.queues = Queues(self.agents)
        self._state = State.IDLE
        self._started = time.monotonic()
        self._last_call: dict[str, float] = {}
        self._closing: str | None = None
        self._timer: asyncio.Task[None] | None = None
        self._pending: set[asyncio.Task[Any]] = set()
        self._lock_fd: int | None = None

    # ---- lifecycle -----------------------------------------------------------------------------

    @classmethod
    async def open(cls, settings: Settings, metrics: Metrics) -> BrokerService:
        """Lock the state folder, open the database and resume where the last run stopped.

        Raises:
            StoreError: another gateway holds the state folder, or the database is unusable.
        """
        state_dir = Path(settings.state_dir)
        lock_fd = _lock_state_dir(state_dir)
        try:
            store = await Store.open(state_dir / DB_FILE)
        except BaseException:
            os.close(lock_fd)
            raise
        logs = ActivityLogs(
            state_dir / "logs",
            settings.broker.agents,
            max_bytes=settings.broker.log_max_bytes,
            backups=settings.broker.log_backups,
        )
        service = cls(settings, metrics, store, logs)
        service._lock_fd = lock_fd
        try:
            await service._resume_after_start()
        except BaseException:
            await service.close()
            raise
        return service

    async def _resume_after_start(self) -> None:
        stop_file = self.state_dir / STOP_FILE
        after = _After()
        async with self.store.write() as q:
            p = await q.pipeline()
            if stop_file.exists() and p.state is not State.STOPPED:
                # Issue 5 point 6: a .stop-pipeline present at start means STOPPED.
                facts = _Facts(agent=None, now=self.clock(), reason=f"{STOP_FILE} was present at start")
                await self._apply(q, p, Event.STOP, facts, after)
                after.stop = False  # the file is already there and nobody waits yet
            last_seen = await q.last_seen()
            depths = await q.queue_depths()
            p = await q.pipeline()
        self._state = p.state
        if p.state is State.STOPPED and not stop_file.exists():
            # The database says STOPPED for good; keep the file in step for operators and scripts.
            self._write_stop_file(p.stopped_by, p.stopped_at)
        for agent, queue in self.queues.items():
            queue.depth = depths.get(agent, 0)
        for agent, seen in last_seen.items():
            if agent in self.agents:
                with contextlib.suppress(ValueError):
                    self._last_call[agent] = (
                        datetime.strptime(seen, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
                    )
        self._after_commit(after)
        self._set_state_metrics()
        for agent, queue in self.queues.items():
            self.metrics.broker_queue_depth.labels(agent).set(queue.depth)
        self.metrics.broker_waits_open.set(0)
        self._reschedule(p.aa_stage, p.aa_deadline)
        self.logs.append(
            PIPELINE_LOG,
            iso(self.clock()),
            BROKER,
            f"broker started in {p.state}" + (f", auto-advance {p.aa_stage} resumed" if p.aa_stage else ""),
        )

    def is_open(self) -> bool:
        """True while the database is open (``/readyz``)."""
        return self.store.is_open and self._closing is None

    async def shutdown(self, reason: str) -> None:
        """Wake every open wait with a ``shutdown`` result; later waits return it at once.

        Called from the app's ``on_shutdown`` hook, before the server waits for in-flight calls.
        No message is taken from any queue by this.
        """
        if self._closing is None:
            self._closing = reason
            self.queues.wake_all()
            if self.store.is_open:
                self.logs.append(PIPELINE_LOG, iso(self.clock()), BROKER, f"shutting down: {reason}")
        # Let the woken waits return their answer before the transport's own shutdown hook
        # cancels long-running calls (which would answer them with a bare JSON-RPC error).
        for _ in range(SHUTDOWN_GRACE_STEPS):
            if self.queues.waits_open() == 0:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0)

    async def close(self) -> None:
        """Stop the timer, let pending changes finish, save ``lastSeen`` and close the database."""
        await self.shutdown("the broker is closing")
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        if self.store.is_open:
            with contextlib.suppress(StoreError):
                async with self.store.write() as q:
                    await q.save_last_seen({a: iso(t) for a, t in self._last_call.items()})
            await self.store.close()
        self.logs.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # ---- identity ------------------------------------------------------------------------------

    def authorize(self, agent_id: str | None) -> str:
        """The caller's agent id, checked against ``broker.agents``; records the call for ``lastSeen``.

        Raises:
            ToolError: ``unauthorized`` without an agent id or with one not configured.
        """
        known = ", ".join(self.agents)
        if not agent_id:
            raise ToolError(
                "unauthorized",
                "The broker tools need to know which agent is calling, and this call carries no agent id. "
                f"On a gateway bound to loopback without client tokens, send the header `X-Agent-Id: <id>` "
                f"with one of: {known}. Otherwise send the client token configured for your agent.",
            )
        if agent_id not in self.agents:
            shown = agent_id if len(agent_id) <= 64 else agent_id[:64] + "…"
            raise ToolError(
                "unauthorized",
                f"Agent id {shown!r} is not one of this broker's agents ({known}). Call with one of "
                "those ids (header `X-Agent-Id` on loopback, or your agent's client token).",
                agents=list(self.agents),
            )
        self._last_call[agent_id] = self.clock()
        return agent_id

    def connected(self, agent: str) -> bool:
        """A wait open, or a call within ``broker.connected_window_seconds`` (broker.md)."""
        if self.queues[agent].waiters:
            return True
        last = self._last_call.get(agent)
        return last is not None and self.clock() - last <= self.config.connected_window_seconds

    # ---- the change unit -----------------------------------------------------------------------

    async def _change(
        self, agent: str | None, body: Callable[[Queries, PipelineRow, _After], Awaitable[T]]
    ) -> T:
        """Run ``body`` in one write transaction, shielded; then apply its in-process consequences."""

        async def unit() -> T:
            after = _After()
            async with self.store.write() as q:
                p = await q.pipeline()
                result = await body(q, p, after)
                if agent is not None and agent in self._last_call:
                    await q.save_last_seen({agent: iso(self._last_call[agent])})
            self._after_commit(after)
            return result

        return await self._shielded(unit())

    async def _shielded(self, coro: Coroutine[Any, Any, T]) -> T:
        task: asyncio.Task[T] = asyncio.ensure_future(coro)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            # The change goes on; nobody will read its outcome.
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            raise

    def _refusal(self, p: PipelineRow | None, err: Refused) -> ToolError:
        tool = tool_of(err.event)
        if err.state is State.STOPPED:
            by = f" by {p.stopped_by}" if p is not None and p.stopped_by else ""
            at = f" at {p.stopped_at}" if p is not None and p.stopped_at else ""
            return ToolError(
                "conflict",
                f"The pipeline is STOPPED (stop_pipeline{by}{at}) for good: {tool} and every other "
                f"state-changing call are refused. Monitoring tools still work ({MONITORING}). To run a "
                f"new pipeline an operator stops the gateway and moves {DB_FILE} and {STOP_FILE} out of "
                "the state folder.",
                state=err.state.value,
                allowed_states=[s.value for s in err.allowed],
            )
        hint = ""
        if err.state is State.HUMAN_NEEDED:
            hint = " The pipeline waits for a person: the PM calls resume once they have decided."
        elif err.state is State.PAUSED:
            hint = " The pipeline is paused (an auto-advance was cancelled): the PM calls resume."
        allowed = ", ".join(s.value for s in err.allowed)
        return ToolError(
            "conflict",
            f"{tool} is not allowed in state {err.state}; it is allowed in: {allowed}. Nothing was changed."
            f"{hint} Call get_pipeline_status to see where the pipeline is.",
            state=err.state.value,
            allowed_states=[s.value for s in err.allowed],
        )

    def _decide(self, p: PipelineRow, event: Event) -> Transition:
        try:
            return decide(p.state, event)
        except Refused as err:
            raise self._refusal(p, err) from None

    async def _apply(self, q: Queries, p: PipelineRow, event: Event, f: _Facts, after: _After) -> Transition:
        """Decide ``event`` and apply its transition's effects and state change in ``q``'s transaction."""
        t = self._decide(p, event)
        now_iso = iso(f.now)
        for effect in t.effects:
            await self._effect(effect, q, p, f, after, now_iso)
        if t.target is not p.state:
            await q.update_pipeline(now_iso, state=t.target)
            await q.record_transition(now_iso, p.state, t.target, event.value, f.agent)
            after.transitions.append((p.state, t.target, event.value, f.agent))
            after.state = t.target
        elif event is Event.STOP:
            after.state = t.target
        return t

    async def _effect(
        self, effect: Effect, q: Queries, p: PipelineRow, f: _Facts, after: _After, now_iso: str
    ) -> None:
        if effect is Effect.INIT_PHASE:
            await q.replace_issues(f.issues)
            await q.update_pipeline(now_iso, phase=f.phase, fix_count=0)
        elif effect is Effect.CLEAR_AUTO_ADVANCE:
            if p.aa_stage is not None:
                await q.update_pipeline(now_iso, aa_stage=None, aa_deadline=None, aa_next_phase=None)
                after.timer = (None, None)
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
            await self._notify(q, after, self._connected_except(f.agent), "human_needed", body, now_iso)
        elif effect is Effect.NOTIFY_RESUMED:
            await q.update_pipeline(
                now_iso, human_origin=None, human_reason=None, human_by=None, human_at=None
            )
            await self._notify(
                q,
                after,
                self._connected_except(f.agent),
                "resumed",
                {"resumedBy": f.agent, "phase": p.phase},
                now_iso,
            )
        elif effect is Effect.SESSION_RESET:
            deadline = f.now + self.config.session_reset_seconds
            await q.update_pipeline(now_iso, aa_stage="session_reset", aa_deadline=deadline)
            after.timer = ("session_reset", deadline)
            await self._notify(
                q,
                after,
                self.agents,
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
            await self._notify(
                q,
                after,
                self.agents,
                "phase_started",
                {"phase": f.phase, "issues": f.issues, "startedBy": "auto_advance"},
                now_iso,
            )
        elif effect is Effect.STOP:
            await q.update_pipeline(now_iso, stopped_by=f.agent or BROKER, stopped_at=now_iso)
            after.stop = True
            after.results["stopped_by"] = f.agent or BROKER
            after.results["stopped_at"] = now_iso

    def _connected_except(self, agent: str | None) -> list[str]:
        return [a for a in self.agents if a != agent and self.connected(a)]

    async def _notify(
        self, q: Queries, after: _After, recipients: Any, subject: str, body: dict[str, Any], now_iso: str
    ) -> None:
        for recipient in recipients:
            message_id = new_message_id()
            await q.insert_message(
                id=message_id,
                sender=BROKER,
                recipient=recipient,
                subject=subject,
                body=body,
                priority=PRIORITIES["high"],
                reply_to=None,
                thread_id=message_id,
                created_at=now_iso,
            )
            after.sent.append(recipient)
            after.wake.add(recipient)

    def _after_commit(self, after: _After) -> None:
        now_iso = iso(self.clock())
        for recipient in after.sent:
            self.queues[recipient].depth += 1
            self.metrics.broker_messages_sent.labels(recipient).inc()
            self.metrics.broker_queue_depth.labels(recipient).set(self.queues[recipient].depth)
        for agent in after.wake:
            self.queues[agent].wake()
        for old, new, event, by in after.transitions:
            self.metrics.broker_transitions.labels(old.value, new.value).inc()
            self.logs.append(PIPELINE_LOG, now_iso, by or BROKER, f"{old} -> {new} ({event})")
        for who, text in after.pipeline_log:
            self.logs.append(PIPELINE_LOG, now_iso, who, text)
        if after.state is not None:
            self._state = after.state
            self._set_state_metrics()
        if after.stop:
            self._write_stop_file(after.results.get("stopped_by"), after.results.get("stopped_at"))
            self.queues.wake_all()
        if after.timer is not None:
            self._reschedule(*after.timer)

    def _set_state_metrics(self) -> None:
        for s in State:
            self.metrics.broker_state.labels(s.value).set(1 if s is self._state else 0)

    def _write_stop_file(self, by: str | None, at: str | None) -> None:
        path = self.state_dir / STOP_FILE
        try:
            path.write_text(f"stopped by {by or 'unknown'} at {at or iso(self.clock())}\n", encoding="utf-8")
        except OSError as err:  # the database already says STOPPED; the file is a convenience
            log.error("could not write %s: %s", path, err)

    # ---- phase management ------------------------------------------------------------------------

    async def start_phase(self, agent: str, phase: int, issues: list[str]) -> dict[str, Any]:
        """``start_phase``: IDLE → PHASE_PREPARING with ``issues`` all ``todo``.

        Returns ``{success, phase, issueCount, state}``. Raises ToolError ``conflict`` outside IDLE.
        """

        async def body(q: Queries, p: PipelineRow, after: _After) -> dict[str, Any]:
            f = _Facts(agent=agent, now=self.clock(), phase=phase, issues=issues)
            t = await self._apply(q, p, Event.START_PHASE, f, after)
            after.pipeline_log.append((agent, f"phase {phase} prepared: {', '.join(issues)}"))
            return {"success": True, "phase": phase, "issueCount": len(issues), "state": t.target.value}

        return await self._change(agent, body)

    async def begin_developing(self, agent: str) -> dict[str, Any]:
        """``begin_developing``: PHASE_PREPARING → PHASE_DEVELOPING; the first issue goes in progress.

        Returns ``{success, state, currentIssue}``.
        """

        async def body(q: Queries, p: PipelineRow, after: _After) -> dict[str, Any]:
            t = await self._apply(q, p, Event.BEGIN_DEVELOPING, _Facts(agent=agent, now=self.clock()), after)
            return {
                "success": True,
                "state": t.target.value,
                "currentIssue": after.results.get("currentIssue"),
            }

        return await self._change(agent, body)

    async def report_completion(self, agent: str, issue: str, result: str) -> dict[str, Any]:
        """``report_completion``: pass moves to the next issue or to review; fail raises the fail count.

        Returns ``{success, allDone, nextIssue?, failCount?, state}``.

        Raises:
            ToolError: ``conflict`` outside PHASE_DEVELOPING or when ``issue`` is not the one in
                progress; ``bad_request`` when ``issue`` is not in the phase.
        """

        async def body(q: Queries, p: PipelineRow, after: _After) -> dict[str, Any]:
            self._decide(p, Event.PASS_NEXT)  # the state check comes before looking at the issue
            issues = await q.issues()
            target = next((i for i in issues if i.id == issue), None)
            if target is None:
                raise ToolError(
                    "bad_request",
                    f"Issue {issue!r} is not in phase {p.phase}; its issues are: "
                    f"{', '.join(i.id for i in issues)}. Nothing was changed.",
                    phase=p.phase,
                    issues=[i.id for i in issues],
                )
            if target.status != "in_progress":
                current = next((i.id for i in issues if i.status == "in_progress"), None)
                raise ToolError(
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
                fail_limit=self.config.fail_limit,
            )
            reason = None
            if event is Event.FAIL_LIMIT:
                reason = (
                    f"issue {issue} failed {target.fail_count + 1} times "
                    f"(fail limit {self.config.fail_limit})"
                )
            f = _Facts(agent=agent, now=self.clock(), issue=issue, reason=reason)
            t = await self._apply(q, p, event, f, after)
            after.pipeline_log.append((agent, f"report_completion {issue} {result}"))
            out: dict[str, Any] = {"success": True, "allDone": event is Event.PASS_LAST}
            if "nextIssue" in after.results:
                out["nextIssue"] = after.results["nextIssue"]
            if "failCount" in after.results:
                out["failCount"] = after.results["failCount"]
            out["state"] = t.target.value
            return out

        return await self._change(agent, body)

    async def report_review(
        self, agent: str, result: str, pr_id: str | None, has_next_phase: bool | None
    ) -> dict[str, Any]:
        """``report_review``: approved → IDLE (auto-advance) or COMPLETED; changes → back to development.

        Returns ``{success, state, fixCount?, autoAdvance?}``.
        """

        async def body(q: Queries, p: PipelineRow, after: _After) -> dict[str, Any]:
            self._decide(p, Event.APPROVED_NEXT)
            plan = await q.plan()
            next_phase = _next_plan_phase(plan, p.phase)
            has_next = has_next_phase if has_next_phase is not None else next_phase is not None
            event = review_event(
                result,
                has_next_phase=has_next,
                auto_advance=p.auto_advance,
                next_plan_phase=next_phase,
                fix_count_after=p.fix_count + 1,
                fix_limit=self.config.fix_limit,
            )
            reason = None
            if event is Event.CHANGES_LIMIT:
                reason = (
                    f"the review asked for changes {p.fix_count + 1} times in phase {p.phase} "
                    f"(fix limit {self.config.fix_limit})" + (f", {pr_id}" if pr_id else "")
                )
            f = _Facts(
                agent=agent,
                now=self.clock(),
                reason=reason,
                next_plan_phase=next_phase,
                cooldown_seconds=self._cooldown_seconds(plan),
            )
            t = await self._apply(q, p, event, f, after)
            after.pipeline_log.append((agent, f"report_review {result}" + (f" {pr_id}" if pr_id else "")))
            out: dict[str, Any] = {"success": True, "state": t.target.value}
            if "fixCount" in after.results:
                out["fixCount"] = after.results["fixCount"]
            if "autoAdvance" in after.results:
                out["autoAdvance"] = after.results["autoAdvance"]
            return out

        return await self._change(agent, body)

    def _cooldown_seconds(self, plan: PlanRow | None) -> float:
        if self.config.cooldown_seconds_override is not None:
            return self.config.cooldown_seconds_override
        return (plan.cooldown_minutes if plan is not None else 5.0) * 60.0

    # ---- phase plan ------------------------------------------------------------------------------

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

        async def body(q: Queries, p: PipelineRow, after: _After) -> dict[str, Any]:
            self._decide(p, Event.SET_PHASE_PLAN)
            now_iso = iso(self.clock())
            old = await q.plan()
            completed = old.completed_phases if old is not None and old.plan_id == plan_id else []
            await q.save_plan(PlanRow(plan_id, phases, cooldown_minutes, completed), now_iso)
            await q.update_pipeline(now_iso, auto_advance=int(auto_advance))
            if not auto_advance and p.aa_stage is not None:
                await q.update_pipeline(now_iso, aa_stage=None, aa_deadline=None, aa_next_phase=None)
                after.timer = (None, None)
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

        return await self._change(agent, body)

    async def get_phase_plan(self) -> dict[str, Any]:
        """``get_phase_plan`` → ``{planId, phases, currentPhase, completedPhases, autoAdvance,
        cooldownMinutes}``.

        Without a plan, ``planId`` and ``cooldownMinutes`` are null and the lists empty.
        """
        async with self.store.read() as q:
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

        async def body(q: Queries, p: PipelineRow, after: _After) -> dict[str, Any]:
            self._decide(p, Event.SET_AUTO_ADVANCE)
            now_iso = iso(self.clock())
            await q.update_pipeline(now_iso, auto_advance=int(enabled))
            out: dict[str, Any] = {"success": True, "autoAdvance": enabled}
            if not enabled and p.aa_stage is not None:
                await q.update_pipeline(now_iso, aa_stage=None, aa_deadline=None, aa_next_phase=None)
                after.timer = (None, None)
                out["cancelledStage"] = p.aa_stage
            after.pipeline_log.append((agent, f"autoAdvance {'on' if enabled else 'off'}"))
            return out

        return await self._change(agent, body)

    async def cancel_auto_advance(self, agent: str, reason: str) -> dict[str, Any]:
        """``cancel_auto_advance``: stop the auto-advance under way → PAUSED; ``{success, stage}``.

        Raises:
            ToolError: ``conflict`` when no auto-advance is under way.
        """

        async def body(q: Queries, p: PipelineRow, after: _After) -> dict[str, Any]:
            if p.aa_stage is None and p.state is not State.STOPPED:
                raise ToolError(
                    "conflict",
                    f"No auto-advance is under way (state {p.state}, autoAdvance "
                    f"{'on' if p.auto_advance else 'off'}): cancel_auto_advance is only allowed during its "
                    "cooldown or session_reset stage. To keep the next phase from starting by itself, "
                    "call set_auto_advance(enabled: false). Nothing was changed.",
                    state=p.state.value,
                )
            await self._apply(q, p, Event.CANCEL_AUTO_ADVANCE, _Facts(agent=agent, now=self.clock()), after)
            after.pipeline_log.append((agent, f"auto-advance cancelled in its {p.aa_stage} stage: {reason}"))
            return {"success": True, "stage": p.aa_stage}

        return await self._change(agent, body)

    # ---- safety and control ----------------------------------------------------------------------

    async def request_human(self, agent: str, reason: str) -> dict[str, Any]:
        """``request_human``: any state but STOPPED → HUMAN_NEEDED; connected agents are told.

        Returns ``{success, previousState}``.
        """

        async def body(q: Queries, p: PipelineRow, after: _After) -> dict[str, Any]:
            await self._apply(
                q, p, Event.REQUEST_HUMAN, _Facts(agent=agent, now=self.clock(), reason=reason), after
            )
            after.pipeline_log.append((agent, f"human needed: {reason}"))
            return {"success": True, "previousState": p.state.value}

        return await self._change(agent, body)

    async def resume(self, agent: str) -> dict[str, Any]:
        """``resume`` (PM only): HUMAN_NEEDED → PHASE_DEVELOPING or IDLE; PAUSED → IDLE. ``{success, state}``.

        Raises:
            ToolError: ``unauthorized`` for any agent but ``pm``; ``conflict`` in other states.
        """
        if agent != PM:
            raise ToolError(
                "unauthorized",
                f"resume is only for the PM (agent {PM!r}), on a person's word; you are {agent!r}. "
                "Ask for a person with request_human, or tell the PM with send_message.",
            )

        async def body(q: Queries, p: PipelineRow, after: _After) -> dict[str, Any]:
            event = resume_event(p.state, p.human_origin)
            t = await self._apply(q, p, event, _Facts(agent=agent, now=self.clock()), after)
            return {"success": True, "state": t.target.value}

        return await self._change(agent, body)

    async def stop_pipeline(self, agent: str) -> dict[str, Any]:
        """``stop_pipeline``: any state → STOPPED for good; writes ``.stop-pipeline``, wakes every wait.

        Returns ``{success, state}``. A second call succeeds and changes nothing.
        """

        async def body(q: Queries, p: PipelineRow, after: _After) -> dict[str, Any]:
            if p.state is State.STOPPED:
                return {"success": True, "state": State.STOPPED.value}
            await self._apply(q, p, Event.STOP, _Facts(agent=agent, now=self.clock()), after)
            return {"success": True, "state": State.STOPPED.value}

        return await self._change(agent, body)

    # ---- auto-advance timer ----------------------------------------------------------------------

    def _reschedule(self, stage: str | None, deadline: float | None) -> None:
        if self._timer is not None and self._timer is not asyncio.current_task():
            self._timer.cancel()
        self._timer = None
        if stage is not None and deadline is not None and self._closing is None:
            self._timer = asyncio.get_running_loop().create_task(self._run_timer(stage, deadline))

    async def _run_timer(self, stage: str, deadline: float) -> None:
        await asyncio.sleep(max(0.0, deadline - self.clock()))
        try:
            await self._advance(stage, deadline)
        except (StoreError, ToolError) as err:
            log.warning("auto-advance step %s not taken: %s", stage, err)

    async def _advance(self, stage: str, deadline: float) -> None:
        """One auto-advance step, if the stored stage is still the one this timer was set for."""

        async def body(q: Queries, p: PipelineRow, after: _After) -> None:
            if p.aa_stage != stage or p.aa_deadline != deadline:
                return  # cancelled or superseded since
            now = self.clock()
            if stage == "cooldown":
                await self._apply(q, p, Event.AUTO_ADVANCE_RESET, _Facts(agent=None, now=now), after)
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
            f = _Facts(agent=None, now=now, phase=entry["phase"], issues=list(entry["issues"]))
            await self._apply(q, p, Event.AUTO_ADVANCE_START, f, after)
            after.pipeline_log.append((BROKER, f"auto-advance started phase {entry['phase']}"))

        await self._change(None, body)

    # ---- messages --------------------------------------------------------------------------------

    def message_json(self, m: MessageRow) -> dict[str, Any]:
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

    def _check_recipient(self, to: str) -> None:
        if to not in self.agents:
            raise ToolError(
                "bad_request",
                f"`to`: {to!r} is not an agent of this broker; send to one of: {', '.join(self.agents)}. "
                "Nothing was sent.",
                agents=list(self.agents),
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
        ignored.

        Raises:
            ToolError: ``bad_request`` for an unknown recipient, ``not_found`` for an unknown
                ``reply_to``, ``conflict`` in STOPPED.
        """
        if reply_to is None:
            self._check_recipient(to)

        async def run(q: Queries, p: PipelineRow, after: _After) -> dict[str, Any]:
            self._decide(p, Event.REPLY_MESSAGE if reply_to is not None else Event.SEND_MESSAGE)
            recipient, thread = to, None
            if reply_to is not None:
                original = await q.message(reply_to)
                if original is None:
                    raise ToolError(
                        "not_found",
                        f"`replyTo`: no message has id {reply_to!r}. Use the messageId of a message you "
                        "received (wait_for_message) or found with get_message_history. Nothing was sent.",
                    )
                if original.sender not in self.agents:
                    raise ToolError(
                        "bad_request",
                        f"`replyTo`: message {reply_to} is a notice from the {original.sender}, "
                        "which takes no replies; use send_message to reach an agent. Nothing was sent.",
                    )
                recipient, thread = original.sender, original.thread_id
            message_id = new_message_id()
            await q.insert_message(
                id=message_id,
                sender=agent,
                recipient=recipient,
                subject=subject,
                body=body,
                priority=PRIORITIES[priority],
                reply_to=reply_to,
                thread_id=thread or message_id,
                created_at=iso(self.clock()),
            )
            after.sent.append(recipient)
            after.wake.add(recipient)
            out: dict[str, Any] = {"messageId": message_id, "queued": True}
            if reply_to is not None:
                out["to"] = recipient
                out["threadId"] = thread
            return out

        return await self._change(agent, run)

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
            ToolError: ``conflict`` when the pipeline is STOPPED.
        """
        loop = asyncio.get_running_loop()
        start = loop.time()
        queue = self.queues[agent]
        if self._closing is not None:
            return WaitOutcome(shutdown=True, reason=self._closing)
        if self._state is State.STOPPED:
            try:
                decide(State.STOPPED, Event.WAIT_FOR_MESSAGE)
            except Refused as err:
                async with self.store.read() as q:
                    p = await q.pipeline()
                raise self._refusal(p, err) from None
        interval = progress_interval or self.config.progress_interval_seconds
        deadline = start + seconds
        next_progress = start + interval
        wake = asyncio.Event()
        queue.waiters.add(wake)
        self.metrics.broker_waits_open.inc()
        try:
            while True:
                if self._closing is not None:
                    return WaitOutcome(
                        shutdown=True, reason=self._closing, waited_seconds=loop.time() - start
                    )
                if self._state is State.STOPPED:
                    return WaitOutcome(
                        stopped=True, reason="stop_pipeline was called", waited_seconds=loop.time() - start
                    )
                wake.clear()  # before looking, so a send from now on is not missed
                row = await self._lease(agent)
                if row is not None:
                    delivered, abandoned = self._lease_callbacks(agent, row.id)
                    return WaitOutcome(
                        message=self.message_json(row),
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
            self.metrics.broker_waits_open.dec()
            self._last_call[agent] = self.clock()

    async def _lease(self, agent: str) -> MessageRow | None:
        """Lease ``agent``'s next message, shielded: a cancelled caller gives back what was leased."""
        task = asyncio.ensure_future(self._lease_now(agent))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:

            def give_back(t: asyncio.Task[MessageRow | None]) -> None:
                if t.cancelled() or t.exception() is not None:
                    return
                row = t.result()
                if row is not None:
                    self.queues[agent].leased.discard(row.id)
                    self.queues[agent].wake()

            task.add_done_callback(give_back)
            raise

    async def _lease_now(self, agent: str) -> MessageRow | None:
        queue = self.queues[agent]
        if queue.depth <= len(queue.leased):
            # Depths are kept in step with every commit of this (single-writer) process, so an
            # empty queue needs no database round trip.
            return None
        async with queue.lock:
            async with self.store.write() as q:
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
        queue = self.queues[agent]
        ended = False

        async def delivered() -> None:
            nonlocal ended
            if ended:
                return
            ended = True

            async def mark() -> bool:
                async with self.store.write() as q:
                    return await q.mark_delivered(message_id, iso(self.clock()))

            try:
                removed = await self._shielded(mark())
            except StoreError as err:
                # The answer went out but the queue could not be updated: redelivered after restart.
                log.warning("message %s delivered but not removed from its queue: %s", message_id, err)
                removed = False
            finally:
                queue.leased.discard(message_id)
            if removed:
                queue.depth -= 1
                self.metrics.broker_messages_delivered.labels(agent).inc()
                self.metrics.broker_queue_depth.labels(agent).set(queue.depth)

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
        async with self.store.read() as q:
            rows = await q.history(issue, limit)
        return {"messages": [self.message_json(m) for m in rows]}

    # ---- monitoring ------------------------------------------------------------------------------

    async def status(self) -> dict[str, Any]:
        """``get_pipeline_status``: the whole snapshot (broker.md "Monitoring", the seed's example)."""
        async with self.store.read() as q:
            p = await q.pipeline()
            issues = await q.issues()
            plan = await q.plan()
        now = self.clock()
        aa: dict[str, Any] = {"active": p.aa_stage is not None}
        if p.aa_stage is not None and p.aa_deadline is not None:
            aa.update(
                stage=p.aa_stage,
                deadline=iso(p.aa_deadline),
                secondsLeft=max(0.0, round(p.aa_deadline - now, 1)),
                nextPhase=p.aa_next_phase,
            )
        uptime = time.monotonic() - self._started
        out: dict[str, Any] = {
            "state": p.state.value,
            "phase": p.phase,
            "issues": {i.id: {"status": i.status, "failCount": i.fail_count} for i in issues},
            "agents": {
                a: {
                    "connected": self.connected(a),
                    "lastSeen": iso(self._last_call[a]) if a in self._last_call else None,
                }
                for a in self.agents
            },
            "queues": {a: q.depth for a, q in self.queues.items()},
            "phasePlan": {"planId": plan.plan_id if plan else None, "autoAdvance": p.auto_advance},
            "autoAdvance": aa,
            "fixCount": p.fix_count,
            "uptime": human_duration(uptime),
            "uptimeSeconds": round(uptime, 1),
            "limits": {"failLimit": self.config.fail_limit, "fixLimit": self.config.fix_limit},
        }
        if p.state is State.HUMAN_NEEDED:
            out["humanNeeded"] = {
                "reason": p.human_reason,
                "requestedBy": p.human_by,
                "at": p.human_at,
                "origin": p.human_origin.value if p.human_origin else None,
            }
        if p.state is State.STOPPED:
            out["stopped"] = {"by": p.stopped_by, "at": p.stopped_at}
        return out

    def log_activity(self, agent: str, message: str) -> dict[str, Any]:
        """``log_activity``: one line in ``logs/{agent}.log``; ``{success}``."""
        self.logs.append(agent, iso(self.clock()), agent, message)
        return {"success": True}

    async def activity_log(self, name: str, tail_lines: int) -> dict[str, Any]:
        """``get_activity_log`` → ``{agent, lines}``.

        Raises:
            ToolError: ``bad_request`` when ``name`` is not an agent id or ``pipeline``.
        """
        try:
            lines = await self.logs.tail(name, tail_lines)
        except UnknownLog:
            shown = name if len(name) <= 64 else name[:64] + "…"
            raise ToolError(
                "bad_request",
                f"`agent`: {shown!r} is not a log of this broker; use one of: {', '.join(self.logs.names)}.",
                logs=list(self.logs.names),
            ) from None
        return {"agent": name, "lines": lines}


def _next_plan_phase(plan: PlanRow | None, current: int | None) -> int | None:
    """The plan's phase after ``current`` (plan order), or None when there is none."""
    if plan is None or current is None:
        return None
    numbers = [int(ph["phase"]) for ph in plan.phases]
    if current not in numbers:
        return None
    i = numbers.index(current)
    return numbers[i + 1] if i + 1 < len(numbers) else None


def new_message_id() -> str:
    """``msg-`` and 32 hex digits; unique, stable across redeliveries."""
    return f"msg-{uuid.uuid4().hex}"


def _lock_state_dir(state_dir: Path) -> int:
    """Hold an exclusive lock on ``<state_dir>/broker.lock`` for the process's life.

    Two gateways on one state folder would each hand out the same messages (leases and wake-ups
    are in-process). The kernel drops the lock when the process dies, ``kill -9`` included.

    Raises:
        StoreError: another process holds the lock.
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreError(
            f"another gateway is using the broker state folder {state_dir} (it holds {LOCK_FILE}); "
            "give each gateway its own GATEWAY_STATE_DIR"
        ) from None
    return fd


@asynccontextmanager
async def open_broker(settings: Settings, metrics: Metrics) -> AsyncIterator[BrokerService]:
    """Open the broker for the app's lifetime (``gateway.app`` cleanup context); closes the database on exit.

    Raises:
        StoreError: the state folder is in use by another gateway or the database is unusable.
    """
    service = await BrokerService.open(settings, metrics)
    try:
        yield service
    finally:
        await service.close()
