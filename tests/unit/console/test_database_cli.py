"""The broker database's schema beside running gateways: the ``broker`` commands never migrate
(they read another revision as it is, after a note, or refuse with what to do), and ``database
upgrade`` / ``--migrate`` / ``downgrade`` / ``backup`` / ``restore`` say what they did, or refuse
while gateways of another schema use the database, on SQLite and PostgreSQL."""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from gateway import __version__
from gateway.__main__ import main
from gateway.broker import migrate
from gateway.broker.database import application_name, engine_url
from gateway.broker.migrations import HEAD
from gateway.broker.state_dir import lock_state_dir


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broker_database: str | None) -> Path:
    """The gateway's environment for the commands: its state folder and database (not migrated)."""
    for name in list(os.environ):
        if name.startswith(("GATEWAY_", "GITLAB_")):
            monkeypatch.delenv(name)
    folder = tmp_path / "state"
    folder.mkdir()
    monkeypatch.setenv("GATEWAY_STATE_DIR", str(folder))
    if broker_database is not None:
        monkeypatch.setenv("GATEWAY_BROKER__DATABASE_URL", broker_database)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    return folder


@pytest.fixture
def url(state: Path, broker_database: str | None) -> sa.URL:
    return engine_url(broker_database, state)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def revision(url: sa.URL) -> str | None:
    sync = url.set(drivername="sqlite") if url.get_backend_name() == "sqlite" else url
    engine = sa.create_engine(sync, poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            return conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
    finally:
        engine.dispose()


def set_revision(url: sa.URL, value: str) -> None:
    sync = url.set(drivername="sqlite") if url.get_backend_name() == "sqlite" else url
    engine = sa.create_engine(sync, poolclass=sa.NullPool)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"UPDATE alembic_version SET version_num = '{value}'")
    finally:
        engine.dispose()


@pytest.fixture
def other_session(broker_database: str | None) -> Iterator[list[psycopg.Connection]]:
    """PostgreSQL sessions opened by the test as other gateways would, closed at the end."""
    sessions: list[psycopg.Connection] = []
    yield sessions
    for session in sessions:
        session.close()


def test_read_commands_never_migrate(url: sa.URL, capsys: pytest.CaptureFixture[str]) -> None:
    """An older gateway's database (0007) is read as it is, with a note, and stays at 0007; so is a
    newer one's, whatever its revision."""
    migrate.upgrade(url, to="0007")
    for command in (["status", "--json"], ["history"], ["log", "pipeline"]):
        code, _, err = run(capsys, "broker", *command)
        assert code == 0, err
        assert f"is at broker schema revision 0007, older than this install's {HEAD}" in err
        assert "nothing migrated" in err
    assert revision(url) == "0007"
    set_revision(url, "9999")
    code, out, err = run(capsys, "broker", "status", "--json")
    assert code == 0 and json.loads(out)["status"]["state"] == "IDLE"
    assert f"is at broker schema revision 9999, newer than this install's {HEAD}" in err
    assert revision(url) == "9999"


def test_a_schema_the_command_cannot_read_is_refused_with_what_to_do(
    url: sa.URL, capsys: pytest.CaptureFixture[str]
) -> None:
    migrate.upgrade(url, to="0003")  # before the pipelines' generations: status reads them
    code, out, err = run(capsys, "broker", "status")
    assert code == 1 and out == ""
    assert f"at broker schema revision 0003, which this install (schema {HEAD}) cannot read" in err
    assert "'gitlab-mcp-gateway database upgrade'" in err and "Traceback" not in err
    assert revision(url) == "0003"


@pytest.mark.parametrize("broker_backend", ["sqlite"], indirect=True)
def test_reading_what_an_older_schema_lacks_says_what_to_do_without_a_log_line(
    url: sa.URL, capsys: pytest.CaptureFixture[str]
) -> None:
    migrate.upgrade(url, to="0008")  # before the operator's confirmations
    code, out, err = run(capsys, "broker", "confirmations")
    assert code == 1 and out == ""
    assert "'gitlab-mcp-gateway database upgrade'" in err
    assert "no such table" not in err and "WARNING" not in err


def test_acting_on_another_schema_is_refused(url: sa.URL, capsys: pytest.CaptureFixture[str]) -> None:
    migrate.upgrade(url, to="0007")
    code, _, err = run(capsys, "broker", "stop", "--yes")
    assert code == 1 and "older than this install's" in err and "nothing was changed" in err
    assert revision(url) == "0007"
    code, out, _ = run(capsys, "broker", "status", "--json")
    assert json.loads(out)["status"]["state"] == "IDLE"


def test_upgrade_says_what_it_did(url: sa.URL, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--migrate")
    assert code == 0, err
    assert re.fullmatch(rf".+: migrated \(none: new\) → {HEAD} in [\d.]+ s\n", out), out
    code, out, err = run(capsys, "database", "upgrade")
    assert code == 0 and out.endswith(f": already at {HEAD}, nothing to do\n"), out
    code, out, _ = run(capsys, "database", "status")
    assert code == 0 and f"broker schema revision {HEAD}\n" in out and "the same: nothing to migrate" in out


def test_a_newer_schema_is_refused_with_what_to_do(url: sa.URL, capsys: pytest.CaptureFixture[str]) -> None:
    migrate.upgrade(url)
    set_revision(url, "9999")
    for command in (["--migrate"], ["database", "upgrade"]):
        code, out, err = run(capsys, *command)
        assert code == 2 and out == ""
        assert f"schema revision 9999, newer than this gateway's {HEAD}" in err and "migrating" not in err
    code, _, err = run(capsys, "database", "downgrade", "--yes")
    assert code == 1 and "with the newer install" in err
    assert revision(url) == "9999"


@pytest.mark.parametrize("broker_backend", ["sqlite"], indirect=True)
def test_upgrade_beside_an_older_gateway_is_refused(
    state: Path, url: sa.URL, capsys: pytest.CaptureFixture[str]
) -> None:
    """The gateway on the state folder holds its lock: at 0007, it is an older gateway."""
    migrate.upgrade(url, to="0007")
    fd = lock_state_dir(state)
    try:
        code, out, err = run(capsys, "--migrate")
        assert code == 1 and out == ""
        assert "older than this install's" in err and "that gateway is an older version" in err
        assert "Stop it, run this again, then start this version" in err
        assert revision(url) == "0007"
        code, _, err = run(capsys, "database", "downgrade", "--yes")
        assert code == 1 and "a gateway is running on the state folder" in err
        assert revision(url) == "0007"
        code, out, _ = run(capsys, "database", "status")
        assert code == 0 and "in use by: a gateway runs on the state folder" in out
    finally:
        os.close(fd)
    assert run(capsys, "--migrate")[0] == 0
    fd = lock_state_dir(state)
    try:
        code, out, _ = run(capsys, "--migrate")  # a gateway of this version: nothing to do
        assert code == 0 and f"already at {HEAD}, nothing to do (in use by: a gateway runs" in out
    finally:
        os.close(fd)


@pytest.mark.parametrize("broker_backend", ["postgresql"], indirect=True)
def test_upgrade_beside_older_replicas_is_refused(
    url: sa.URL,
    broker_database: str,
    other_session: list[psycopg.Connection],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Gateways before 0.2.0 give PostgreSQL no application name; later ones name their version and
    schema: either kind on an older schema stops the upgrade, --force overrides it."""
    migrate.upgrade(url, to="0007")
    other_session.append(psycopg.connect(broker_database))  # as gateway 0.1.0 connects
    code, _, err = run(capsys, "--migrate")
    assert code == 1 and "1 connection giving no application name (gateways before 0.2.0" in err
    assert "stop them (scale to 0)" in err and "database upgrade --force" in err
    other_session.pop().close()
    other_session.append(
        psycopg.connect(broker_database, application_name="gitlab-mcp-gateway/0.2.1 gateway schema 0007")
    )
    code, _, err = run(capsys, "database", "upgrade")
    assert code == 1 and "1 connection of gitlab-mcp-gateway 0.2.1 schema 0007" in err
    assert revision(url) == "0007"
    code, out, err = run(capsys, "database", "upgrade", "--force")
    assert code == 0 and f"migrated 0007 → {HEAD}" in out, err
    # This version's replicas use it now: rolling back under them is refused too.
    other_session.append(psycopg.connect(broker_database, application_name=application_name("gateway")))
    code, _, err = run(capsys, "database", "downgrade", "--yes")
    assert code == 1 and f"gitlab-mcp-gateway {__version__} schema {HEAD}" in err and "scale to 0" in err
    code, out, _ = run(capsys, "database", "status")
    assert f"1 connection of gitlab-mcp-gateway {__version__} schema {HEAD}" in out
    assert revision(url) == HEAD


def test_downgrade_goes_one_revision_back_and_asks_first(
    url: sa.URL, capsys: pytest.CaptureFixture[str]
) -> None:
    migrate.upgrade(url, to="0002")
    code, _, err = run(capsys, "database", "downgrade")
    assert code == 1 and "Roll " in err and "back from broker schema revision 0002 to 0001?" in err
    assert "Add --yes to confirm" in err and "database backup FILE" in err
    code, out, _ = run(capsys, "database", "downgrade", "--yes")
    assert code == 0 and out.rstrip().endswith(
        "downgraded 0002 → 0001; run 'database downgrade' again to go further back, one revision at a time"
    )
    code, _, err = run(capsys, "database", "downgrade", "--yes")
    assert code == 1 and "first broker schema revision, 0001: nothing older" in err


@pytest.mark.parametrize("broker_backend", ["sqlite"], indirect=True)
def test_backup_and_restore_refusals(
    state: Path, url: sa.URL, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    migrate.upgrade(url)
    taken = tmp_path / "taken.db"
    taken.write_text("keep me")
    code, _, err = run(capsys, "database", "backup", str(taken))
    assert code == 1 and "exists: give the name of a new file" in err and taken.read_text() == "keep me"
    code, _, err = run(capsys, "database", "restore", str(taken), "--yes")
    assert code == 1 and "not a SQLite broker backup" in err and "nothing was changed" in err
    backup = tmp_path / "good.db"
    fd = lock_state_dir(state)  # a running gateway: the backup is taken beside it, the restore refused
    try:
        assert run(capsys, "database", "backup", str(backup))[0] == 0
        code, _, err = run(capsys, "database", "restore", str(backup), "--yes")
        assert code == 1 and "a gateway is running on the state folder" in err
    finally:
        os.close(fd)
    code, _, err = run(capsys, "database", "restore", str(backup))
    assert code == 1 and "Add --yes to confirm" in err and "kept as" in err
    assert sorted(p.name for p in state.iterdir() if p.name.startswith("broker.db.")) == []


@pytest.mark.parametrize("broker_backend", ["sqlite"], indirect=True)
def test_a_refused_restore_into_a_new_folder_touches_nothing_and_asks_the_right_question(
    url: sa.URL, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    migrate.upgrade(url)
    backup = tmp_path / "good.db"
    assert run(capsys, "database", "backup", str(backup))[0] == 0
    fresh = tmp_path / "fresh"
    monkeypatch.setenv("GATEWAY_STATE_DIR", str(fresh))
    code, _, err = run(capsys, "database", "status")
    assert code == 1 and "no broker database in" in err
    assert "GATEWAY_STATE_DIR, or state_dir in --config" in err
    code, _, err = run(capsys, "database", "restore", str(backup))
    assert code == 1 and "nothing was changed" in err and "Add --yes to confirm" in err
    assert "Replace" not in err and "There is no broker database there yet" in err
    assert not fresh.exists()  # no folder, no lock file
    code, out, err = run(capsys, "database", "restore", str(backup), "--yes")
    assert code == 0 and "restored" in out and "kept as" not in out
    assert revision(engine_url(None, fresh)) == HEAD


@pytest.mark.parametrize("broker_backend", ["postgresql"], indirect=True)
def test_postgresql_backup_without_pg_dump_says_what_to_run(
    url: sa.URL, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # as in the container image: no PostgreSQL client there
    code, _, err = run(capsys, "database", "backup", str(tmp_path / "b.dump"))
    assert code == 1 and "pg_dump is not installed here (the container image has none)" in err
    assert (
        f"pg_dump --format=custom --no-owner --file={tmp_path / 'b.dump'}" in err
        and "test-password" not in err
    )
    assert not (tmp_path / "b.dump").exists()
