"""MCP sessions ended by DELETE, kept in the broker's database so that every replica, and this
one after a restart, refuses them (MCP 2025-11-25 basic/transports#session-management: a
terminated session's id gets 404).

What is kept: a SHA-256 of the session's random number (never its id, which is a bearer
credential) and the moment its sealed id expires. A row is pruned once that moment has passed,
since the id is refused as expired from then on. Nothing is ever dropped earlier: the table holds
exactly the sessions ended within the last ``server.session_ttl_seconds``, so its size is bounded by
the rate of DELETEs (each needs a live session of an authenticated caller) times that lifetime,
and no number of sessions ended later can bring one back.

Every request of a legacy-era session looks its session up here: one statement by primary key,
with no transaction around it (``Store.read_one``; on SQLite one hand-off to the driver's thread),
so that a DELETE on any replica counts on every other at once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from gateway.broker.store import Store

if TYPE_CHECKING:
    from gateway.observability.metrics import Metrics

#: Rows pruned per transaction, and transactions per housekeeping look.
PRUNE_BATCH = 500
PRUNE_MAX_BATCHES = 10


def id_hash(number: str) -> str:
    """What the table keeps of a session number."""
    return hashlib.sha256(number.encode()).hexdigest()


class EndedSessions:
    """The shared record of ended sessions.

    Args:
        store: the broker's database.
        metrics: the app's metrics (``gateway_mcp_sessions_ended``).
        clock: Unix seconds.

    Raises (every method):
        StoreError: the database cannot serve the call (``DatabaseUnavailable`` while it is down).
    """

    def __init__(self, store: Store, metrics: Metrics, clock: Callable[[], float]) -> None:
        self._store = store
        self._metrics = metrics
        self._clock = clock

    async def end(self, number: str, expires: float) -> None:
        """Record session ``number`` as ended until ``expires`` (Unix seconds)."""
        async with self._store.write() as q:
            await q.end_session(id_hash(number), expires)
            # From the table, as prune() sets it: adding 1 here raced a prune's count under way.
            ended = await q.ended_sessions_count(self._clock())
        self._metrics.sessions_ended.set(ended)

    async def is_ended(self, number: str) -> bool:
        """Whether session ``number`` was ended, by any replica."""
        async with self._store.read_one() as q:  # on every request of a legacy session
            return await q.session_ended(id_hash(number))

    async def prune(self) -> int:
        """Forget the ended sessions whose ids have expired; refresh the gauge. How many went."""
        now = self._clock()
        total = 0
        for _ in range(PRUNE_MAX_BATCHES):
            async with self._store.write() as q:
                n = await q.prune_ended_sessions(now, PRUNE_BATCH)
            total += n
            if n < PRUNE_BATCH:
                break
        async with self._store.read() as q:
            self._metrics.sessions_ended.set(await q.ended_sessions_count(now))
        return total
