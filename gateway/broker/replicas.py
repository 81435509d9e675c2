"""Replica heartbeats: which gateways run on the broker's database, and which are gone.

Every gateway process writes its row in ``replicas`` (an id drawn at start, its host, process id,
version, start time) every ``broker.heartbeat_seconds`` from the timer's looks
(``gateway.broker.housekeeping``), and deletes it when it stops cleanly. A row not written for
more than :data:`GONE_AFTER_BEATS` of its own intervals is a replica **gone**: killed (SIGKILL, an
out-of-memory kill, a node lost), frozen, or cut off from the database. The waits it held ended
with it, so an agent whose last call it saw is not connected (``gateway.broker.roster``), and
``broker status`` and the console list it as gone until it has been gone for :data:`FORGET_AFTER`.

On SQLite the state folder's lock file lets one gateway at a time use the database, so a gateway
starting there deletes every earlier row (:meth:`Heartbeat.start`: a crashed run is not running, it
is not a replica gone), and ``broker status`` asks the lock: with no gateway holding it, no row's
process runs (:func:`not_running`).

Times are each replica's own clock, as the broker's leases are: replicas' clocks must agree
within a few seconds (NTP), or one replica may judge another gone early.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable
from typing import Any

from gateway import __version__
from gateway.broker.formats import iso
from gateway.broker.queries import Queries, ReplicaRow
from gateway.broker.store import Store

#: Heartbeats missed before a replica counts as gone.
GONE_AFTER_BEATS = 3
#: Seconds a gone replica is still listed before its row is deleted.
FORGET_AFTER = 86_400.0


class Heartbeat:
    """This process's heartbeat.

    Args:
        store: the opened database.
        clock: Unix time source.
        every: seconds between heartbeats (``broker.heartbeat_seconds``).
    """

    def __init__(self, store: Store, clock: Callable[[], float], *, every: float) -> None:
        self._store = store
        self._clock = clock
        self.every = every
        self.id = secrets.token_hex(4)
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.started = clock()
        self._next = 0.0

    def row(self, now: float) -> ReplicaRow:
        """This replica's row as of ``now``."""
        return ReplicaRow(self.id, self.host, self.pid, __version__, self.started, now, self.every)

    async def beat(self) -> None:
        """Write this replica's row now."""
        now = self._clock()
        async with self._store.write() as q:
            await q.beat(self.row(now))
        self._next = now + self.every

    async def start(self, *, alone: bool) -> None:
        """The first :meth:`beat`; ``alone`` (SQLite, one gateway per state folder by its lock):
        first delete every other row, each an earlier run's that stopped without deleting it."""
        now = self._clock()
        async with self._store.write() as q:
            if alone:
                await q.forget_other_replicas(self.id)
            await q.beat(self.row(now))
        self._next = now + self.every

    async def beat_when_due(self) -> None:
        """:meth:`beat`, when ``every`` seconds have passed since the last one."""
        if self._clock() >= self._next:
            await self.beat()

    async def leave(self, q: Queries) -> None:
        """A clean stop: delete this replica's row (in the caller's transaction)."""
        await q.leave(self.id)

    async def prune(self) -> None:
        """Delete the rows of replicas gone for longer than :data:`FORGET_AFTER`."""
        async with self._store.write() as q:
            await q.prune_replicas(self._clock() - FORGET_AFTER)


def alive(rows: list[ReplicaRow], now: float) -> list[str]:
    """The ids of the replicas among ``rows`` still beating at ``now``."""
    return [r.id for r in rows if not r.gone(now, GONE_AFTER_BEATS)]


def described(rows: list[ReplicaRow], now: float, this: str | None) -> list[dict[str, Any]]:
    """``rows`` as ``broker status`` and the console show them: ``{id, host, pid, version,
    started, lastSeen, secondsAgo, everySeconds, alive, this}`` (``this``: the process asked)."""
    return [
        {
            "id": r.id,
            "host": r.host,
            "pid": r.pid,
            "version": r.version,
            "started": iso(r.started),
            "lastSeen": iso(r.last_seen),
            "secondsAgo": max(0.0, round(now - r.last_seen, 1)),
            "everySeconds": r.every,
            "alive": not r.gone(now, GONE_AFTER_BEATS),
            "this": r.id == this,
        }
        for r in rows
    ]


def not_running(described_rows: list[dict[str, Any]]) -> None:
    """Mark :func:`described` rows as not running (SQLite with no gateway holding the state
    folder's lock: whatever the heartbeats say, none of their processes runs)."""
    for row in described_rows:
        row.update(alive=False, running=False)
