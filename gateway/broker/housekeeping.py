"""Housekeeping, done at each look of the auto-advance timer: this replica's heartbeat (when due),
save ``lastSeen``, refresh the state and queue-depth gauges, apply the retention rule for delivered
messages, prune the activity logs, the ended MCP sessions whose ids have expired, the console
sign-outs of expired cookies and the heartbeats of replicas gone for a day.

Every chore is best-effort: one that fails is logged by the timer and done again at a later look.

The broker's gauges are also read from the database at each ``/metrics`` scrape
(:meth:`Housekeeping.refresh_for_scrape`): every replica then reports what the database says
(state, time in state, queue depths, every replica's ``lastSeen``) whichever replica made the
change, at the cost of one short read transaction per scrape (two with ``confirm_by = "operator"``:
the approvals waiting are counted too). That read has a time limit well
inside Prometheus's scrape timeout and never fails the scrape: a database that fails or is slow
sets ``gateway_broker_database_up`` to 0 and leaves the other gauges at their last values.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlalchemy.exc import SQLAlchemyError

from gateway.broker.activity_log import ActivityLogs
from gateway.broker.changes import Changes
from gateway.broker.console_sign_outs import ConsoleSignOuts
from gateway.broker.database import failure_text
from gateway.broker.ended_sessions import EndedSessions
from gateway.broker.formats import iso, unix
from gateway.broker.migrations import HEAD
from gateway.broker.replicas import Heartbeat, alive
from gateway.broker.roster import Roster
from gateway.broker.store import Store, StoreError

if TYPE_CHECKING:
    from gateway.broker.confirmations import ConfirmationStore
    from gateway.config import BrokerSettings
    from gateway.observability.metrics import Metrics

log = logging.getLogger(__name__)

#: Seconds a scrape's read of the database may take (Prometheus's scrape timeout in deploy/ is 5 s).
SCRAPE_READ_TIMEOUT = 2.0
#: Scrapes closer together than this (several Prometheus servers, both listeners) share one read.
SCRAPE_MIN_INTERVAL = 1.0

#: Retention: rows per delete, and deletes per timer look.
PURGE_BATCH = 500
PURGE_MAX_BATCHES = 10


class Housekeeping:
    """The periodic chores of one broker.

    Args:
        store: the opened database.
        changes: the committed state (its gauge follows the database's).
        roster: the agents (``lastSeen`` not saved yet).
        logs: the activity logs (their names).
        metrics: the app's metrics.
        config: the ``broker`` settings (retention, log lines kept).
        clock: Unix time source.
        ended_sessions: the MCP sessions ended by DELETE.
        console_sign_outs: the console sessions signed out.
        confirmations: the approvals to count for ``gateway_confirmations_pending``
            (``confirm_by = "operator"``; None: not counted).
        heartbeat: this replica's heartbeat, written when due at each look (None: not a replica).
    """

    def __init__(
        self,
        store: Store,
        changes: Changes,
        roster: Roster,
        logs: ActivityLogs,
        metrics: Metrics,
        config: BrokerSettings,
        clock: Callable[[], float],
        ended_sessions: EndedSessions,
        console_sign_outs: ConsoleSignOuts,
        confirmations: ConfirmationStore | None = None,
        heartbeat: Heartbeat | None = None,
    ) -> None:
        self._store = store
        self._changes = changes
        self._roster = roster
        self._logs = logs
        self._metrics = metrics
        self._config = config
        self._clock = clock
        self._ended_sessions = ended_sessions
        self._console_sign_outs = console_sign_outs
        self._confirmations = confirmations
        self._heartbeat = heartbeat
        self._ticks = 0
        self._next_purge = 0.0
        self._scrape_lock = asyncio.Lock()
        self._scraped_at = -SCRAPE_MIN_INTERVAL
        self._scrape_failing = False

    async def tick(self) -> None:
        """Each timer look: save lastSeen; now and then refresh queue gauges and prune logs."""
        if not self._store.is_open:
            return
        if self._heartbeat is not None:
            await self._heartbeat.beat_when_due()
        # A failed reload: the copy knows how stale it may be; the chores below meet the same outage.
        with contextlib.suppress(StoreError, SQLAlchemyError):
            await self._ended_sessions.refresh()
        unsaved = self._roster.unsaved()
        if unsaved:
            async with self._store.write() as q:
                await q.save_last_seen(unsaved, self._roster.replica)
        self._ticks += 1
        if self._ticks % 5 == 0:
            await self.refresh_depths()
        if self._clock() >= self._next_purge:
            await self.purge_delivered()
        if self._ticks % 600 == 1:
            async with self._store.write() as q:
                for name in self._logs.names:
                    await q.prune_log(name, self._config.log_keep_lines)
            await self._ended_sessions.prune()
            await self._console_sign_outs.prune()
            if self._heartbeat is not None:
                await self._heartbeat.prune()

    async def purge_delivered(self) -> int:
        """The retention rule for delivered messages (``broker.retain_delivered_seconds`` and
        ``broker.retain_delivered_count``), in short transactions of :data:`PURGE_BATCH` rows so
        that sends and waits are never held up for long; how many were deleted."""
        before = iso(self._clock() - self._config.retain_delivered_seconds)
        total = 0
        for _ in range(PURGE_MAX_BATCHES):
            async with self._store.write() as q:
                n = await q.purge_delivered(before, self._config.retain_delivered_count, PURGE_BATCH)
            total += n
            self._metrics.broker_messages_purged.inc(n)
            if n < PURGE_BATCH:
                # All caught up: look again later. Otherwise the next tick goes on.
                self._next_purge = self._clock() + self._config.purge_interval_seconds
                break
        return total

    async def refresh_depths(self) -> None:
        """The broker's gauges as the database has them (any replica's changes): state, time in
        state, queue depths, agents' last calls, approvals waiting for an operator; and this replica's
        open waits per agent."""
        async with self._store.read() as q:
            depths = await q.queue_depths()
            state = await q.state()
            since = unix(await q.state_since())
            if self._store.revision == HEAD:
                rows = await q.replicas()
                self._roster.merge(await q.last_seen(), await q.seen_by(), alive(rows, self._clock()))
            else:  # the command line on another schema: no heartbeats to read
                self._roster.merge(await q.last_seen())
        if state is not self._changes.state:
            self._changes.state = state
            self._changes.set_state_metrics()
        if since is not None:
            self._metrics.broker_state_since.set(since)
        for agent in self._config.agents:
            self._metrics.broker_queue_depth.labels(agent).set(depths.get(agent, 0))
            self._metrics.broker_agent_waiting.labels(agent).set(1 if self._roster.waiting(agent) else 0)
            seen = self._roster.last_call.get(agent)
            if seen is not None:
                self._metrics.broker_agent_last_seen.labels(agent).set(seen)
        if self._confirmations is not None:
            self._metrics.confirmations_pending.set(await self._confirmations.pending_count())

    async def refresh_for_scrape(self) -> None:
        """:meth:`refresh_depths` for a ``/metrics`` scrape: bounded by :data:`SCRAPE_READ_TIMEOUT`,
        shared by scrapes within :data:`SCRAPE_MIN_INTERVAL`, never raising; sets
        ``gateway_broker_database_up``."""
        async with self._scrape_lock:
            if time.monotonic() - self._scraped_at < SCRAPE_MIN_INTERVAL:
                return
            try:
                if not self._store.is_open:
                    raise RuntimeError("the broker database is closed")
                async with asyncio.timeout(SCRAPE_READ_TIMEOUT):
                    await self.refresh_depths()
            except Exception as err:  # a scrape must never fail: the gauge says it instead
                self._metrics.broker_database_up.set(0)
                if not self._scrape_failing:  # once per outage: Prometheus scrapes every few seconds
                    url = self._store.engine.url
                    why = "timed out" if isinstance(err, TimeoutError) else failure_text(err, url)
                    log.warning("metrics: the broker database %s did not answer: %s", self._store.where, why)
                self._scrape_failing = True
            else:
                self._metrics.broker_database_up.set(1)
                self._scrape_failing = False
            self._scraped_at = time.monotonic()
