"""The broker's store: one SQLAlchemy asyncio engine on SQLite (default) or PostgreSQL.

Every change runs in one transaction through :meth:`Store.write`; reads go through
:meth:`Store.read`. On SQLite a write transaction is ``BEGIN IMMEDIATE`` and an asyncio lock
keeps this process's writers in line (the file has one writer at a time; waiting in the lock is
cheaper than SQLite's busy loop), while reads run beside it on other connections (WAL). On
PostgreSQL transactions run concurrently and lock what they change (``gateway.broker.queries``).

SQLite pragmas: ``gateway.broker.database.sqlite_pragmas``.

Schema: at start the store reads the database's Alembic revision (the ``alembic_version`` table)
with SQLAlchemy alone. At the newest one (``gateway.broker.migrations.HEAD``: every restart but
the first after an upgrade) that is all; a revision this install has no script for (a newer
gateway's) is refused before anything runs; otherwise ``gateway.broker.migrate`` upgrades it in a
child process, so that Alembic never stays in the gateway's memory. The ``broker`` and
``database`` commands open it with ``migrate=False``: they read the revision and never change it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import select
import sqlite3
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from gateway.broker.database import (
    OPTION,
    DatabaseUnavailable,
    DatabaseUnusable,
    Role,
    StoreError,
    connect_with_retry,
    describe,
    engine_url,
    failure_text,
    postgres_connect_args,
    refusal,
    sqlite_pragmas,
    without_password,
)
from gateway.broker.migrations import HEAD, Standing, newer_refusal, standing
from gateway.broker.queries import IssueRow, MessageRow, PipelineRow, PlanRow, Queries

if TYPE_CHECKING:
    from gateway.config import BrokerSettings

__all__ = [
    "DatabaseUnavailable",
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

#: The migration process: ``gateway.broker.migrate`` found where this process finds its modules
#: (its ``sys.path``, given as arguments: the same package, whatever the working folder).
_CHILD = "import sys; sys.path[:] = sys.argv[1:]; from gateway.broker.migrate import main; sys.exit(main())"
#: PostgreSQL read transactions: one snapshot for all their statements.
_SNAPSHOT = {"isolation_level": "REPEATABLE READ"}
#: Failures of the database rather than of a statement: unreachable, connection lost, pool
#: exhausted, SQLite locked past its busy timeout or its disk full (the raw driver's own for the
#: statements ``write_one`` runs on the driver's connection).
_UNAVAILABLE = (sa.exc.OperationalError, sa.exc.InterfaceError, sa.exc.TimeoutError, sqlite3.OperationalError)


def _create_private(path: Path) -> None:
    """Create the SQLite file readable by this user only (mode 0600), before SQLite creates it
    with the umask's mode (0644): it holds every agent's messages and plans. SQLite gives its
    ``-wal`` and ``-shm`` files the database file's mode."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    os.close(fd)


class Store:
    """The broker database. Open with :meth:`open`, close with :meth:`close`."""

    def __init__(self, engine: AsyncEngine, where: str) -> None:
        self.engine = engine
        self.where = where
        self.postgres = engine.dialect.name == "postgresql"
        self._write_lock = asyncio.Lock()
        self._open = True
        #: PostgreSQL: the server process id of each of this replica's pooled connections.
        self._backends: dict[int, int] = {}
        #: While the database keeps failing: the failure logged last (waits look again every
        #: fraction of a second through an outage; the same failure is logged once).
        self._failing: str | None = None
        #: The schema revision found at open (after migrating, when the store migrated).
        self.revision: str | None = None

    @classmethod
    async def open(
        cls, config: BrokerSettings, state_dir: Path, *, migrate: bool = True, role: Role = "gateway"
    ) -> Store:
        """Connect (retrying a PostgreSQL not up yet) and migrate; with ``migrate=False`` only read
        the schema revision (:attr:`revision`), whatever it is, for the caller to judge.

        ``role`` is what PostgreSQL's ``pg_stat_activity`` shows of the connections (their
        ``application_name``: ``gitlab-mcp-gateway/<version> <role> schema <HEAD>``), so that a
        migration can tell which gateways use the database.

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
            _create_private(Path(str(url.database)))
            # Every use ends its own transaction, so no ROLLBACK round trip when a connection returns.
            engine = create_async_engine(url, pool_size=5, max_overflow=5, pool_reset_on_return=None)
            sqlite_pragmas(engine.sync_engine)
        else:
            engine = create_async_engine(
                url,
                pool_size=config.pool_size,
                max_overflow=config.pool_size,
                connect_args=postgres_connect_args(url, role),
            )
            _drop_ended_sessions(engine)
        store = cls(engine, describe(url))
        if store.postgres:
            _track_backends(engine, store._backends)
        try:
            if store.postgres:
                await connect_with_retry(store._ping, url, config)
            if migrate:
                await store._migrate(url)
            else:
                store.revision = await store.schema_revision()
        except sa.exc.DBAPIError as err:
            await engine.dispose()
            raise refusal(err, url) from None
        except BaseException:
            await engine.dispose()
            raise
        return store

    async def _ping(self) -> None:
        async with self.engine.connect() as conn:
            await conn.execute(sa.text("SELECT 1"))

    async def _migrate(self, url: URL) -> None:
        """Bring the schema to :data:`HEAD`: nothing to do at every restart, a child process
        otherwise; either way one line says where the schema stands.

        Raises:
            DatabaseUnusable: the schema is newer than this install's (nothing was run).
        """
        before = await self.schema_revision()
        found = standing(before)
        if found is Standing.CURRENT:
            self.revision = before
            log.info("broker database %s is at schema revision %s, this version's newest", self.where, HEAD)
            return
        if found is Standing.NEWER:
            assert before is not None
            raise DatabaseUnusable(newer_refusal(self.where, before, postgres=self.postgres))
        log.info(
            "broker database %s is at schema revision %s; migrating it to %s",
            self.where,
            before or "(none: new)",
            HEAD,
        )
        started = time.monotonic()
        await _run_migration_process(url, self.where)
        self.revision = await self.schema_revision()
        if self.revision != HEAD:  # the migrations and HEAD disagree: a packaging or release mistake
            raise StoreError(
                f"{self.where} is at schema revision {self.revision} after migrating, not {HEAD}"
            )
        log.info(
            "broker database %s migrated from schema revision %s to %s in %.1f s",
            self.where,
            before or "(none: new)",
            HEAD,
            time.monotonic() - started,
        )

    @property
    def is_open(self) -> bool:
        """True until :meth:`close`."""
        return self._open

    async def schema_revision(self) -> str | None:
        """The Alembic revision the database is at; None for a database Alembic never touched."""
        async with self.engine.connect() as conn:
            conn = await conn.execution_options(broker_read=True)
            async with conn.begin():
                return await conn.run_sync(_read_revision)

    def sent_here(self, pid: int) -> bool:
        """Whether PostgreSQL server process ``pid`` serves one of this replica's connections: a
        notification it sent is this replica's own, acted on already when its change committed."""
        return pid in self._backends.values()

    @asynccontextmanager
    async def read(self) -> AsyncIterator[Queries]:
        """Queries in one read transaction: a consistent snapshot, no lock taken.

        On SQLite a deferred ``BEGIN`` keeps the snapshot of the first read (WAL); on PostgreSQL
        the transaction is ``REPEATABLE READ``, so every statement sees the database as the first
        one did (read-only, it never fails for a concurrent write:
        https://www.postgresql.org/docs/current/transaction-iso.html#XACT-REPEATABLE-READ).
        """
        self._check_open()
        async with self._reaching(changes=False), self.engine.connect() as conn:
            conn = await conn.execution_options(broker_read=True, **_SNAPSHOT if self.postgres else {})
            async with conn.begin():
                yield Queries(conn, postgres=self.postgres)

    @asynccontextmanager
    async def write(self) -> AsyncIterator[Queries]:
        """One write transaction: committed when the block ends, rolled back on error."""
        self._check_open()
        if self.postgres:
            async with self._reaching(changes=True) as sent, self.engine.begin() as conn:
                yield Queries(conn, postgres=True)
                sent.append(True)  # committing: a failure from here on leaves the outcome unknown
            return
        async with self._write_lock:
            self._check_open()
            async with self._reaching(changes=True) as sent, self.engine.begin() as conn:
                yield Queries(conn, postgres=False)
                sent.append(True)

    @asynccontextmanager
    async def write_one(self) -> AsyncIterator[Queries]:
        """For a single statement (atomic by itself): no BEGIN/COMMIT round trips on SQLite."""
        self._check_open()
        if self.postgres:
            async with self._reaching(changes=True) as sent, self.engine.connect() as conn:
                conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
                sent.append(True)
                yield Queries(conn, postgres=True)
            return
        async with self._write_lock:
            self._check_open()
            # The driver runs without implicit transactions: the statement commits by itself.
            # Not committing here (nor rolling back: pool_reset_on_return=None) saves the round
            # trips of an empty BEGIN/COMMIT pair.
            async with self._reaching(changes=True) as sent, self.engine.connect() as conn:
                conn = await conn.execution_options(broker_single=True)
                raw = await conn.get_raw_connection()
                sent.append(True)
                yield Queries(conn, postgres=False, driver=raw.driver_connection)

    @asynccontextmanager
    async def _reaching(self, *, changes: bool) -> AsyncIterator[list[bool]]:
        """Turn a failure of the database itself into :class:`DatabaseUnavailable`, logged as one
        line: a database down for a while is an outage to report, not a bug to trace. The same
        failure again is logged at DEBUG only, until the database answers again (said at INFO).

        ``changes``: a write, which may have been made once the caller appended to the yielded
        list (committing a transaction, or sending a statement that commits by itself): the
        message then cannot promise that nothing changed.
        """
        sent: list[bool] = []
        try:
            yield sent
        except _UNAVAILABLE as err:
            why = failure_text(err, self.engine.url)
            if why == self._failing:
                log.debug("broker database %s failed again: %s", self.where, why)
            else:
                log.warning("broker database %s failed: %s", self.where, why)
            self._failing = why
            if changes and sent:
                done = (
                    "The change may or may not have been made: once the database is back, call "
                    "get_pipeline_status (or get_message_history) to see, before repeating it."
                )
            else:
                done = "Nothing was changed: call again in a moment."
            raise DatabaseUnavailable(
                "The broker's database could not serve this call right now (the gateway's log says why; if "
                f"it persists, an operator should look at it). {done}"
            ) from None
        if self._failing is not None:
            self._failing = None
            log.info("broker database %s answers again", self.where)

    async def ping(self, seconds: float) -> str | None:
        """None when the database answers ``SELECT 1`` within ``seconds``; else why not (``/readyz``)."""
        try:
            async with asyncio.timeout(seconds), self.engine.connect() as conn:
                await conn.execute(sa.text("SELECT 1"))
        except TimeoutError:
            return f"the broker database {self.where} did not answer within {seconds:g} s"
        except (*_UNAVAILABLE, sa.exc.DBAPIError) as err:
            return f"the broker database {self.where} failed: {failure_text(err, self.engine.url)}"
        return None

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


def _track_backends(engine: AsyncEngine, backends: dict[int, int]) -> None:
    """Keep ``backends`` (connection → server process id) in step with the engine's pool.

    The LISTEN connection skips the notifications these processes send (``Store.sent_here``).
    A process that ended while its connection idled in the pool stays listed until the pool finds
    out; were the server to give its id to another replica's connection meanwhile, that replica's
    signals would be missed here only until the waits' periodic re-check.
    """

    @sa.event.listens_for(engine.sync_engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        backends[id(dbapi_conn)] = dbapi_conn.driver_connection.info.backend_pid

    @sa.event.listens_for(engine.sync_engine, "close")
    def _close(dbapi_conn: Any, _record: Any) -> None:
        backends.pop(id(dbapi_conn), None)

    @sa.event.listens_for(engine.sync_engine, "close_detached")
    def _close_detached(dbapi_conn: Any) -> None:
        backends.pop(id(dbapi_conn), None)


def _read_revision(conn: sa.Connection) -> str | None:
    if not sa.inspect(conn).has_table("alembic_version"):
        return None
    # One row while the migrations have one branch (Alembic's own table; a test keeps HEAD in step).
    revision: str | None = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
    return revision


async def _run_migration_process(url: URL, where: str) -> None:
    """``gateway.broker.migrate`` in a child process, the URL on its stdin; its failure as our error.

    Raises:
        DatabaseUnusable: the child exited with 2 (a configuration problem).
        StoreError: any other failure; the message is the child's last line of stderr, with the
            database password removed.
    """
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _CHILD,
        *sys.path,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    secret = url.render_as_string(hide_password=False)
    try:
        _, err = await proc.communicate(secret.encode() + b"\n")
    except BaseException:  # cancelled (a stop during start): the child's transaction rolls back
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    text = without_password(err.decode(errors="replace"), url)
    lines = [line for line in text.splitlines() if line.strip()]
    if proc.returncode == 0:
        for line in lines:
            log.debug("migration: %s", line)
        return
    for line in lines[:-1]:
        log.debug("migration: %s", line)
    message = lines[-1] if lines else f"the migration process ended with status {proc.returncode}"
    if proc.returncode == 2:
        raise DatabaseUnusable(message)
    raise StoreError(message if proc.returncode == 1 else f"{where}: migration failed: {message}")
