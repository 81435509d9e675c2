"""Housekeeping, done at each look of the auto-advance timer: save ``lastSeen``, refresh the state
and queue-depth gauges, apply the retention rule for delivered messages, prune the activity logs
and the ended MCP sessions whose ids have expired.

Every chore is best-effort: one that fails is logged by the timer and done again at a later look.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from gateway.broker.activity_log import ActivityLogs
from gateway.broker.changes import Changes
from gateway.broker.ended_sessions import EndedSessions
from gateway.broker.formats import iso
from gateway.broker.roster import Roster
from gateway.broker.store import Store

if TYPE_CHECKING:
    from gateway.config import BrokerSettings
    from gateway.observability.metrics import Metrics

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
    ) -> None:
        self._store = store
        self._changes = changes
        self._roster = roster
        self._logs = logs
        self._metrics = metrics
        self._config = config
        self._clock = clock
        self._ended_sessions = ended_sessions
        self._ticks = 0
        self._next_purge = 0.0

    async def tick(self) -> None:
        """Each timer look: save lastSeen; now and then refresh queue gauges and prune logs."""
        if not self._store.is_open:
            return
        unsaved = self._roster.unsaved()
        if unsaved:
            async with self._store.write() as q:
                await q.save_last_seen(unsaved)
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
        """The state and queue-depth gauges, as the database has them (any replica's changes)."""
        async with self._store.read() as q:
            depths = await q.queue_depths()
            state = await q.state()
        if state is not self._changes.state:
            self._changes.state = state
            self._changes.set_state_metrics()
        for agent in self._config.agents:
            self._metrics.broker_queue_depth.labels(agent).set(depths.get(agent, 0))
