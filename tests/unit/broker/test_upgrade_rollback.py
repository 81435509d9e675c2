"""An upgrade from the previous release and a rollback to it, as docs/operations.md ("Schema
migrations") tells an operator to do them, on SQLite and PostgreSQL: back up, upgrade, read the
broker with this release, roll back one revision at a time, restore the backup. Every plan,
message, archive, transition and activity line the previous release wrote is kept at each step.

The database is made as the previous release made it: migrated to that release's newest revision
(``gateway.broker.migrations.RELEASED``) and filled with rows in that schema; each earlier release's
schema is a start as well. Where the previous release's schema is this one's, the test starts one
revision back as well, so that an upgrade and a downgrade really run.
"""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from gateway.__main__ import main
from gateway.broker import migrate
from gateway.broker.database import engine_url
from gateway.broker.migrations import HEAD, RELEASED, REVISIONS

PREVIOUS_RELEASE, PREVIOUS_HEAD = list(RELEASED.items())[-1]
#: Where each run starts: every release's schema (the previous release's first of all), and the
#: revision before this one's when the previous release's schema is this one's.
STARTS = sorted({*RELEASED.values(), *([REVISIONS[-2]] if PREVIOUS_HEAD == HEAD else [])})
#: The tables whose rows an upgrade or a rollback must keep, with their key.
KEPT = {
    "pipeline": "id",
    "issues": "id",
    "plan": "id",
    "messages": "seq",
    "agents": "id",
    "transitions": "seq",
    "activity_log": "seq",
    "archived_pipelines": "generation",
    "archived_messages": "generation, seq",
    "archived_transitions": "generation, seq",
    "archived_activity_log": "generation, seq",
}
AT = "2026-03-01T10:00:00Z"


def _message(seq: int, recipient: str, *, issue: str | None, delivered: bool) -> dict[str, Any]:
    return {
        "seq": seq,
        "id": f"msg-{seq}",
        "sender": "pm",
        "recipient": recipient,
        "subject": "task",
        "body": json.dumps({"issue": issue, "text": f"message {seq}"}),
        "priority": 1,
        "reply_to": None,
        "thread_id": f"msg-{seq}",
        "created_at": AT,
        "delivered_at": AT if delivered else None,
        "delivery_attempts": 1 if delivered else 0,
        "issue": issue,
    }


#: What the previous release left: pipeline 2 developing phase 2 with its plan, queued and
#: delivered messages, and pipeline 1 archived after a stop, with its messages and log lines.
ROWS: dict[str, list[dict[str, Any]]] = {
    "pipeline": [
        {
            "id": 1,
            "state": "PHASE_DEVELOPING",
            "phase": 2,
            "updated_at": AT,
            "generation": 2,
            "auto_advance": 1,
        }
    ],
    "issues": [
        {"id": "JOP-1", "position": 0, "status": "done", "fail_count": 0},
        {"id": "JOP-2", "position": 1, "status": "in_progress", "fail_count": 1},
    ],
    "plan": [
        {
            "id": 1,
            "plan_id": "plan-7",
            "phases": json.dumps([{"phase": 1, "issues": ["JOP-1"]}, {"phase": 2, "issues": ["JOP-2"]}]),
            "cooldown_minutes": 5.0,
            "completed_phases": "[1]",
            "updated_at": AT,
        }
    ],
    "messages": [
        _message(1, "dev", issue="JOP-1", delivered=True),
        _message(2, "dev", issue="JOP-2", delivered=False),
        _message(3, "reviewer", issue=None, delivered=False),
    ],
    "agents": [
        {"id": "dev", "last_seen": AT, "acknowledges": 1},
        {"id": "pm", "last_seen": AT, "acknowledges": 0},
    ],
    "transitions": [
        {"seq": 1, "at": AT, "from_state": "IDLE", "to_state": "PHASE_DEVELOPING", "event": "start_phase"}
    ],
    "activity_log": [{"seq": 1, "name": "dev", "at": AT, "who": "dev", "text": "working on JOP-2"}],
    "archived_pipelines": [
        {
            "generation": 1,
            "archived_at": AT,
            "archived_by": "operator:alice",
            "final_state": "STOPPED",
            "snapshot": json.dumps({"pipeline": {"state": "STOPPED"}, "issues": [], "plan": None}),
        }
    ],
    "archived_messages": [{**_message(1, "dev", issue="OLD-1", delivered=True), "generation": 1}],
    "archived_transitions": [
        {"generation": 1, "seq": 1, "at": AT, "from_state": "IDLE", "to_state": "STOPPED", "event": "stop"}
    ],
    "archived_activity_log": [
        {"generation": 1, "seq": 1, "name": "pipeline", "at": AT, "who": "operator:alice", "text": "stopped"}
    ],
}


def _fill(url: sa.URL) -> None:
    """The rows above, each with the columns the database's schema has (none it lacks)."""
    engine = sa.create_engine(_sync(url), poolclass=sa.NullPool)
    try:
        with engine.begin() as conn:
            tables = sa.MetaData()
            tables.reflect(conn, only=list(KEPT))
            conn.execute(tables.tables["pipeline"].delete())  # the migrations' first row, replaced
            for name, rows in ROWS.items():
                table = tables.tables[name]
                conn.execute(table.insert(), [{k: v for k, v in row.items() if k in table.c} for row in rows])
    finally:
        engine.dispose()


def _rows(url: sa.URL, columns: dict[str, list[str]] | None = None) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the kept tables, in key order, with ``columns`` (by default all of them)."""
    engine = sa.create_engine(_sync(url), poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            tables = sa.MetaData()
            tables.reflect(conn, only=list(KEPT))
            found = {}
            for name, key in KEPT.items():
                table = tables.tables[name]
                names = columns[name] if columns else [c.name for c in table.c]
                order = ", ".join(key.split(", "))
                query = sa.select(*(table.c[n] for n in names)).order_by(sa.text(order))
                found[name] = [tuple(row) for row in conn.execute(query)]
            return found
    finally:
        engine.dispose()


def _columns(url: sa.URL) -> dict[str, list[str]]:
    engine = sa.create_engine(_sync(url), poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            inspector = sa.inspect(conn)
            return {name: [c["name"] for c in inspector.get_columns(name)] for name in KEPT}
    finally:
        engine.dispose()


def _revision(url: sa.URL) -> str:
    engine = sa.create_engine(_sync(url), poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            return str(conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar_one())
    finally:
        engine.dispose()


def _sync(url: sa.URL) -> sa.URL:
    return url.set(drivername="sqlite") if url.get_backend_name() == "sqlite" else url


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broker_database: str | None) -> Path:
    """The gateway's environment for the commands: its state folder, its database."""
    for name in list(os.environ):
        if name.startswith(("GATEWAY_", "GITLAB_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("GATEWAY_STATE_DIR", str(tmp_path / "state"))
    if broker_database is not None:
        monkeypatch.setenv("GATEWAY_BROKER__DATABASE_URL", broker_database)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    (tmp_path / "state").mkdir()
    return tmp_path


@pytest.mark.slow
@pytest.mark.spawns_process(reason="PostgreSQL's backup and restore are pg_dump and pg_restore")
@pytest.mark.parametrize("start", STARTS)
def test_upgrade_and_rollback_keep_every_plan_message_and_archive(
    start: str,
    environment: Path,
    broker_database: str | None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = engine_url(broker_database, environment / "state")
    assert migrate.upgrade(url, to=start) == (None, start)
    _fill(url)
    columns = _columns(url)  # the previous release's schema
    written = _rows(url, columns)
    assert sum(map(len, written.values())) == sum(map(len, ROWS.values()))

    # 1. Back up (the previous release still runs: the backup does not need it stopped).
    backup = environment / "before-upgrade.backup"
    code, out, err = _cli(capsys, "database", "backup", str(backup))
    assert code == 0, err
    assert out.startswith("backed up ") and str(backup) in out
    assert backup.stat().st_mode & 0o077 == 0  # the messages are nobody else's to read

    # 2. Upgrade, with the previous release's gateways stopped.
    code, out, err = _cli(capsys, "database", "upgrade")
    assert code == 0, err
    if start == HEAD:
        assert out.strip().endswith(f"already at {HEAD}, nothing to do"), out
    else:
        assert re.search(rf": migrated {start} → {HEAD} in [\d.]+ s$", out.strip()), out
    assert _rows(url, columns) == written
    # This release reads what the previous one wrote.
    code, out, err = _cli(capsys, "broker", "status", "--json")
    assert code == 0, err
    status = json.loads(out)
    assert (status["status"]["state"], status["generation"]) == ("PHASE_DEVELOPING", 2)
    assert status["plan"]["planId"] == "plan-7"
    assert [a["generation"] for a in status["archives"]] == [1]
    code, out, err = _cli(capsys, "broker", "history", "--json")
    assert code == 0, err
    assert sorted(m["messageId"] for m in json.loads(out)["messages"]) == ["msg-1", "msg-2", "msg-3"]
    code, out, err = _cli(capsys, "broker", "history", "--pipeline", "1", "--json")
    assert code == 0, err
    assert [m["body"]["issue"] for m in json.loads(out)["messages"]] == ["OLD-1"]

    # 3. Roll back to the previous schema, one revision at a time.
    while (revision := _revision(url)) != start:
        code, out, err = _cli(capsys, "database", "downgrade", "--yes")
        assert code == 0, err
        older = REVISIONS[REVISIONS.index(revision) - 1]
        assert f"downgraded {revision} → {older}" in out, out
        releases = [version for version, head in RELEASED.items() if head == older]
        said = f"gitlab-mcp-gateway {' and '.join(releases)} can start on it now"
        assert (said in out) == bool(releases), out
    assert _rows(url, columns) == written
    assert _columns(url) == columns

    # 4. Restore the backup (over the rolled-back database): the same rows again.
    code, out, err = _cli(capsys, "database", "restore", str(backup), "--yes")
    assert code == 0, err
    assert out.startswith(f"restored {backup} into ") and f"(broker schema revision {start})" in out
    assert _rows(url, columns) == written
