"""The phase broker service: the phase operations, and opening, shutting down and closing the broker.

Contract: ``docs/broker.md``.
The tools (``gateway.tools.broker``) check arguments, then call one method here or on one of the
parts :class:`BrokerService` is made of, each in its own module of ``gateway.broker``:

- ``roster``: who may call (``authorize``) and who is connected;
- ``changes``: the change unit (one shielded transaction per change, then its in-process
  consequences), with ``effects`` carrying out the state machine's (``machine``) transitions;
- ``messages``: send, reply, wait (leases and delivery callbacks), history;
- ``auto_advance``: the cooldown / ``session_reset`` timer and its resumption after a restart;
- ``monitoring``: the status snapshot and the activity logs;
- ``store`` (``queries``, ``schema``, ``migrations``, ``migrate``, ``database``): the database, SQLite or
  PostgreSQL; ``wakeups``: this process's open waits and, on PostgreSQL, the LISTEN connection
  that wakes them when another replica commits; ``activity_log``, ``state_dir``: log files and
  the state folder's other files.

Replicas: with PostgreSQL any number of gateway processes share one broker. Nothing a replica
keeps in memory is needed by another: queues, leases, state, timers and activity logs are rows;
wake-ups are ``pg_notify`` signals; each replica saves the ``lastSeen`` of the calls it served.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import SQLAlchemyError

from gateway.broker.activity_log import PIPELINE_LOG, ActivityLogs, parse_line
from gateway.broker.auto_advance import AutoAdvance, cooldown_seconds, next_plan_phase
from gateway.broker.changes import Changes
from gateway.broker.effects import After, Effects, Facts
from gateway.broker.errors import BrokerError
from gateway.broker.formats import BROKER, iso
from gateway.broker.machine import Event, State, completion_event, resume_event, review_event
from gateway.broker.messages import Messages
from gateway.broker.monitoring import Monitoring
from gateway.broker.prepared import CHANNEL
from gateway.broker.roster import Roster
from gateway.broker.state_dir import STOP_FILE, lock_state_dir
from gateway.broker.store import PipelineRow, PlanRow, Queries, Store, StoreError
from gateway.broker.wakeups import Listener, Wakeups

if TYPE_CHECKING:
    from gateway.config import Settings
    from gateway.observability.metrics import Metrics

log = logging.getLogger(__name__)

#: The agent allowed to ``resume`` (broker.md: the PM resumes, on a person's word).
PM = "pm"
#: Retention: rows per delete, and deletes per timer look.
PURGE_BATCH = 500
PURGE_MAX_BATCHES = 10
#: Up to this many 10 ms steps for woken waits to return at shutdown.
SHUTDOWN_GRACE_STEPS = 100


class BrokerService:
    """The broker of one gateway process. Build it with :func:`open_broker`.

    Args:
        settings: the gateway's settings (``broker`` section and ``state_dir``).
        metrics: the app's metrics.
        store: the opened database.
        logs: the activity logs.
        clock: Unix time source (tests may pass their own).

    Attributes:
        roster: the agents; ``roster.authorize`` checks a caller.
        changes: the change unit.
        messages: ``send_message``, ``wait_for_message``, ``message_history``.
        auto_advance: the auto-advance timer.
        monitoring: ``status``, ``log_activity``, ``activity_log``.
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
        self.state_dir = Path(settings.state_dir)
        self.wakeups = Wakeups(self.config.agents)
        self.roster = Roster(
            self.config.agents,
            self.wakeups,
            connected_window_seconds=self.config.connected_window_seconds,
            clock=clock,
        )
        effects = Effects(self.roster, session_reset_seconds=self.config.session_reset_seconds)
        self.changes = Changes(
            store, self.wakeups, logs, metrics, self.roster, effects, self.state_dir, clock
        )
        self.auto_advance = AutoAdvance(
            self.changes,
            clock,
            self._closing_reason,
            poll_seconds=self.config.timer_poll_seconds,
            on_tick=self._housekeeping,
        )
        self.changes.reschedule = self.auto_advance.reschedule
        self.messages = Messages(
            self.changes,
            self.roster,
            self.wakeups,
            store,
            metrics,
            clock,
            progress_interval_seconds=self.config.progress_interval_seconds,
            lease_seconds=self.config.lease_seconds,
            ack_timeout_seconds=self.config.ack_timeout_seconds,
            read_check_seconds=self.config.read_check_seconds,
            max_message_bytes=self.config.max_message_bytes,
            history_page_bytes=self.config.history_page_bytes,
            history_item_bytes=self.config.history_item_bytes,
            recheck_seconds=self.config.recheck_seconds,
            closing=self._closing_reason,
        )
        self.monitoring = Monitoring(store, self.roster, logs, self.config, clock)
        self._closing: str | None = None
        self._lock_fd: int | None = None
        self._listener: Listener | None = None
        self._ticks = 0
        self._next_purge = 0.0

    # ---- lifecycle -----------------------------------------------------------------------------

    @classmethod
    async def open(cls, settings: Settings, metrics: Metrics) -> BrokerService:
        """Open the database (SQLite: lock the state folder first), resume where the last run stopped.

        Raises:
            DatabaseUnusable: ``broker.database_url`` cannot be used (the gateway exits with 2).
            StoreError: another gateway holds the SQLite state folder, or the file is unusable.
        """
        state_dir = Path(settings.state_dir)
        sqlite = settings.broker.database_url is None
        # One process per SQLite file: its waits are woken in-process only.
        lock_fd = lock_state_dir(state_dir) if sqlite else None
        try:
            store = await Store.open(settings.broker, state_dir)
        except BaseException:
            if lock_fd is not None:
                os.close(lock_fd)
            raise
        logs = ActivityLogs(
            state_dir / "logs",
            settings.broker.agents,
            max_bytes=settings.broker.log_max_bytes,
            backups=settings.broker.log_backups,
            files=sqlite,
        )
        log.info(
            "broker database: %s%s",
            store.where,
            " (shared by every replica on it)" if store.postgres else " (this gateway process only)",
        )
        service = cls(settings, metrics, store, logs)
        service._lock_fd = lock_fd
        try:
            if store.postgres:
                await service._listen()
            await service._resume_after_start()
        except BaseException:
            await service.close()
            raise
        return service

    async def _listen(self) -> None:
        assert self.settings.broker.database_url is not None
        from sqlalchemy.engine import make_url

        url = make_url(self.settings.broker.database_url.get_secret_value()).set(drivername="postgresql")
        self._listener = Listener(
            url.render_as_string(hide_password=False),
            CHANNEL,
            lambda payload: self.wakeups.dispatch(payload, self._stopped_elsewhere, self.auto_advance.kick),
            self._listener_back,
            self.store.where,
        )
        await self._listener.start()

    def _listener_back(self) -> None:
        # Signals sent while the connection was down are lost: every wait and the timer look again.
        self.wakeups.wake_all()
        self.auto_advance.kick()
        self.changes.spawn(self._sync_stop_file())

    def _stopped_elsewhere(self) -> None:
        self.changes.state = State.STOPPED  # for good: no later change can undo it
        self.changes.set_state_metrics()
        self.changes.spawn(self._sync_stop_file())

    async def _sync_stop_file(self) -> None:
        """Another replica stopped the pipeline: write this state folder's ``.stop-pipeline`` too."""
        try:
            async with self.store.read() as q:
                p = await q.pipeline()
        except (StoreError, SQLAlchemyError):
            return
        if p.state is State.STOPPED:
            self.changes.state = State.STOPPED
            self.changes.set_state_metrics()
            if not (self.state_dir / STOP_FILE).exists():
                self.changes.write_stop_file(p.stopped_by, p.stopped_at)

    async def _resume_after_start(self) -> None:
        stop_file = self.state_dir / STOP_FILE
        after = After()
        async with self.store.write() as q:
            p = await q.pipeline("update")
            if not self.store.postgres:
                # One gateway owns a SQLite file (the state folder's lock): a lease found at start
                # was held by a process that is gone, and its message can go out now, not when the
                # lease runs out (an agent that acknowledges sends its ack before its next claim).
                await q.release_every_lease()
            if stop_file.exists() and p.state is not State.STOPPED:
                # A .stop-pipeline present at start means STOPPED.
                facts = Facts(agent=None, now=self.clock(), reason=f"{STOP_FILE} was present at start")
                await self.changes.apply(q, p, Event.STOP, facts, after)
                after.stop = False  # the file is already there and nobody waits yet
            if self.logs.files and await q.log_is_empty():
                await q.append_log(self._log_files_lines())
            line = f"broker started in {after.state or p.state}" + (
                f", auto-advance {p.aa_stage} resumed" if p.aa_stage else ""
            )
            after.pipeline_log.append((BROKER, line))
            await self.changes._finish(q, None, after)
            last_seen = await q.last_seen()
            p = await q.pipeline()
        self.changes.state = p.state
        if p.state is State.STOPPED and not stop_file.exists():
            # The database says STOPPED for good; keep the file in step for operators and scripts.
            self.changes.write_stop_file(p.stopped_by, p.stopped_at)
        self.roster.restore(last_seen)
        self.changes.after_commit(after)
        self.changes.set_state_metrics()
        self.metrics.broker_waits_open.set(0)
        await self._refresh_depths()
        self.auto_advance.reschedule(p.aa_stage, p.aa_deadline)
        self.auto_advance.start()

    def _log_files_lines(self) -> list[tuple[str, str, str, str]]:
        """The lines of the activity-log files (a database from before logs were kept in it)."""
        out: list[tuple[str, str, str, str]] = []
        for name in self.logs.names:
            path = self.logs.path(name)
            files = [path.with_name(f"{path.name}.{i}") for i in range(self.config.log_backups, 0, -1)]
            for file in [*files, path]:  # oldest first
                try:
                    text = file.read_text(encoding="utf-8", errors="replace")
                except FileNotFoundError:
                    continue
                for line in text.splitlines():
                    parsed = parse_line(line)
                    if parsed is not None:
                        out.append((name, *parsed))
        return out

    async def _housekeeping(self) -> None:
        """Each timer look: save lastSeen; now and then refresh queue gauges and prune logs."""
        if not self.store.is_open:
            return
        unsaved = self.roster.unsaved()
        if unsaved:
            async with self.store.write() as q:
                await q.save_last_seen(unsaved)
        self._ticks += 1
        if self._ticks % 5 == 0:
            await self._refresh_depths()
        if self.clock() >= self._next_purge:
            await self.purge_delivered()
        if self._ticks % 600 == 1:
            async with self.store.write() as q:
                for name in self.logs.names:
                    await q.prune_log(name, self.config.log_keep_lines)

    async def purge_delivered(self) -> int:
        """The retention rule for delivered messages (``broker.retain_delivered_seconds`` and
        ``broker.retain_delivered_count``), in short transactions of :data:`PURGE_BATCH` rows so
        that sends and waits are never held up for long; how many were deleted."""
        before = iso(self.clock() - self.config.retain_delivered_seconds)
        total = 0
        for _ in range(PURGE_MAX_BATCHES):
            async with self.store.write() as q:
                n = await q.purge_delivered(before, self.config.retain_delivered_count, PURGE_BATCH)
            total += n
            self.metrics.broker_messages_purged.inc(n)
            if n < PURGE_BATCH:
                # All caught up: look again later. Otherwise the next tick goes on.
                self._next_purge = self.clock() + self.config.purge_interval_seconds
                break
        return total

    async def _refresh_depths(self) -> None:
        """The state and queue-depth gauges, as the database has them (any replica's changes)."""
        async with self.store.read() as q:
            depths = await q.queue_depths()
            state = await q.state()
        if state is not self.changes.state:
            self.changes.state = state
            self.changes.set_state_metrics()
        for agent in self.config.agents:
            self.metrics.broker_queue_depth.labels(agent).set(depths.get(agent, 0))

    def _closing_reason(self) -> str | None:
        return self._closing

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
            self.wakeups.wake_all()
            self.logs.write_files([(PIPELINE_LOG, iso(self.clock()), BROKER, f"shutting down: {reason}")])
        # Let the woken waits return their answer before the transport's own shutdown hook
        # cancels long-running calls (which would answer them with a bare JSON-RPC error).
        for _ in range(SHUTDOWN_GRACE_STEPS):
            if self.wakeups.waits_open() == 0:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0)

    async def close(self) -> None:
        """Stop the timer, let pending changes finish, save ``lastSeen`` and close the database.

        The database, the activity logs and the state folder's lock are closed whatever fails
        before: a connection left open keeps aiosqlite's thread, and so the process, alive.
        """
        async with AsyncExitStack() as closing:
            closing.callback(self._release_lock)
            closing.callback(self.logs.close)
            closing.push_async_callback(self.store.close)
            closing.push_async_callback(self.changes.drain)
            closing.push_async_callback(self.auto_advance.abort)  # before the store closes
            if self._listener is not None:
                closing.push_async_callback(self._listener.close)
            await self.shutdown("the broker is closing")
            await self.auto_advance.close()
            await self.changes.drain()
            if self.store.is_open:
                try:
                    await self.messages.release_all()
                    async with self.store.write() as q:
                        await q.save_last_seen(self.roster.last_seen_all())
                except (StoreError, SQLAlchemyError) as err:
                    log.warning("lastSeen not saved at close: %s", err)

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # ---- phase management ------------------------------------------------------------------------

    async def start_phase(self, agent: str, phase: int, issues: list[str]) -> dict[str, Any]:
        """``start_phase``: IDLE → PHASE_PREPARING with ``issues`` all ``todo``.

        Returns ``{success, phase, issueCount, state}``. Raises BrokerError ``conflict`` outside IDLE.
        """

        async def body(q: Queries, p: PipelineRow, after: After) -> dict[str, Any]:
            f = Facts(agent=agent, now=self.clock(), phase=phase, issues=issues)
            t = await self.changes.apply(q, p, Event.START_PHASE, f, after)
            after.pipeline_log.append((agent, f"phase {phase} prepared: {', '.join(issues)}"))
            return {"success": True, "phase": phase, "issueCount": len(issues), "state": t.target.value}

        return await self.changes.run(agent, body)

    async def begin_developing(self, agent: str) -> dict[str, Any]:
        """``begin_developing``: PHASE_PREPARING → PHASE_DEVELOPING; the first issue goes in progress.

        Returns ``{success, state, currentIssue}``.
        """

        async def body(q: Queries, p: PipelineRow, after: After) -> dict[str, Any]:
            t = await self.changes.apply(
                q, p, Event.BEGIN_DEVELOPING, Facts(agent=agent, now=self.clock()), after
            )
            return {
                "success": True,
                "state": t.target.value,
                "currentIssue": after.results.get("currentIssue"),
            }

        return await self.changes.run(agent, body)

    async def report_completion(self, agent: str, issue: str, result: str) -> dict[str, Any]:
        """``report_completion``: pass moves to the next issue or to review; fail raises the fail count.

        Returns ``{success, allDone, nextIssue?, failCount?, state}``.

        Raises:
            BrokerError: ``conflict`` outside PHASE_DEVELOPING or when ``issue`` is not the one in
                progress; ``bad_request`` when ``issue`` is not in the phase.
        """

        async def body(q: Queries, p: PipelineRow, after: After) -> dict[str, Any]:
            self.changes.decide(p, Event.PASS_NEXT)  # the state check comes before looking at the issue
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
                fail_limit=self.config.fail_limit,
            )
            reason = None
            if event is Event.FAIL_LIMIT:
                reason = (
                    f"issue {issue} failed {target.fail_count + 1} times "
                    f"(fail limit {self.config.fail_limit})"
                )
            f = Facts(agent=agent, now=self.clock(), issue=issue, reason=reason)
            t = await self.changes.apply(q, p, event, f, after)
            after.pipeline_log.append((agent, f"report_completion {issue} {result}"))
            out: dict[str, Any] = {"success": True, "allDone": event is Event.PASS_LAST}
            if "nextIssue" in after.results:
                out["nextIssue"] = after.results["nextIssue"]
            if "failCount" in after.results:
                out["failCount"] = after.results["failCount"]
            out["state"] = t.target.value
            return out

        return await self.changes.run(agent, body)

    async def report_review(
        self, agent: str, result: str, pr_id: str | None, has_next_phase: bool | None
    ) -> dict[str, Any]:
        """``report_review``: approved → IDLE (auto-advance) or COMPLETED; changes → back to development.

        Returns ``{success, state, fixCount?, autoAdvance?}``.
        """

        async def body(q: Queries, p: PipelineRow, after: After) -> dict[str, Any]:
            self.changes.decide(p, Event.APPROVED_NEXT)
            plan = await q.plan()
            next_phase = next_plan_phase(plan, p.phase)
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
            f = Facts(
                agent=agent,
                now=self.clock(),
                reason=reason,
                next_plan_phase=next_phase,
                cooldown_seconds=cooldown_seconds(self.config, plan),
            )
            t = await self.changes.apply(q, p, event, f, after)
            after.pipeline_log.append((agent, f"report_review {result}" + (f" {pr_id}" if pr_id else "")))
            out: dict[str, Any] = {"success": True, "state": t.target.value}
            if "fixCount" in after.results:
                out["fixCount"] = after.results["fixCount"]
            if "autoAdvance" in after.results:
                out["autoAdvance"] = after.results["autoAdvance"]
            return out

        return await self.changes.run(agent, body)

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

        async def body(q: Queries, p: PipelineRow, after: After) -> dict[str, Any]:
            self.changes.decide(p, Event.SET_PHASE_PLAN)
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

        return await self.changes.run(agent, body)

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

        async def body(q: Queries, p: PipelineRow, after: After) -> dict[str, Any]:
            self.changes.decide(p, Event.SET_AUTO_ADVANCE)
            now_iso = iso(self.clock())
            await q.update_pipeline(now_iso, auto_advance=int(enabled))
            out: dict[str, Any] = {"success": True, "autoAdvance": enabled}
            if not enabled and p.aa_stage is not None:
                await q.update_pipeline(now_iso, aa_stage=None, aa_deadline=None, aa_next_phase=None)
                after.timer = (None, None)
                out["cancelledStage"] = p.aa_stage
            after.pipeline_log.append((agent, f"autoAdvance {'on' if enabled else 'off'}"))
            return out

        return await self.changes.run(agent, body)

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
            await self.changes.apply(
                q, p, Event.CANCEL_AUTO_ADVANCE, Facts(agent=agent, now=self.clock()), after
            )
            after.pipeline_log.append((agent, f"auto-advance cancelled in its {p.aa_stage} stage: {reason}"))
            return {"success": True, "stage": p.aa_stage}

        return await self.changes.run(agent, body)

    # ---- safety and control ----------------------------------------------------------------------

    async def request_human(self, agent: str, reason: str) -> dict[str, Any]:
        """``request_human``: any state but STOPPED → HUMAN_NEEDED; connected agents are told.

        Returns ``{success, previousState}``.
        """

        async def body(q: Queries, p: PipelineRow, after: After) -> dict[str, Any]:
            await self.changes.apply(
                q, p, Event.REQUEST_HUMAN, Facts(agent=agent, now=self.clock(), reason=reason), after
            )
            after.pipeline_log.append((agent, f"human needed: {reason}"))
            return {"success": True, "previousState": p.state.value}

        return await self.changes.run(agent, body)

    async def resume(self, agent: str) -> dict[str, Any]:
        """``resume`` (PM only): HUMAN_NEEDED → PHASE_DEVELOPING or IDLE; PAUSED → IDLE. ``{success, state}``.

        Raises:
            BrokerError: ``unauthorized`` for any agent but ``pm``; ``conflict`` in other states.
        """
        if agent != PM:
            raise BrokerError(
                "unauthorized",
                f"resume is only for the PM (agent {PM!r}), on a person's word; you are {agent!r}. "
                "Ask for a person with request_human, or tell the PM with send_message.",
            )

        async def body(q: Queries, p: PipelineRow, after: After) -> dict[str, Any]:
            event = resume_event(p.state, p.human_origin)
            t = await self.changes.apply(q, p, event, Facts(agent=agent, now=self.clock()), after)
            return {"success": True, "state": t.target.value}

        return await self.changes.run(agent, body)

    async def stop_pipeline(self, agent: str) -> dict[str, Any]:
        """``stop_pipeline``: any state → STOPPED for good; writes ``.stop-pipeline``, wakes every wait.

        Returns ``{success, state}``. A second call succeeds and changes nothing.
        """

        async def body(q: Queries, p: PipelineRow, after: After) -> dict[str, Any]:
            if p.state is State.STOPPED:
                return {"success": True, "state": State.STOPPED.value}
            await self.changes.apply(q, p, Event.STOP, Facts(agent=agent, now=self.clock()), after)
            return {"success": True, "state": State.STOPPED.value}

        return await self.changes.run(agent, body)


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
