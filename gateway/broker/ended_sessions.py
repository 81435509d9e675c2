"""MCP sessions ended by DELETE, kept in the broker's database so that every replica, and this
one after a restart, refuses them (MCP 2025-11-25 basic/transports#session-management: a
terminated session's id gets 404).

What is kept: a SHA-256 of the session's random number (never its id, which is a bearer
credential) and the moment its sealed id expires. A row is pruned once that moment has passed,
since the id is refused as expired from then on. Nothing is ever dropped earlier: the table holds
exactly the sessions ended within the last ``server.session_ttl_seconds``, and no number of
sessions ended later can bring one back.

The table is bounded by refusing, never by forgetting: a record dropped early would let its
session id work again. A DELETE is refused (:class:`TooManyEnded`, HTTP 429) when the table
already holds ``server.max_ended_sessions`` unexpired records, or its caller (how it is
authenticated: its client token's agent, its passthrough credential) has ended
``server.max_ended_sessions_per_caller`` sessions within their lifetime (counted by this process,
so replicas multiply that one). A refused session simply stays open until it expires, bound to
its caller as every session is; the caller is told so, and nothing it can do with it is more than
it could do with a new one.

Every request of a legacy-era session is checked against this process's copy of the table, in
memory (a dict lookup, no database round trip): loaded at start, added to by every DELETE here
and, on PostgreSQL, by the other replicas' DELETEs, each of which sends a notification in the
transaction that records it (``*ended <hash> <expires>``, delivered at commit to every replica's
LISTEN connection, ``gateway.broker.wakeups``). Rows are only ever added to the table until they
expire, so the copy is kept by union: a reload adds what the database has, and nothing leaves the
copy before its expiry.

How far behind another replica's DELETE a replica may be (PostgreSQL; on SQLite one process owns
the file and its copy is the table): normally the notification's delivery, milliseconds. As a
safety net against a notification lost on a connection that looks alive, the copy is reloaded
every :data:`LAG_SECONDS`. While the LISTEN connection is down it is reloaded at every timer look
(each second) and trusted for :data:`LAG_SECONDS` after the last moment it was known complete
(the connection lost, or the last reload that worked); past that, :meth:`EndedSessions.is_ended`
raises ``DatabaseUnavailable`` and legacy-era requests get 503 until a reload works: an id ended
elsewhere is never served for more than :data:`LAG_SECONDS` on a guess. A database unreachable by
every replica ends no session anywhere (DELETE needs it and answers 503), so for that long the
copy is exact.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from gateway.broker.store import DatabaseUnavailable, Store

if TYPE_CHECKING:
    from gateway.observability.metrics import Metrics

log = logging.getLogger(__name__)

#: Rows pruned per transaction, and transactions per housekeeping look.
PRUNE_BATCH = 500
PRUNE_MAX_BATCHES = 10
#: The longest a replica serves an id another replica ended (PostgreSQL): the copy's reload
#: interval, and how long it is trusted without its LISTEN connection (module docs).
LAG_SECONDS = 10.0
#: The notification payload's first word (agent ids never start with ``*``).
ENDED = "*ended"


class TooManyEnded(Exception):
    """This DELETE would take the record of ended sessions past its bounds; nothing was recorded."""


def id_hash(number: str) -> str:
    """What the table keeps of a session number."""
    return hashlib.sha256(number.encode()).hexdigest()


class EndedSessions:
    """The shared record of ended sessions, and this process's copy of it.

    Args:
        store: the broker's database.
        metrics: the app's metrics (``gateway_mcp_sessions_ended``).
        clock: Unix seconds.

    Raises (the async methods):
        StoreError: the database cannot serve the call (``DatabaseUnavailable`` while it is down).
    """

    def __init__(
        self,
        store: Store,
        metrics: Metrics,
        clock: Callable[[], float],
        *,
        max_total: int = 100_000,
        max_per_caller: int = 1_000,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._clock = clock
        self._max_total = max_total
        self._max_per_caller = max_per_caller
        #: caller's owner key -> expiries of the sessions it ended here (unexpired only).
        self._by_caller: dict[str, list[float]] = {}
        #: DELETEs between their checks and their rows (counted against the total meanwhile).
        self._writing = 0
        #: id hash -> expiry (Unix seconds).
        self._ended: dict[str, float] = {}
        #: When the copy was last known complete by a reload (Unix seconds); None: never loaded.
        self._loaded_at: float | None = None
        #: Whether this replica's LISTEN connection is up (SQLite: always, it needs none).
        self._listening = True
        #: Since when the copy may miss notifications (the connection was down); None: it misses none.
        self._deaf_since: float | None = None

    async def end(self, number: str, expires: float, owner: str = "") -> None:
        """Record session ``number`` of caller ``owner`` as ended until ``expires`` (Unix
        seconds), here at once and, on PostgreSQL, on every other replica when the transaction
        commits.

        Raises:
            TooManyEnded: the record is full, or ``owner`` has ended its share (module docs).
        """
        now = self._clock()
        mine = [e for e in self._by_caller.get(owner, ()) if e > now]
        if len(mine) >= self._max_per_caller:
            raise TooManyEnded(
                f"this caller ended {len(mine)} sessions within their lifetime, the most this gateway "
                f"records per caller (server.max_ended_sessions_per_caller)"
            )
        if len(self._ended) + self._writing >= self._max_total and (
            sum(1 for e in self._ended.values() if e > now) + self._writing >= self._max_total
        ):
            raise TooManyEnded(
                f"the gateway already records {self._max_total} ended sessions, its limit "
                "(server.max_ended_sessions)"
            )
        # The slot is taken before the database write, not after it: DELETEs under way at once
        # each read the count before any of them had added to it, and all went past the bound.
        mine.append(expires)
        self._by_caller[owner] = mine
        self._writing += 1
        hashed = id_hash(number)
        try:
            async with self._store.write() as q:
                await q.end_session(hashed, expires)
                if self._store.postgres:
                    await q.notify(f"{ENDED} {hashed} {expires!r}")
                # From the table, as prune() sets it: adding 1 here raced a prune's count under way.
                ended = await q.ended_sessions_count(self._clock())
        except BaseException:
            held = self._by_caller.get(owner)
            if held is not None and expires in held:
                held.remove(expires)
            raise
        finally:
            self._writing -= 1
        self._ended[hashed] = expires
        self._metrics.sessions_ended.set(ended)

    def is_ended(self, number: str) -> bool:
        """Whether session ``number`` was ended, by any replica (from the copy in memory).

        Raises:
            DatabaseUnavailable: this replica's copy may lag the table by more than
                :data:`LAG_SECONDS` (its LISTEN connection and its reloads have failed that long).
        """
        if self._deaf_since is not None:
            known = max(self._deaf_since, self._loaded_at or 0.0)
            if self._clock() - known > LAG_SECONDS:
                raise DatabaseUnavailable("the record of ended sessions could not be reloaded")
        return id_hash(number) in self._ended

    def heard(self, payload: str) -> bool:
        """Take a notification from another replica; whether it was an ended session's."""
        if not payload.startswith(ENDED + " "):
            return False
        try:
            _, hashed, expires = payload.split(" ")
            self._ended[hashed] = float(expires)
        except ValueError:
            log.warning("ignored a malformed ended-session notification")
        return True

    def listening(self, up: bool) -> None:
        """This replica's LISTEN connection went down (False) or is back (True): until a reload
        after it came back, notifications may have been missed."""
        self._listening = up
        if not up and self._deaf_since is None:
            self._deaf_since = self._clock()
        # Back: still deaf until a reload after it works (the service starts one at once).

    async def load(self) -> None:
        """Add the table's unexpired rows to the copy (it is complete from then on)."""
        now = self._clock()
        async with self._store.read() as q:
            rows = await q.ended_sessions_since(now)
        self._ended.update(rows)
        self._loaded_at = now
        if self._listening:
            self._deaf_since = None

    async def refresh(self) -> None:
        """At each timer look: reload when due (every :data:`LAG_SECONDS`, or at every look while
        the copy may have missed notifications). Only PostgreSQL's copy can fall behind."""
        if not self._store.postgres:
            return
        due = self._loaded_at is None or self._clock() - self._loaded_at >= LAG_SECONDS
        if due or self._deaf_since is not None:
            await self.load()

    async def prune(self) -> int:
        """Forget the ended sessions whose ids have expired; refresh the gauge. How many went."""
        now = self._clock()
        self._ended = {h: e for h, e in self._ended.items() if e > now}
        self._by_caller = {
            owner: kept for owner, ends in self._by_caller.items() if (kept := [e for e in ends if e > now])
        }
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
