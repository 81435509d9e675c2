"""The broker's SQLite store: one long-lived aiosqlite connection, WAL, numbered migrations.

Every change (state, issues, counters, plan, queues) runs in one ``BEGIN IMMEDIATE`` transaction
through :meth:`Store.write`; reads go through :meth:`Store.read`. Both are serialised by one
asyncio lock because a single connection cannot hold two transactions at once and a read on it
would otherwise see another coroutine's uncommitted writes.

Pragmas (https://www.sqlite.org/pragma.html): ``journal_mode=WAL`` (persistent in the file),
``busy_timeout``, ``synchronous=NORMAL`` (durable across a process crash, ``kill -9`` included;
the last commits may be lost on power loss), ``foreign_keys=ON``.

Schema versions live in ``PRAGMA user_version``; :data:`MIGRATIONS` ``[n]`` brings a database from
version ``n`` to ``n + 1``. A database newer than this code is refused rather than guessed at.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiosqlite

from gateway.broker.machine import State

BUSY_TIMEOUT_SECONDS = 5.0

#: Each entry is one migration: the statements that bring version ``i`` to ``i + 1``.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """
        CREATE TABLE pipeline (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            state TEXT NOT NULL,
            phase INTEGER,
            fix_count INTEGER NOT NULL DEFAULT 0,
            auto_advance INTEGER NOT NULL DEFAULT 0,
            aa_stage TEXT CHECK (aa_stage IN ('cooldown', 'session_reset')),
            aa_deadline REAL,
            aa_next_phase INTEGER,
            human_origin TEXT,
            human_reason TEXT,
            human_by TEXT,
            human_at TEXT,
            stopped_by TEXT,
            stopped_at TEXT,
            updated_at TEXT NOT NULL
        )
        """,
        "INSERT INTO pipeline (id, state, updated_at) "
        "VALUES (1, 'IDLE', strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))",
        """
        CREATE TABLE issues (
            id TEXT PRIMARY KEY,
            position INTEGER NOT NULL UNIQUE,
            status TEXT NOT NULL CHECK (status IN ('todo', 'in_progress', 'done')),
            fail_count INTEGER NOT NULL DEFAULT 0
        )
        """,
        """
        CREATE TABLE plan (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            plan_id TEXT NOT NULL,
            phases TEXT NOT NULL,
            cooldown_minutes REAL NOT NULL,
            completed_phases TEXT NOT NULL DEFAULT '[]',
            updated_at TEXT NOT NULL
        )
        """,
        """
        CREATE TABLE messages (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            sender TEXT NOT NULL,
            recipient TEXT NOT NULL,
            subject TEXT NOT NULL,
            body TEXT NOT NULL,
            priority INTEGER NOT NULL,
            reply_to TEXT,
            thread_id TEXT NOT NULL,
            created_at TEXT NOT NULL,
            delivered_at TEXT,
            delivery_attempts INTEGER NOT NULL DEFAULT 0
        )
        """,
        # The queue: undelivered messages of one recipient in priority-then-time order.
        "CREATE INDEX messages_queue ON messages (recipient, priority, seq) WHERE delivered_at IS NULL",
        "CREATE TABLE agents (id TEXT PRIMARY KEY, last_seen TEXT)",
        """
        CREATE TABLE transitions (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            at TEXT NOT NULL,
            from_state TEXT NOT NULL,
            to_state TEXT NOT NULL,
            event TEXT NOT NULL,
            agent TEXT
        )
        """,
    ),
)

SCHEMA_VERSION = len(MIGRATIONS)


class StoreError(Exception):
    """The database cannot be used (newer schema, unreadable file). The message says why."""


@dataclass
class PipelineRow:
    """The single ``pipeline`` row. ``aa_deadline`` is Unix time (seconds)."""

    state: State
    phase: int | None
    fix_count: int
    auto_advance: bool
    aa_stage: str | None
    aa_deadline: float | None
    aa_next_phase: int | None
    human_origin: State | None
    human_reason: str | None
    human_by: str | None
    human_at: str | None
    stopped_by: str | None
    stopped_at: str | None


@dataclass
class IssueRow:
    """One issue of the current phase."""

    id: str
    position: int
    status: str
    fail_count: int


@dataclass
class PlanRow:
    """The phase plan: ``phases`` is ``[{"phase": int, "issues": [str]}]`` in plan order."""

    plan_id: str
    phases: list[dict[str, Any]]
    cooldown_minutes: float
    completed_phases: list[int] = field(default_factory=list)


@dataclass
class MessageRow:
    """One message, queued (``delivered_at`` None) or delivered."""

    seq: int
    id: str
    sender: str
    recipient: str
    subject: str
    body: dict[str, Any]
    priority: int
    reply_to: str | None
    thread_id: str
    created_at: str
    delivered_at: str | None
    delivery_attempts: int


_PIPELINE_COLUMNS = (
    "state, phase, fix_count, auto_advance, aa_stage, aa_deadline, aa_next_phase, human_origin, "
    "human_reason, human_by, human_at, stopped_by, stopped_at"
)
_MESSAGE_COLUMNS = (
    "seq, id, sender, recipient, subject, body, priority, reply_to, thread_id, created_at, delivered_at, "
    "delivery_attempts"
)


def _message(row: Sequence[Any]) -> MessageRow:
    return MessageRow(
        seq=row[0],
        id=row[1],
        sender=row[2],
        recipient=row[3],
        subject=row[4],
        body=json.loads(row[5]),
        priority=row[6],
        reply_to=row[7],
        thread_id=row[8],
        created_at=row[9],
        delivered_at=row[10],
        delivery_attempts=row[11],
    )


class Queries:
    """Typed SQL on one connection; used inside :meth:`Store.read` / :meth:`Store.write`."""

    def __init__(self, db: aiosqlite.Connection) -> None:
        self.db = db

    async def _one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        async with self.db.execute(sql, params) as cur:
            return await cur.fetchone()

    async def _all(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        async with self.db.execute(sql, params) as cur:
            return list(await cur.fetchall())

    # pipeline ---------------------------------------------------------------------------------

    async def pipeline(self) -> PipelineRow:
        """The pipeline row (always present after migration 1)."""
        r = await self._one(f"SELECT {_PIPELINE_COLUMNS} FROM pipeline WHERE id = 1")  # noqa: S608
        return PipelineRow(
            state=State(r[0]),
            phase=r[1],
            fix_count=r[2],
            auto_advance=bool(r[3]),
            aa_stage=r[4],
            aa_deadline=r[5],
            aa_next_phase=r[6],
            human_origin=State(r[7]) if r[7] else None,
            human_reason=r[8],
            human_by=r[9],
            human_at=r[10],
            stopped_by=r[11],
            stopped_at=r[12],
        )

    async def update_pipeline(self, now: str, **values: Any) -> None:
        """Set the given columns of the pipeline row (names are the code's, never a caller's)."""
        if not values:
            return
        cols = ", ".join(f"{k} = ?" for k in values)
        params = [v.value if isinstance(v, State) else v for v in values.values()]
        await self.db.execute(f"UPDATE pipeline SET {cols}, updated_at = ? WHERE id = 1", [*params, now])  # noqa: S608

    async def record_transition(
        self, at: str, from_state: State, to_state: State, event: str, agent: str | None
    ) -> None:
        """Append to the ``transitions`` audit table."""
        await self.db.execute(
            "INSERT INTO transitions (at, from_state, to_state, event, agent) VALUES (?, ?, ?, ?, ?)",
            (at, from_state.value, to_state.value, event, agent),
        )

    # issues -----------------------------------------------------------------------------------

    async def issues(self) -> list[IssueRow]:
        """The current phase's issues in phase order."""
        rows = await self._all("SELECT id, position, status, fail_count FROM issues ORDER BY position")
        return [IssueRow(*r) for r in rows]

    async def replace_issues(self, ids: Iterable[str]) -> None:
        """Drop the previous phase's issues and store ``ids``, all ``todo``."""
        await self.db.execute("DELETE FROM issues")
        await self.db.executemany(
            "INSERT INTO issues (id, position, status, fail_count) VALUES (?, ?, 'todo', 0)",
            [(issue, i) for i, issue in enumerate(ids)],
        )

    async def set_issue(
        self, issue: str, *, status: str | None = None, fail_count: int | None = None
    ) -> None:
        """Update one issue's status and/or fail count."""
        if status is not None:
            await self.db.execute("UPDATE issues SET status = ? WHERE id = ?", (status, issue))
        if fail_count is not None:
            await self.db.execute("UPDATE issues SET fail_count = ? WHERE id = ?", (fail_count, issue))

    async def reopen_issues(self) -> None:
        """Every issue back to ``todo``, the first ``in_progress``; fail counts kept."""
        await self.db.execute("UPDATE issues SET status = 'todo'")
        await self.db.execute(
            "UPDATE issues SET status = 'in_progress' WHERE position = (SELECT min(position) FROM issues)"
        )

    # plan -------------------------------------------------------------------------------------

    async def plan(self) -> PlanRow | None:
        """The phase plan, or None before ``set_phase_plan``."""
        r = await self._one(
            "SELECT plan_id, phases, cooldown_minutes, completed_phases FROM plan WHERE id = 1"
        )
        if r is None:
            return None
        return PlanRow(
            plan_id=r[0], phases=json.loads(r[1]), cooldown_minutes=r[2], completed_phases=json.loads(r[3])
        )

    async def save_plan(self, plan: PlanRow, now: str) -> None:
        """Insert or replace the plan."""
        await self.db.execute(
            "INSERT INTO plan (id, plan_id, phases, cooldown_minutes, completed_phases, updated_at) "
            "VALUES (1, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET plan_id = excluded.plan_id, "
            "phases = excluded.phases, cooldown_minutes = excluded.cooldown_minutes, "
            "completed_phases = excluded.completed_phases, updated_at = excluded.updated_at",
            (
                plan.plan_id,
                json.dumps(plan.phases),
                plan.cooldown_minutes,
                json.dumps(plan.completed_phases),
                now,
            ),
        )

    # messages ---------------------------------------------------------------------------------

    async def insert_message(
        self,
        *,
        id: str,
        sender: str,
        recipient: str,
        subject: str,
        body: dict[str, Any],
        priority: int,
        reply_to: str | None,
        thread_id: str,
        created_at: str,
    ) -> None:
        """Queue one message."""
        await self.db.execute(
            "INSERT INTO messages (id, sender, recipient, subject, body, priority, reply_to, thread_id, "
            "created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                id,
                sender,
                recipient,
                subject,
                json.dumps(body, ensure_ascii=False),
                priority,
                reply_to,
                thread_id,
                created_at,
            ),
        )

    async def message(self, message_id: str) -> MessageRow | None:
        """One message by id, delivered or not."""
        r = await self._one(f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE id = ?", (message_id,))  # noqa: S608
        return _message(r) if r else None

    async def next_queued(self, recipient: str, exclude: Iterable[str]) -> MessageRow | None:
        """The first undelivered message for ``recipient`` by priority then time, skipping ``exclude``."""
        skip = list(exclude)
        marks = ", ".join("?" * len(skip))
        extra = f" AND id NOT IN ({marks})" if skip else ""
        r = await self._one(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE recipient = ? AND delivered_at IS NULL{extra} "  # noqa: S608
            "ORDER BY priority, seq LIMIT 1",
            (recipient, *skip),
        )
        return _message(r) if r else None

    async def count_attempt(self, message_id: str) -> None:
        """Raise a message's delivery attempts by one (it is being handed to a wait)."""
        await self.db.execute(
            "UPDATE messages SET delivery_attempts = delivery_attempts + 1 WHERE id = ?", (message_id,)
        )

    async def mark_delivered(self, message_id: str, at: str) -> bool:
        """Take a message off its queue; False when it already was."""
        cur = await self.db.execute(
            "UPDATE messages SET delivered_at = ? WHERE id = ? AND delivered_at IS NULL", (at, message_id)
        )
        return cur.rowcount == 1

    async def queue_depths(self) -> dict[str, int]:
        """Undelivered messages per recipient."""
        rows = await self._all(
            "SELECT recipient, count(*) FROM messages WHERE delivered_at IS NULL GROUP BY recipient"
        )
        return {r[0]: r[1] for r in rows}

    async def history(self, issue: str | None, limit: int) -> list[MessageRow]:
        """The ``limit`` newest messages (those whose ``body.issue`` is ``issue``, if given), oldest first."""
        where = " WHERE CAST(json_extract(body, '$.issue') AS TEXT) = ?" if issue is not None else ""
        params: list[Any] = [issue] if issue is not None else []
        rows = await self._all(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages{where} ORDER BY seq DESC LIMIT ?",  # noqa: S608
            [*params, limit],
        )
        return [_message(r) for r in reversed(rows)]

    # agents -----------------------------------------------------------------------------------

    async def last_seen(self) -> dict[str, str]:
        """Stored ``lastSeen`` per agent."""
        rows = await self._all("SELECT id, last_seen FROM agents WHERE last_seen IS NOT NULL")
        return {r[0]: r[1] for r in rows}

    async def save_last_seen(self, seen: dict[str, str]) -> None:
        """Store ``lastSeen`` values."""
        await self.db.executemany(
            "INSERT INTO agents (id, last_seen) VALUES (?, ?) "
            "ON CONFLICT (id) DO UPDATE SET last_seen = excluded.last_seen",
            list(seen.items()),
        )


class Store:
    """The broker database. Open with :meth:`open`, close with :meth:`close`.

    Raises (from :meth:`open`):
        StoreError: the file's schema is newer than this code, or it is not a database.
    """

    def __init__(self, db: aiosqlite.Connection, path: Path) -> None:
        self._db = db
        self.path = path
        self._lock = asyncio.Lock()
        self._open = True

    @classmethod
    async def open(cls, path: Path) -> Store:
        """Open (creating if needed) and migrate the database at ``path``."""
        path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: no implicit transactions; every change states BEGIN IMMEDIATE itself.
        db = await aiosqlite.connect(path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None)
        try:
            await db.execute("PRAGMA journal_mode=WAL")
            await db.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_SECONDS * 1000)}")
            await db.execute("PRAGMA synchronous=NORMAL")
            await db.execute("PRAGMA foreign_keys=ON")
            store = cls(db, path)
            await store._migrate()
        except aiosqlite.DatabaseError as err:
            await db.close()
            raise StoreError(f"{path} cannot be used as the broker database: {err}") from err
        except BaseException:
            await db.close()
            raise
        return store

    async def _migrate(self) -> None:
        async with self._lock:
            await self._db.execute("BEGIN IMMEDIATE")
            try:
                async with self._db.execute("PRAGMA user_version") as cur:
                    row = await cur.fetchone()
                version = int(row[0]) if row else 0
                if version > SCHEMA_VERSION:
                    raise StoreError(
                        f"{self.path} has broker schema version {version}, newer than this gateway's "
                        f"{SCHEMA_VERSION}: run a newer gateway, or move the file aside to start afresh"
                    )
                for statements in MIGRATIONS[version:]:
                    for sql in statements:
                        await self._db.execute(sql)
                # PRAGMA does not take parameters; SCHEMA_VERSION is the code's own integer.
                await self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                await self._db.execute("COMMIT")
            except BaseException:
                with suppress(aiosqlite.Error):
                    await self._db.execute("ROLLBACK")
                raise

    @property
    def is_open(self) -> bool:
        """True until :meth:`close`."""
        return self._open

    async def schema_version(self) -> int:
        """``PRAGMA user_version``."""
        async with self.read() as q:
            row = await q._one("PRAGMA user_version")
            return int(row[0])

    @asynccontextmanager
    async def read(self) -> AsyncIterator[Queries]:
        """Queries outside a transaction, serialised with every other use of the connection."""
        async with self._lock:
            self._check_open()
            yield Queries(self._db)

    @asynccontextmanager
    async def write(self) -> AsyncIterator[Queries]:
        """One ``BEGIN IMMEDIATE`` transaction: committed when the block ends, rolled back on error."""
        async with self._lock:
            self._check_open()
            if self._db.in_transaction:
                # Only a cancellation in the middle of a statement can leave one open; callers
                # shield their changes, so this is a last line of defence, not a code path.
                await self._db.execute("ROLLBACK")
            try:
                await self._db.execute("BEGIN IMMEDIATE")
                yield Queries(self._db)
                await self._db.execute("COMMIT")
            except BaseException:
                with suppress(aiosqlite.Error):
                    await self._db.execute("ROLLBACK")
                raise

    def _check_open(self) -> None:
        if not self._open:
            raise StoreError("the broker database is closed (the gateway is shutting down)")

    async def close(self) -> None:
        """Checkpoint and close the connection (waits for a transaction in progress)."""
        async with self._lock:
            if not self._open:
                return
            self._open = False
            with suppress(aiosqlite.Error):
                await self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            await self._db.close()
