"""The broker's store: one SQLAlchemy asyncio engine on SQLite (default) or PostgreSQL.

Every change runs in one transaction through :meth:`Store.write`; reads go through
:meth:`Store.read`. On SQLite a write transaction is ``BEGIN IMMEDIATE`` and an asyncio lock
keeps this process's writers in line (the file has one writer at a time; waiting in the lock is
cheaper than SQLite's busy loop), while reads run beside it on other connections (WAL). On
PostgreSQL transactions run concurrently and lock what they change (``gateway.broker.queries``).

Pragmas (https://www.sqlite.org/pragma.html): ``journal_mode=WAL`` (persistent in the file),
``busy_timeout``, ``synchronous=NORMAL`` (durable across a process crash, ``kill -9`` included;
the last commits may be lost on power loss), ``foreign_keys=ON``.

Schema: Alembic migrations (``gateway.broker.migrations``) applied at start under a lock (the
state folder's lock file and ``BEGIN IMMEDIATE`` on SQLite, a transaction-scoped advisory lock
on PostgreSQL), so replicas starting together migrate once. A SQLite database written before
Alembic (``PRAGMA user_version`` 1) is taken as revision 0001 and upgraded. A database whose
revision this gateway does not know was written by a newer gateway and is refused.
"""

from __future__ import annotations

import asyncio
import logging
import select
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from gateway.broker.database import (
    OPTION,
    DatabaseUnusable,
    StoreError,
    connect_with_retry,
    describe,
    engine_url,
)
from gateway.broker.queries import IssueRow, MessageRow, PipelineRow, PlanRow, Queries

if TYPE_CHECKING:
    from gateway.config import BrokerSettings

__all__ = [
    "DatabaseUnusable",
    "IssueRow",
    "MessageRow",
    "PipelineRow",
    "PlanRow",
    "Queries",
    "Store",
    "StoreError",
]

log = logging.getLogger(__name__)

BUSY_TIMEOUT_SECONDS = 5.0
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
#: ``pg_advisory_xact_lock`` key of the migration (any constant the gateway owns: "gmcpmig").
MIGRATION_LOCK = 0x676D63706D6967
#: The revision a pre-Alembic SQLite database (``PRAGMA user_version`` 1) is at.
LEGACY_REVISION = "0001"


def _alembic_config(conn: sa.Connection) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = conn
    return cfg


def head_revision() -> str:
    """The newest migration this gateway has."""
    head = ScriptDirectory.from_config(_alembic_config(None)).get_current_head()  # type: ignore[arg-type]
    assert head is not None
    return head


class Store:
    """The broker database. Open with :meth:`open`, close with :meth:`close`."""

    def __init__(self, engine: AsyncEngine, where: str) -> None:
        self.engine = engine
        self.where = where
        self.postgres = engine.dialect.name == "postgresql"
        self._write_lock = asyncio.Lock()
        self._open = True

    @classmethod
    async def open(cls, config: BrokerSettings, state_dir: Path) -> Store:
        """Connect (retrying a PostgreSQL not up yet) and migrate.

        Raises:
            DatabaseUnusable: bad URL, credentials, unreachable server, newer schema (exit 2).
            StoreError: the SQLite file is not a database.
        """
        raw = config.database_url.get_secret_value() if config.database_url is not None else None
        try:
            url = engine_url(raw, state_dir)
        except sa.exc.ArgumentError:
            raise DatabaseUnusable(
                f"{OPTION}: not a URL this gateway can read; write it as "
                "postgresql://user:password@host:5432/dbname (percent-encode special characters)"
            ) from None
        if url.get_backend_name() == "sqlite":
            state_dir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - once, at start
            # Every use ends its own transaction, so no ROLLBACK round trip when a connection returns.
            engine = create_async_engine(url, pool_size=5, max_overflow=5, pool_reset_on_return=None)
            _sqlite_pragmas(engine)
        else:
            engine = create_async_engine(url, pool_size=config.pool_size, max_overflow=config.pool_size)
            _drop_ended_sessions(engine)
        store = cls(engine, describe(url))
        try:
            if store.postgres:
                await connect_with_retry(store._ping, url, config)
            await store._migrate()
        except sa.exc.DBAPIError as err:
            await engine.dispose()
            if isinstance(err.orig, sqlite3.DatabaseError) or "not a database" in str(err):
                raise StoreError(
                    f"{url.database} cannot be used as the broker database: {err.orig}"
                ) from None
            raise DatabaseUnusable(f"{OPTION}: {store.where} cannot be used: {err.orig}") from None
        except BaseException:
            await engine.dispose()
            raise
        return store

    async def _ping(self) -> None:
        async with self.engine.connect() as conn:
            await conn.execute(sa.text("SELECT 1"))

    async def _migrate(self) -> None:
        async with self.engine.connect() as conn, conn.begin():
            if self.postgres:
                await conn.execute(sa.select(sa.func.pg_advisory_xact_lock(MIGRATION_LOCK)))
            await conn.run_sync(self._upgrade)

    def _upgrade(self, conn: sa.Connection) -> None:
        cfg = _alembic_config(conn)
        script = ScriptDirectory.from_config(cfg)
        current = MigrationContext.configure(conn).get_current_revision()
        if current is None and not self.postgres and sa.inspect(conn).has_table("pipeline"):
            version = conn.exec_driver_sql("PRAGMA user_version").scalar_one()
            if version != 1:
                raise DatabaseUnusable(
                    f"{self.where} has broker schema version {version}, newer than this gateway's: run a "
                    "newer gateway, or move the file aside to start afresh"
                )
            command.stamp(cfg, LEGACY_REVISION)
            current = LEGACY_REVISION
        if current is not None:
            try:
                script.get_revision(current)
            except CommandError:
                raise DatabaseUnusable(
                    f"{self.where} has broker schema revision {current}, newer than this gateway's "
                    f"{script.get_current_head()}: run the newer gateway that wrote it (or a later one)"
                    + (
                        f"; {OPTION} names the database"
                        if self.postgres
                        else ", or move the file aside to start afresh"
                    )
                ) from None
        command.upgrade(cfg, "head")

    @property
    def is_open(self) -> bool:
        """True until :meth:`close`."""
        return self._open

    async def schema_revision(self) -> str | None:
        """The Alembic revision the database is at."""
        async with self.engine.connect() as conn:
            return await conn.run_sync(lambda c: MigrationContext.configure(c).get_current_revision())

    @asynccontextmanager
    async def read(self) -> AsyncIterator[Queries]:
        """Queries in one read transaction (a consistent snapshot; no lock taken)."""
        self._check_open()
        async with self.engine.connect() as conn:
            conn = await conn.execution_options(broker_read=True)
            async with conn.begin():
                yield Queries(conn, postgres=self.postgres)

    @asynccontextmanager
    async def write(self) -> AsyncIterator[Queries]:
        """One write transaction: committed when the block ends, rolled back on error."""
        self._check_open()
        if self.postgres:
            async with self.engine.begin() as conn:
                yield Queries(conn, postgres=True)
            return
        async with self._write_lock:
            self._check_open()
            async with self.engine.begin() as conn:
                yield Queries(conn, postgres=False)

    @asynccontextmanager
    async def write_one(self) -> AsyncIterator[Queries]:
        """For a single statement (atomic by itself): no BEGIN/COMMIT round trips on SQLite."""
        self._check_open()
        if self.postgres:
            async with self.engine.connect() as conn:
                conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
                yield Queries(conn, postgres=True)
            return
        async with self._write_lock:
            self._check_open()
            # The driver runs without implicit transactions: the statement commits by itself.
            # Not committing here (nor rolling back: pool_reset_on_return=None) saves the round
            # trips of an empty BEGIN/COMMIT pair.
            async with self.engine.connect() as conn:
                conn = await conn.execution_options(broker_single=True)
                raw = await conn.get_raw_connection()
                yield Queries(conn, postgres=False, driver=raw.driver_connection)

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncConnection]:
        """A raw connection (tests and benchmarks)."""
        async with self.engine.connect() as conn:
            yield conn

    def _check_open(self) -> None:
        if not self._open:
            raise StoreError("the broker database is closed (the gateway is shutting down)")

    async def close(self) -> None:
        """Fold the SQLite write-ahead log back and close every connection."""
        if not self._open:
            return
        async with self._write_lock:
            self._open = False
            if not self.postgres:
                try:
                    async with self.engine.connect() as conn:
                        await conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
                except sa.exc.DBAPIError as err:
                    log.debug("WAL checkpoint at close failed: %s", err)
            await self.engine.dispose()


def _drop_ended_sessions(engine: AsyncEngine) -> None:
    """Never hand out a pooled PostgreSQL connection whose session the server ended.

    A server that restarts, fails over or ends idle sessions (``idle_session_timeout``,
    ``pg_terminate_backend``) sends an error and closes the socket, so an idle connection with
    something to read is one it ended. Checked at each checkout without a round trip (a pre-ping
    would be one more per statement); the pool then connects afresh (``DisconnectionError``:
    https://docs.sqlalchemy.org/en/20/core/pooling.html#disconnect-handling-pessimistic).
    A connection that breaks in use is dropped by SQLAlchemy as usual.
    """

    @sa.event.listens_for(engine.sync_engine, "checkout")
    def _checkout(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
        conn = dbapi_conn.driver_connection
        if conn.closed:
            raise sa.exc.DisconnectionError("the connection is closed")
        readable = select.poll()  # poll, not select: a busy gateway has descriptors past FD_SETSIZE
        readable.register(conn.pgconn.socket, select.POLLIN)
        if readable.poll(0):
            raise sa.exc.DisconnectionError("the server ended this session")


def _sqlite_pragmas(engine: AsyncEngine) -> None:
    """Per-connection pragmas, and transactions the code starts itself (``BEGIN IMMEDIATE`` to write)."""

    @sa.event.listens_for(engine.sync_engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        # No implicit transactions from the driver: "begin" below states each one.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_SECONDS * 1000)}")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @sa.event.listens_for(engine.sync_engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        options = conn.get_execution_options()
        if options.get("broker_single", False):
            return  # one statement, atomic by itself (Store.write_one)
        conn.exec_driver_sql("BEGIN" if options.get("broker_read", False) else "BEGIN IMMEDIATE")
