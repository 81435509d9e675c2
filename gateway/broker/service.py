"""The phase broker service: builds the broker from its parts, opens, shuts down and closes it.

Contract: ``docs/broker.md``.
The tools (``gateway.tools.broker``) check arguments, then call one method on one of the parts
:class:`BrokerService` is made of, each in its own module of ``gateway.broker``:

- ``roster``: who may call (``authorize``) and who is connected;
- ``phases``: a phase's work flow (start, develop, report completion, review);
- ``plan``: the phase plan and the auto-advance switch (set, read, cancel);
- ``control``: request a person, resume, stop;
- ``messages`` (``sending``, ``delivery``, ``history``): send and reply, wait (leases and delivery
  callbacks), the message history;
- ``monitoring``: the status snapshot and the activity logs;
- ``changes``: the change unit every state change goes through (one shielded transaction per
  change, then its in-process consequences), with ``effects`` carrying out the state machine's
  (``machine``) transitions;
- ``auto_advance``: the cooldown / ``session_reset`` timer and its resumption after a restart;
  ``housekeeping``: the chores done at each of its looks;
- ``store`` (``queries``, ``schema``, ``migrations``, ``migrate``, ``database``): the database, SQLite or
  PostgreSQL; ``wakeups``: this process's open waits and, on PostgreSQL, the LISTEN connection
  that wakes them when another replica commits; ``activity_log``, ``state_dir``: log files and
  the state folder's other files; ``ended_sessions``: the MCP sessions ended by DELETE, which
  every replica must refuse.

Replicas: with PostgreSQL any number of gateway processes share one broker. Nothing a replica
keeps in memory is needed by another: queues, leases, state, timers and activity logs are rows;
wake-ups are ``pg_notify`` signals; each replica saves the ``lastSeen`` of the calls it served,
and beats (``replicas``) so that the others can tell when it is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy.exc import SQLAlchemyError

from gateway.broker.activity_log import PIPELINE_LOG, ActivityLogs
from gateway.broker.auto_advance import AutoAdvance
from gateway.broker.changes import Changes
from gateway.broker.confirmations import ConfirmationStore
from gateway.broker.console_sign_outs import ConsoleSignOuts
from gateway.broker.control import Control
from gateway.broker.database import postgres_connect_args
from gateway.broker.effects import After, Effects, Facts
from gateway.broker.ended_sessions import EndedSessions
from gateway.broker.formats import BROKER, iso
from gateway.broker.housekeeping import Housekeeping
from gateway.broker.machine import Event, State
from gateway.broker.messages.delivery import Delivery
from gateway.broker.messages.history import History
from gateway.broker.messages.sending import Sending
from gateway.broker.monitoring import Monitoring
from gateway.broker.operator import Operator
from gateway.broker.phases import Phases
from gateway.broker.plan import Plan
from gateway.broker.prepared import CHANNEL
from gateway.broker.replicas import Heartbeat
from gateway.broker.roster import Roster
from gateway.broker.state_dir import STOP_FILE, lock_state_dir
from gateway.broker.store import Store, StoreError
from gateway.broker.tasks import TaskStore
from gateway.broker.wakeups import RESET, Listener, Wakeups

if TYPE_CHECKING:
    from gateway.config import Settings
    from gateway.observability.metrics import Metrics

log = logging.getLogger(__name__)

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
        serving: a gateway process (a replica: it beats, :attr:`heartbeat`); False for the
            ``broker`` command line, which reads and acts but is no replica.

    Attributes:
        roster: the agents; ``roster.authorize`` checks a caller.
        phases: ``start_phase``, ``begin_developing``, ``report_completion``, ``report_review``.
        plan: ``set_phase_plan``, ``get_phase_plan``, ``set_auto_advance``, ``cancel_auto_advance``.
        control: ``request_human``, ``resume``, ``stop_pipeline``.
        sending: ``send_message`` (and ``reply_message``).
        delivery: ``wait_for_message``.
        history: ``message_history``.
        monitoring: ``status``, ``log_activity``, ``activity_log``.
        ended_sessions: the MCP sessions ended by DELETE (the MCP layer's, kept here because it is
            the database every replica shares).
        console_sign_outs: the console sessions signed out (the console's, kept here for the same
            reason).
        tasks: the MCP tasks (``gateway.broker.tasks``).
        confirmations: answered confirmations and operator approvals of destructive actions
            (``gateway.broker.confirmations``).
        changes: the change unit.
        auto_advance: the auto-advance timer.
        housekeeping: the chores of each timer look.
        operator: what people do (the console, ``broker`` subcommands): instruct, stop, start over.
        feed: moves whenever the broker's visible state may have changed (the live console).
        heartbeat: this replica's heartbeat (``gateway.broker.replicas``), None when not serving.
    """

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        store: Store,
        logs: ActivityLogs,
        *,
        clock: Callable[[], float] = time.time,
        serving: bool = False,
    ) -> None:
        self.settings = settings
        self.config = settings.broker
        self.metrics = metrics
        self.store = store
        self.logs = logs
        self.clock = clock
        self.state_dir = Path(settings.state_dir)
        self.wakeups = Wakeups(self.config.agents)
        self.heartbeat = Heartbeat(store, clock, every=self.config.heartbeat_seconds) if serving else None
        self.roster = Roster(
            self.config.agents,
            self.wakeups,
            connected_window_seconds=self.config.connected_window_seconds,
            clock=clock,
            replica=self.heartbeat.id if self.heartbeat is not None else None,
        )
        effects = Effects(
            self.roster,
            session_reset_seconds=self.config.session_reset_seconds,
            fail_limit=self.config.fail_limit,
            fix_limit=self.config.fix_limit,
        )
        self.changes = Changes(
            store, self.wakeups, logs, metrics, self.roster, effects, self.state_dir, clock
        )
        self.ended_sessions = EndedSessions(
            store,
            metrics,
            clock,
            max_total=settings.server.max_ended_sessions,
            max_per_caller=settings.server.max_ended_sessions_per_caller,
        )
        self.console_sign_outs = ConsoleSignOuts(store, clock)
        self.tasks = TaskStore(store, clock)
        self.confirmations = ConfirmationStore(store, clock)
        self.housekeeping = Housekeeping(
            store,
            self.changes,
            self.roster,
            logs,
            metrics,
            self.config,
            clock,
            self.ended_sessions,
            self.console_sign_outs,
            # Counted only where an operator answers them (the metric and its alert).
            self.confirmations if settings.confirm_by == "operator" else None,
            self.heartbeat,
        )
        self.auto_advance = AutoAdvance(
            self.changes,
            clock,
            self._closing_reason,
            poll_seconds=self.config.timer_poll_seconds,
            on_tick=self.housekeeping.tick,
        )
        self.changes.reschedule = self.auto_advance.reschedule
        self.phases = Phases(self.changes, self.config, clock)
        self.plan = Plan(self.changes, clock)
        self.control = Control(self.changes, clock)
        self.sending = Sending(
            self.changes, self.roster, store, clock, max_message_bytes=self.config.max_message_bytes
        )
        self.delivery = Delivery(
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
            recheck_seconds=self.config.recheck_seconds,
            closing=self._closing_reason,
        )
        self.history = History(
            store,
            page_bytes=self.config.history_page_bytes,
            item_bytes=self.config.history_item_bytes,
        )
        self.monitoring = Monitoring(
            store, self.roster, logs, self.config, clock, on_change=self.changes.feed.changed
        )
        self.operator = Operator(self.changes, self.plan, self.control, clock, self.confirmations)
        self.feed = self.changes.feed
        self._closing: str | None = None
        self._lock_fd: int | None = None
        self._listener: Listener | None = None

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
        service = cls(settings, metrics, store, logs, serving=True)
        service._lock_fd = lock_fd
        try:
            if store.postgres:
                await service._listen()
            await service.ended_sessions.load()
            await service._resume_after_start()
        except BaseException:
            await service.close()
            raise
        return service

    async def _listen(self) -> None:
        assert self.settings.broker.database_url is not None
        from sqlalchemy.engine import make_url

        url = make_url(self.settings.broker.database_url.get_secret_value()).set(drivername="postgresql")
        url = url.update_query_dict(postgres_connect_args(url, "gateway"))
        self._listener = Listener(
            url.render_as_string(hide_password=False),
            CHANNEL,
            self._on_signal,
            self._listener_back,
            self.store.where,
            sent_here=self.store.sent_here,
            on_lost=self._listener_lost,
        )
        await self._listener.start()

    def _on_signal(self, payload: str) -> None:
        """A change committed by another replica (or a ``broker`` command)."""
        if self.ended_sessions.heard(payload):
            return  # not the broker's state: no wait to wake, nothing for the console
        if payload == RESET:
            self.changes.spawn(self._sync_stop_file())
        else:
            self.wakeups.dispatch(payload, self._stopped_elsewhere, self.auto_advance.kick)
        self.feed.changed()

    def _listener_lost(self) -> None:
        self.wakeups.heard(False)
        self.ended_sessions.listening(False)

    def _listener_back(self) -> None:
        # Signals sent while the connection was down are lost: every wait and the timer look again.
        self.wakeups.heard(True)
        self.ended_sessions.listening(True)
        self.changes.spawn(self._reload_ended_sessions())
        self.auto_advance.kick()
        self.changes.spawn(self._sync_stop_file())
        self.feed.changed()

    def _stopped_elsewhere(self) -> None:
        self.changes.state = State.STOPPED  # until an operator starts over (*reset)
        self.changes.set_state_metrics()
        self.changes.spawn(self._sync_stop_file())

    async def _reload_ended_sessions(self) -> None:
        with contextlib.suppress(StoreError, SQLAlchemyError):  # the next timer look tries again
            await self.ended_sessions.load()

    async def _sync_stop_file(self) -> None:
        """Another replica stopped the pipeline, or an operator started over: keep this process's
        state and its state folder's ``.stop-pipeline`` in step with the database."""
        try:
            async with self.store.read() as q:
                p = await q.pipeline()
        except (StoreError, SQLAlchemyError):
            return
        if p.state is not State.STOPPED and self.changes.state is State.STOPPED:
            self.changes.state = p.state
            self.changes.set_state_metrics()
            self.changes.remove_stop_file()
            self.logs.close()  # the next line opens the file afresh
            self.feed.changed()
        elif p.state is State.STOPPED:
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
                await q.append_log(self.logs.lines_in_files())
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
        if self.heartbeat is not None:
            # Listed at once, not at the first timer look; on SQLite this is the folder's one gateway.
            await self.heartbeat.start(alone=not self.store.postgres)
        await self.housekeeping.refresh_depths()
        self.auto_advance.reschedule(p.aa_stage, p.aa_deadline)
        self.auto_advance.start()

    def _closing_reason(self) -> str | None:
        return self._closing

    def is_open(self) -> bool:
        """True while the database is open (``/readyz``)."""
        return self.store.is_open and self._closing is None

    async def database_failure(self, seconds: float) -> str | None:
        """Why the database does not answer within ``seconds``; None when it does (``/readyz``)."""
        return await self.store.ping(seconds)

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
                    await self.delivery.release_all()
                    async with self.store.write() as q:
                        await q.save_last_seen(self.roster.last_seen_all(), self.roster.replica)
                        if self.heartbeat is not None:
                            await self.heartbeat.leave(q)
                except (StoreError, SQLAlchemyError) as err:
                    log.warning("lastSeen not saved at close: %s", err)

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


@asynccontextmanager
async def open_broker(settings: Settings, metrics: Metrics) -> AsyncIterator[BrokerService]:
    """Open the broker for the app's lifetime (``gateway.server.services``); closes the database on exit.

    Raises:
        StoreError: the state folder is in use by another gateway or the database is unusable.
    """
    service = await BrokerService.open(settings, metrics)
    try:
        yield service
    finally:
        await service.close()
