"""The store: migrations on both backends, an existing SQLite database kept, newer schemas refused,
Alembic loaded only in the short-lived migration process."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory
from pydantic import SecretStr
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from gateway.broker import migrate
from gateway.broker.database import engine_url, without_password
from gateway.broker.migrations import HEAD, RELEASED, REVISIONS
from gateway.broker.store import DatabaseUnusable, Store, StoreError
from gateway.config import BrokerSettings

#: The migration runs in a child process of its own (gateway.broker.migrate): its tests start one.
MIGRATES = pytest.mark.spawns_process(reason="tests the migration, which runs in a process of its own")

#: The schema the SQLite store had before migrations moved to Alembic (``PRAGMA user_version`` 1).
LEGACY_SCHEMA = """
CREATE TABLE pipeline (
    id INTEGER PRIMARY KEY CHECK (id = 1), state TEXT NOT NULL, phase INTEGER,
    fix_count INTEGER NOT NULL DEFAULT 0, auto_advance INTEGER NOT NULL DEFAULT 0,
    aa_stage TEXT CHECK (aa_stage IN ('cooldown', 'session_reset')), aa_deadline REAL, aa_next_phase INTEGER,
    human_origin TEXT, human_reason TEXT, human_by TEXT, human_at TEXT, stopped_by TEXT, stopped_at TEXT,
    updated_at TEXT NOT NULL);
INSERT INTO pipeline (id, state, phase, updated_at) VALUES (1, 'PHASE_DEVELOPING', 3, '2026-01-01T00:00:00Z');
CREATE TABLE issues (id TEXT PRIMARY KEY, position INTEGER NOT NULL UNIQUE,
    status TEXT NOT NULL CHECK (status IN ('todo', 'in_progress', 'done')),
    fail_count INTEGER NOT NULL DEFAULT 0);
INSERT INTO issues VALUES ('JOP-1', 0, 'in_progress', 2);
CREATE TABLE plan (id INTEGER PRIMARY KEY CHECK (id = 1), plan_id TEXT NOT NULL, phases TEXT NOT NULL,
    cooldown_minutes REAL NOT NULL, completed_phases TEXT NOT NULL DEFAULT '[]', updated_at TEXT NOT NULL);
CREATE TABLE messages (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, sender TEXT NOT NULL,
    recipient TEXT NOT NULL, subject TEXT NOT NULL, body TEXT NOT NULL, priority INTEGER NOT NULL,
    reply_to TEXT, thread_id TEXT NOT NULL, created_at TEXT NOT NULL, delivered_at TEXT,
    delivery_attempts INTEGER NOT NULL DEFAULT 0);
INSERT INTO messages (id, sender, recipient, subject, body, priority, thread_id, created_at)
    VALUES ('msg-old', 'pm', 'dev', 'hello', '{"issue": 7}', 1, 'msg-old', '2026-01-01T00:00:00Z');
CREATE INDEX messages_queue ON messages (recipient, priority, seq) WHERE delivered_at IS NULL;
CREATE TABLE agents (id TEXT PRIMARY KEY, last_seen TEXT);
CREATE TABLE transitions (seq INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, from_state TEXT NOT NULL,
    to_state TEXT NOT NULL, event TEXT NOT NULL, agent TEXT);
PRAGMA user_version = 1;
"""


def config(url: str | None) -> BrokerSettings:
    return BrokerSettings(database_url=SecretStr(url) if url else None, connect_timeout_seconds=1)


@asynccontextmanager
async def _store_session(url: sa.URL) -> AsyncIterator[AsyncConnection]:
    """A plain connection to the database, committed at the end (to set up a test's schema)."""
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            yield conn
    finally:
        await engine.dispose()


@MIGRATES
async def test_fresh_database_is_at_head_and_reopens(tmp_path: Path, broker_database: str | None) -> None:
    store = await Store.open(config(broker_database), tmp_path)
    try:
        assert await store.schema_revision() == HEAD
        async with store.read() as q:
            assert (await q.pipeline()).state.value == "IDLE"
        if not store.postgres:
            async with store.connection() as conn:
                assert (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar() == "wal"
                assert (await conn.exec_driver_sql("PRAGMA synchronous")).scalar() == 1  # NORMAL
    finally:
        await store.close()
    store = await Store.open(config(broker_database), tmp_path)  # nothing migrated twice
    assert await store.schema_revision() == HEAD
    await store.close()


@MIGRATES
async def test_a_new_sqlite_file_is_private_and_named_by_its_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = await Store.open(config(None), Path(".pipeline"))  # relative, as scripts/run's default
    try:
        # The start-up line names the file wherever the gateway was started from.
        assert store.where == f"SQLite file {tmp_path / '.pipeline' / 'broker.db'}"
        async with store.write() as q:
            await q.pipeline()
        files = sorted(f.name for f in (tmp_path / ".pipeline").glob("broker.db*"))
        assert files == ["broker.db", "broker.db-shm", "broker.db-wal"]
        # Every agent's messages: this user's only, the WAL and shared memory files too.
        modes = {name: (tmp_path / ".pipeline" / name).stat().st_mode & 0o777 for name in files}
        assert modes == dict.fromkeys(files, 0o600)
    finally:
        await store.close()


def test_head_is_the_newest_migration() -> None:
    """The revision the gateway compares with at start is the one Alembic finds in the scripts."""
    assert migrate.script_head() == HEAD
    script = ScriptDirectory.from_config(migrate._config(None))
    # The revisions the gateway knows without loading Alembic, oldest first, are Alembic's.
    assert tuple(reversed([s.revision for s in script.walk_revisions()])) == REVISIONS
    assert set(RELEASED.values()) <= set(REVISIONS)


#: Opens the store twice on one database (the URL on stdin, None for SQLite in argv[1]) and says
#: how many migration processes ran and whether this process ever loaded Alembic.
OPEN_TWICE = """
import asyncio, json, sys
from pathlib import Path
from pydantic import SecretStr
from gateway.broker import store
from gateway.config import BrokerSettings

url = sys.stdin.readline().strip() or None
settings = BrokerSettings(database_url=SecretStr(url) if url else None, connect_timeout_seconds=5)
children = []
real = store._run_migration_process

async def counted(*args):
    children.append(1)
    await real(*args)

store._run_migration_process = counted

async def main():
    revisions = []
    for _ in range(2):
        s = await store.Store.open(settings, Path(sys.argv[1]))
        revisions.append(await s.schema_revision())
        await s.close()
    return revisions

revisions = asyncio.run(main())
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "alembic")
print(json.dumps({"children": len(children), "revisions": revisions, "alembic": loaded}))
"""


@pytest.mark.spawns_process(reason="runs the gateway's store in a process of its own, to see what it loads")
def test_alembic_never_loads_in_the_gateway(tmp_path: Path, broker_database: str | None) -> None:
    """A new database is migrated by a child process; a database at the head needs none."""
    done = subprocess.run(
        [sys.executable, "-c", OPEN_TWICE, str(tmp_path)],
        input=(broker_database or "") + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(done.stdout) == {"children": 1, "revisions": [HEAD, HEAD], "alembic": []}


@MIGRATES
async def test_database_behind_is_upgraded(
    tmp_path: Path, broker_database: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    url = engine_url(broker_database, tmp_path)
    assert migrate.upgrade(url, to="0002") == (None, "0002")
    async with _store_session(url) as conn:
        await conn.exec_driver_sql(
            "INSERT INTO agents (id, last_seen) VALUES ('dev', '2026-01-01T00:00:00Z')"
        )
    caplog.set_level("INFO", logger="gateway.broker.store")
    store = await Store.open(config(broker_database), tmp_path)
    try:
        assert await store.schema_revision() == HEAD
        async with store.connection() as conn:
            rows = (await conn.exec_driver_sql("SELECT id, acknowledges FROM agents")).all()
        assert [tuple(r) for r in rows] == [("dev", 0)]  # the column 0003 adds, on the row kept
    finally:
        await store.close()
    said = [r.getMessage() for r in caplog.records]
    assert any(f"is at schema revision 0002; migrating it to {HEAD}" in line for line in said), said
    assert any(
        re.search(rf"migrated from schema revision 0002 to {HEAD} in [\d.]+ s$", line) for line in said
    )
    caplog.clear()
    await (await Store.open(config(broker_database), tmp_path)).close()
    said = [r.getMessage() for r in caplog.records if r.name == "gateway.broker.store"]
    assert [line.split(" is at ")[1] for line in said] == [f"schema revision {HEAD}, this version's newest"]


@MIGRATES
async def test_failed_migration_is_one_clear_error(tmp_path: Path, broker_database: str | None) -> None:
    """A migration that fails (here 0003 meets a column someone added by hand) stops the start
    with what failed and where, and leaves the database as it was."""
    url = engine_url(broker_database, tmp_path)
    migrate.upgrade(url, to="0002")
    async with _store_session(url) as conn:
        await conn.exec_driver_sql("ALTER TABLE agents ADD COLUMN acknowledges INTEGER")
    with pytest.raises(StoreError) as caught:
        await Store.open(config(broker_database), tmp_path)
    text = str(caught.value)
    assert "migrating the broker schema from revision 0002 failed" in text, text
    assert "acknowledges" in text and "Nothing was changed" in text
    assert "Traceback" not in text and "\n" not in text
    assert "test-password-1f3a" not in text
    assert migrate.upgrade(url, to="0002") == ("0002", "0002")  # still at 0002


@MIGRATES
async def test_replicas_starting_together_migrate_once(tmp_path: Path, postgres_url: str) -> None:
    stores = await asyncio.gather(*(Store.open(config(postgres_url), tmp_path) for _ in range(3)))
    try:
        assert {await s.schema_revision() for s in stores} == {HEAD}
    finally:
        for s in stores:
            await s.close()


@MIGRATES
async def test_existing_sqlite_database_is_migrated_with_nothing_lost(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "broker.db") as db:
        db.executescript(LEGACY_SCHEMA)
    store = await Store.open(config(None), tmp_path)
    try:
        assert await store.schema_revision() == HEAD
        async with store.read() as q:
            p = await q.pipeline()
            assert (p.state.value, p.phase) == ("PHASE_DEVELOPING", 3)
            assert [(i.id, i.status, i.fail_count) for i in await q.issues()] == [("JOP-1", "in_progress", 2)]
            # the history filter on body.issue works for messages written before the migration
            assert [m.id for m in await q.history("7", 10)] == ["msg-old"]
        async with store.write() as q:
            claimed = await q.claim("dev", 0.0, 30)
            assert claimed is not None and claimed.id == "msg-old" and claimed.delivery_attempts == 1
    finally:
        await store.close()


async def test_newer_schema_is_refused(
    tmp_path: Path, broker_database_at_head: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    store = await Store.open(config(broker_database_at_head), tmp_path / "state")
    async with store.write() as q:
        await q.conn.exec_driver_sql("UPDATE alembic_version SET version_num = '9999'")
    await store.close()
    caplog.set_level("INFO", logger="gateway.broker.store")
    caplog.clear()
    with pytest.raises(DatabaseUnusable, match="schema revision 9999, newer than this gateway's") as caught:
        await Store.open(config(broker_database_at_head), tmp_path / "state")
    assert "database downgrade" in str(caught.value)  # how to roll it back, with the newer install
    # Refused before any migration, and no "migrating it to" an older revision said first.
    assert not [r.getMessage() for r in caplog.records if "schema revision" in r.getMessage()]
    # The migration process refuses it too (--migrate, or a start racing another replica's).
    with pytest.raises(DatabaseUnusable, match="schema revision 9999, newer than this gateway's"):
        migrate.upgrade(engine_url(broker_database_at_head, tmp_path / "state"))


@MIGRATES
async def test_newer_pre_alembic_sqlite_schema_is_refused(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "broker.db") as db:
        db.executescript(LEGACY_SCHEMA.replace("PRAGMA user_version = 1", "PRAGMA user_version = 5"))
    with pytest.raises(DatabaseUnusable, match="schema version 5, newer than this gateway's"):
        await Store.open(config(None), tmp_path)


async def test_not_a_database(tmp_path: Path) -> None:
    (tmp_path / "broker.db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="cannot be used as the broker database"):
        await Store.open(config(None), tmp_path)


async def test_failed_change_rolls_back(tmp_path: Path, broker_database_at_head: str | None) -> None:
    store = await Store.open(config(broker_database_at_head), tmp_path / "state")
    try:
        with pytest.raises(RuntimeError):
            async with store.write() as q:
                await q.replace_issues(["A", "B"])
                raise RuntimeError("boom")
        async with store.read() as q:
            assert await q.issues() == []
    finally:
        await store.close()


async def test_wrong_password_names_the_option_and_hides_the_password(
    tmp_path: Path, postgres_url: str
) -> None:
    wrong = postgres_url.replace("test-password-1f3a", "not-the-password-42")
    with pytest.raises(DatabaseUnusable) as caught:
        await Store.open(config(wrong), tmp_path)
    text = str(caught.value)
    assert "broker.database_url" in text and "refused the credentials" in text
    assert "not-the-password-42" not in text


async def test_missing_database_names_the_option(tmp_path: Path, postgres_url: str) -> None:
    missing = postgres_url.rsplit("/", 1)[0] + "/no_such_db"
    with pytest.raises(DatabaseUnusable, match=r"broker.database_url .*no_such_db.*Create the database"):
        await Store.open(config(missing), tmp_path)


async def test_unreachable_server_is_retried_then_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.e2e.harness import free_port

    url = f"postgresql://u:secret-pw-123@127.0.0.1:{free_port()}/db"
    with pytest.raises(DatabaseUnusable, match=r"cannot reach PostgreSQL u@127.0.0.1:\d+/db after 1 s"):
        await Store.open(config(url), tmp_path)
    retries = [r.getMessage() for r in caplog.records if "not reachable yet" in r.getMessage()]
    assert retries and all("secret-pw-123" not in r for r in retries)


async def test_sessions_the_server_ended_are_not_used_again(
    tmp_path: Path, postgres_url_at_head: str
) -> None:
    """PostgreSQL restarting or failing over ends every session: the next statements open new ones."""
    store = await Store.open(config(postgres_url_at_head), tmp_path)

    async def send(n: int) -> bool:
        async with store.write_one() as q:
            return await q.queue_if_running(
                id=f"msg-{n}", sender="pm", recipient="dev", subject="s", body={}, priority=1, created_at="t"
            )

    try:
        await asyncio.gather(*(send(n) for n in range(4)))  # several connections in the pool
        async with store.connection() as conn:
            ended = await conn.scalar(
                sa.text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )
            await conn.commit()
        assert ended is not None and ended >= 2
        await asyncio.sleep(0.2)  # the server's goodbye reaches the idle sockets
        assert [await send(n) for n in range(4, 10)] == [True] * 6
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("password", "message", "shown"),
    [
        # A password long enough to be told from ordinary text is removed wherever it appears.
        ("s3cr3t-pw", "auth failed for s3cr3t-pw", "auth failed for [REDACTED]"),
        ("p@ss word", "at postgresql://u:p%40ss%20word@h/db", "at postgresql://u:[REDACTED]@h/db"),
        # A short one only where a URL holds it: the rest of the message stays readable.
        (
            "e",
            "connection refused: is the server up? postgresql://u:e@h/db",
            "connection refused: is the server up? postgresql://u:[REDACTED]@h/db",
        ),
    ],
)
def test_database_errors_lose_the_password_and_nothing_else(password: str, message: str, shown: str) -> None:
    url = URL.create("postgresql+psycopg", username="u", password=password, host="h", database="db")
    assert without_password(message, url) == shown
