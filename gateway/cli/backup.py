"""``gitlab-mcp-gateway database backup FILE`` and ``database restore FILE``.

SQLite: Python's own ``sqlite3`` backup API (https://docs.python.org/3/library/sqlite3.html#sqlite3.Connection.backup),
so it works in the container image, which has no ``sqlite3`` program. A backup is a consistent
copy taken while gateways run (the file is in WAL mode: readers do not stop writers), written as
one self-contained file (journal mode DELETE), mode 0600, never over an existing file. A restore
needs the gateway stopped (this command takes the state folder's lock) and keeps the database it
replaces beside it (``broker.db.replaced-<UTC time>``).

PostgreSQL: ``pg_dump --format=custom`` and ``pg_restore --clean --single-transaction``, when
PostgreSQL's client programs are installed where the command runs (not in the container image:
run it from a machine that has them, of the server's major version or newer). The password goes
to them in a temporary password file (mode 0600), never in their arguments or environment.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy.engine import URL

from gateway.broker.database import describe, engine_url, without_password
from gateway.broker.migrations import HEAD, Standing, standing
from gateway.broker.state_dir import DB_FILE, LOCK_FILE, StateDirInUse, lock_state_dir
from gateway.cli import schema

if TYPE_CHECKING:
    from gateway.config import Settings

#: Asks a person to confirm a change (the question ends with what to do first); raises to refuse.
Confirm = Callable[[str], None]
#: What pg_dump and pg_restore are run with (https://www.postgresql.org/docs/current/app-pgdump.html,
#: https://www.postgresql.org/docs/current/app-pgrestore.html), and what the messages tell a person
#: to run when they are not installed; ``--dbname`` and ``--file`` are added with their values.
PG_DUMP_OPTIONS = ("--format=custom", "--no-owner")
PG_RESTORE_OPTIONS = ("--clean", "--if-exists", "--no-owner", "--single-transaction", "--exit-on-error")
#: The flags of those programs this module names (tests/unit/test_setting_names.py reads them).
PG_FLAGS = frozenset(
    option.split("=")[0] for option in (*PG_DUMP_OPTIONS, *PG_RESTORE_OPTIONS, "--file", "--dbname")
)
#: Seconds pg_dump and pg_restore may take: the broker's tables are small.
PG_TOOL_TIMEOUT_SECONDS = 600


class BackupError(Exception):
    """The backup or restore did not happen; the message says why and what to do."""


def backup(settings: Settings, file: Path) -> str:
    """Copy the configured broker database to ``file``; the line to print.

    Raises:
        BackupError: no database, ``file`` exists, or the copy failed (nothing left behind).
    """
    if file.exists():
        raise BackupError(f"{file} exists: give the name of a new file (a backup never overwrites one)")
    url = _url(settings)
    if url.get_backend_name() != "sqlite":
        return _pg_dump(url, file)
    source = _sqlite_file(settings)
    partial = file.with_name(f".{file.name}.partial")
    try:
        os.close(os.open(partial, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        revision = _sqlite_copy(source, partial)
        os.replace(partial, file)
    except (OSError, sqlite3.Error) as err:
        partial.unlink(missing_ok=True)
        raise BackupError(f"cannot back up {describe(url)} to {file}: {err}") from None
    return (
        f"backed up {describe(url)} (broker schema revision {revision}, {file.stat().st_size} bytes) to "
        f"{file}"
    )


def restore(settings: Settings, file: Path, *, confirmed: Confirm, force: bool = False) -> str:
    """Replace the configured broker database with the backup ``file``; the line to print.

    Raises:
        BackupError: ``file`` is not a broker backup, a gateway uses the database, or the copy failed.
    """
    if not file.is_file():
        raise BackupError(f"{file} is not a file: give a backup that 'database backup' wrote")
    url = _url(settings)
    if url.get_backend_name() != "sqlite":
        return _pg_restore(settings, url, file, confirmed=confirmed, force=force)
    revision = _backup_revision(file)
    state_dir = Path(settings.state_dir).resolve()
    target = state_dir / DB_FILE
    # A refusal touches nothing: without a lock file no gateway runs there, so the folder and its
    # lock are made only once the restore is confirmed.
    lock_fd = _lock(state_dir) if (state_dir / LOCK_FILE).exists() else None
    try:
        aside = target.with_name(f"{DB_FILE}.replaced-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
        if target.exists():
            confirmed(
                f"Replace {target} with {file} (broker schema revision {revision})? "
                f"The database it replaces is kept as {aside}."
            )
        else:
            confirmed(
                f"Restore {file} (broker schema revision {revision}) as {target}? "
                "There is no broker database there yet."
            )
        if lock_fd is None:
            lock_fd = _lock(state_dir)
        kept = f"; the database it replaced is kept as {aside}" if target.exists() else ""
        try:
            if target.exists():
                os.close(os.open(aside, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
                _sqlite_copy(target, aside)
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{target}{suffix}").unlink(missing_ok=True)
            os.close(os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            _sqlite_copy(file, target)
        except (OSError, sqlite3.Error) as err:
            raise BackupError(f"cannot restore {file} into {target}: {err}{kept}") from None
    finally:
        if lock_fd is not None:
            os.close(lock_fd)
    return (
        f"restored {file} into {describe(url)} (broker schema revision {revision}){kept}; {_next(revision)}"
    )


def _lock(state_dir: Path) -> int:
    try:
        return lock_state_dir(state_dir)
    except StateDirInUse:
        raise BackupError(
            f"a gateway is running on the state folder {state_dir} (it holds its lock file): stop it, "
            "restore, then start the release the backup's schema belongs to; nothing was changed"
        ) from None


def _next(revision: str | None) -> str:
    found = standing(revision)
    if found is Standing.CURRENT:
        return "this install's schema: start the gateway"
    if found is Standing.OLDER:
        return f"an older schema: start the release it belongs to, or this one (which migrates it to {HEAD})"
    return "a newer schema than this install's: start the release it belongs to"


def _url(settings: Settings) -> URL:
    raw = (
        settings.broker.database_url.get_secret_value() if settings.broker.database_url is not None else None
    )
    return engine_url(raw, Path(settings.state_dir).resolve())


def _sqlite_file(settings: Settings) -> Path:
    source = Path(settings.state_dir).resolve() / DB_FILE
    if not source.is_file():
        raise BackupError(
            f"no broker database in {source.parent} ({DB_FILE}): give the gateway's state folder "
            "(GATEWAY_STATE_DIR, or state_dir in --config)"
        )
    return source


def _sqlite_copy(source: Path, target: Path) -> str | None:
    """Copy ``source`` into the new, empty file ``target`` with SQLite's backup API; the copy's
    revision. The copy is checked (``PRAGMA integrity_check``) and left in journal mode DELETE:
    one file, no ``-wal`` beside it."""
    with _closing(sqlite3.connect(source, timeout=5)) as src, _closing(sqlite3.connect(target)) as dst:
        src.backup(dst)
        check = dst.execute("PRAGMA integrity_check").fetchone()[0]
        if check != "ok":
            raise sqlite3.DatabaseError(f"the copy fails its integrity check: {check}")
        dst.execute("PRAGMA journal_mode=DELETE")
        return _revision_of(dst)


def _backup_revision(file: Path) -> str | None:
    try:
        with _closing(sqlite3.connect(f"file:{file}?mode=ro", uri=True)) as db:
            tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "pipeline" not in tables:
                raise BackupError(f"{file} is a SQLite file but not a broker database: nothing was changed")
            return _revision_of(db)
    except sqlite3.DatabaseError as err:
        raise BackupError(f"{file} is not a SQLite broker backup ({err}): nothing was changed") from None


def _revision_of(db: sqlite3.Connection) -> str | None:
    try:
        row = db.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.OperationalError:  # written before the migrations moved to Alembic
        return None
    return str(row[0]) if row else None


class _closing:
    """``sqlite3.Connection`` as a context manager that closes it (its own only ends a transaction)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        return self.conn

    def __exit__(self, *exc: object) -> None:
        self.conn.close()


def _pg_tool(name: str, instead: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise BackupError(
            f"{name} is not installed here (the container image has none): {instead}, from a machine with "
            "PostgreSQL's client programs (of the server's major version or newer); docs/operations.md, "
            "'Schema migrations', gives the commands"
        )
    return found


def _pg_run(url: URL, args: list[str]) -> None:
    """Run a PostgreSQL client program on ``url``'s database, the password in a password file."""
    libpq = url.set(drivername="postgresql", password=None).render_as_string(hide_password=False)
    with tempfile.TemporaryDirectory(prefix="gateway-pg-") as folder:
        env = {k: v for k, v in os.environ.items() if k not in ("PGPASSWORD", "PGPASSFILE")}
        if url.password is not None:
            passfile = Path(folder) / "pgpass"
            fields = (url.host or "*", str(url.port or "*"), url.database or "*", url.username or "*")
            line = ":".join(_pgpass_escape(f) for f in (*fields, str(url.password)))
            passfile.touch(mode=0o600)
            passfile.write_text(line + "\n")
            env["PGPASSFILE"] = str(passfile)
        try:
            done = subprocess.run(  # noqa: S603 - a program found on PATH, arguments of our own
                [*args, "--dbname", libpq],
                capture_output=True,
                text=True,
                timeout=PG_TOOL_TIMEOUT_SECONDS,
                check=False,
                env=env,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise BackupError(f"{Path(args[0]).name} failed: {err}") from None
    if done.returncode != 0:
        lines = [line for line in without_password(done.stderr, url).splitlines() if line.strip()]
        raise BackupError(f"{Path(args[0]).name} failed: {lines[-1] if lines else done.returncode}")


def _pgpass_escape(field: str) -> str:
    return field.replace("\\", "\\\\").replace(":", "\\:")


def _pg_dump(url: URL, file: Path) -> str:
    pg_dump = _pg_tool("pg_dump", f"run pg_dump {' '.join(PG_DUMP_OPTIONS)} --file={file} --dbname=<the URL>")
    partial = file.with_name(f".{file.name}.partial")
    try:
        os.close(os.open(partial, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        _pg_run(url, [pg_dump, *PG_DUMP_OPTIONS, "--file", str(partial)])
        os.replace(partial, file)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return f"backed up {describe(url)} ({file.stat().st_size} bytes, pg_dump's custom format) to {file}"


def _pg_restore(settings: Settings, url: URL, file: Path, *, confirmed: Confirm, force: bool) -> str:
    pg_restore = _pg_tool(
        "pg_restore",
        f"run pg_restore {' '.join(PG_RESTORE_OPTIONS)} --dbname=<the URL> {file}",
    )
    using = asyncio.run(_pg_users(settings)).any_gateway()
    if using and not force:
        raise BackupError(
            f"{describe(url)} is in use: {using}. Stop the gateways (scale to 0), restore, then start "
            "the release the backup belongs to; if none of those connections is a gateway, add --force; "
            "nothing was changed"
        )
    confirmed(f"Replace the broker tables of {describe(url)} with {file}? What they hold now is dropped.")
    _pg_run(url, [pg_restore, *PG_RESTORE_OPTIONS, str(file)])
    revision = asyncio.run(_pg_revision(settings))
    return f"restored {file} into {describe(url)} (broker schema revision {revision}); {_next(revision)}"


async def _pg_users(settings: Settings) -> schema.Users:
    from gateway.broker.store import Store

    store = await Store.open(settings.broker, Path(settings.state_dir), migrate=False, role="cli")
    try:
        return await schema.users(store, settings)
    finally:
        await store.close()


async def _pg_revision(settings: Settings) -> str | None:
    from gateway.broker.store import Store

    store = await Store.open(settings.broker, Path(settings.state_dir), migrate=False, role="cli")
    await store.close()
    return store.revision
