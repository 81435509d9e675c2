"""Bring the broker's database to the newest schema with Alembic, in a process of its own.

Alembic and the migration scripts are imported here only. The gateway reads the database's
revision itself at start (``gateway.broker.store``) and, when the database is new or behind,
runs :func:`main` in a short-lived child process (the same Python, the same ``sys.path``), with
the database URL on its standard input (never in its arguments or environment, where ``ps`` or
``/proc`` would show a password). Alembic's memory (about 10 MiB) goes away with the child
instead of staying in the gateway for its whole life. ``gitlab-mcp-gateway --migrate`` runs the
same upgrade in the foreground (a Kubernetes init container, a deployment step).

The upgrade runs in one transaction under a lock: ``BEGIN IMMEDIATE`` on SQLite (the gateway
also holds the state folder's lock file), a transaction-scoped advisory lock on PostgreSQL, so
replicas starting together migrate once and a failed migration changes nothing. A SQLite
database written before Alembic (``PRAGMA user_version`` 1) is taken as revision 0001 and
upgraded. A database whose revision this gateway does not know was written by a newer gateway
and is refused.

The child's exit status says how it went: 0 migrated (or nothing to do), 2 the database cannot
be used as configured (:class:`DatabaseUnusable`), 1 any other failure. On failure the last line
of its standard error is the message for the operator; the lines before it (a traceback of an
unexpected error) are details.
"""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy.engine import URL, make_url

from gateway.broker.database import (
    DatabaseUnusable,
    StoreError,
    describe,
    postgres_connect_args,
    refusal,
    sqlite_pragmas,
)
from gateway.broker.migrations import newer_refusal

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
#: ``pg_advisory_xact_lock`` key of the migration (any constant the gateway owns: "gmcpmig").
MIGRATION_LOCK = 0x676D63706D6967
#: The revision a pre-Alembic SQLite database (``PRAGMA user_version`` 1) is at.
LEGACY_REVISION = "0001"


def _config(conn: sa.Connection | None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = conn
    return cfg


def script_head() -> str | None:
    """The newest revision among the migration scripts, as Alembic reads them."""
    return ScriptDirectory.from_config(_config(None)).get_current_head()


def upgrade(url: URL, to: str = "head") -> tuple[str | None, str | None]:
    """Migrate the database at ``url`` (an engine URL of ``gateway.broker.database``) to the head
    (``to``: an older revision, for tests of later migrations and of upgrades from a release).

    Returns:
        The revision before and after (the same: nothing to do).

    Raises:
        DatabaseUnusable, StoreError: the message says why and what to do.
    """
    return _under_lock(url, lambda conn, before: command.upgrade(_config(conn), to))


def downgrade(url: URL) -> tuple[str | None, str | None]:
    """Roll the database at ``url`` back by one revision (its migration's ``downgrade()``), in one
    transaction under the migration lock.

    Returns:
        The revision before and after.

    Raises:
        DatabaseUnusable: no broker schema, or one newer than this install's (no script for it).
        StoreError: at the first revision (nothing older), or the downgrade failed (nothing changed).
    """
    where = describe(url)

    def step_down(conn: sa.Connection, before: str | None) -> None:
        if before is None:
            raise DatabaseUnusable(f"{where} has no broker schema: nothing to roll back")
        older = previous(before)
        if older is None:
            raise StoreError(
                f"{where} is at the first broker schema revision, {before}: nothing older to roll back to"
            )
        command.downgrade(_config(conn), older)

    return _under_lock(url, step_down)


def previous(revision: str) -> str | None:
    """The revision ``revision``'s migration starts from; None for the first one."""
    down = ScriptDirectory.from_config(_config(None)).get_revision(revision).down_revision
    return down if isinstance(down, str) else None


def described(revision: str) -> str:
    """What the migration to ``revision`` does: its script's first docstring line."""
    doc = ScriptDirectory.from_config(_config(None)).get_revision(revision).doc
    return " ".join(doc.split()).rstrip(".") if doc else revision


def _under_lock(
    url: URL, change: Callable[[sa.Connection, str | None], None]
) -> tuple[str | None, str | None]:
    """``change`` in one transaction under the migration lock; the revision before and after."""
    sync_url = url.set(drivername="sqlite") if url.get_backend_name() == "sqlite" else url
    postgres = sync_url.get_backend_name() == "postgresql"
    engine = sa.create_engine(
        sync_url, poolclass=sa.NullPool, connect_args=postgres_connect_args(url, "cli") if postgres else {}
    )
    if not postgres:
        sqlite_pragmas(engine)
    where = describe(url)
    before: str | None = None
    migrating = False
    try:
        with engine.connect() as conn, conn.begin():
            if postgres:
                conn.execute(sa.select(sa.func.pg_advisory_xact_lock(MIGRATION_LOCK)))
            before = _current(conn, where, postgres)
            migrating = True
            change(conn, before)
            after = MigrationContext.configure(conn).get_current_revision()
    except sa.exc.DBAPIError as err:
        if not migrating:  # reaching or reading the database
            raise refusal(err, url) from None
        raise StoreError(
            f"{where}: migrating the broker schema from revision {before or '(none)'} failed: "
            f"{' '.join(str(err.orig).split())[:300]}. Nothing was changed (the migration runs in "
            "one transaction)."
        ) from None
    finally:
        engine.dispose()
    return before, after


def _current(conn: sa.Connection, where: str, postgres: bool) -> str | None:
    """The database's revision, a pre-Alembic SQLite file stamped first; a newer one refused."""
    current = MigrationContext.configure(conn).get_current_revision()
    if current is None and not postgres and sa.inspect(conn).has_table("pipeline"):
        version = conn.exec_driver_sql("PRAGMA user_version").scalar_one()
        if version != 1:
            raise DatabaseUnusable(
                f"{where} has broker schema version {version}, newer than this gateway's: run a "
                "newer gateway, or move the file aside to start afresh"
            )
        command.stamp(_config(conn), LEGACY_REVISION)
        return LEGACY_REVISION
    if current is not None:
        script = ScriptDirectory.from_config(_config(conn))
        try:
            script.get_revision(current)
        except CommandError:
            raise DatabaseUnusable(newer_refusal(where, current, postgres=postgres)) from None
    return current


def main() -> int:
    """The child process: the URL on stdin, the exit status and stderr as the module docstring says."""
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    line = sys.stdin.readline().strip()
    if not line:
        print("no database URL on standard input", file=sys.stderr)
        return 1
    url = make_url(line)
    try:
        upgrade(url)
    except DatabaseUnusable as err:
        print(err, file=sys.stderr)
        return 2
    except StoreError as err:
        print(err, file=sys.stderr)
        return 1
    except Exception as err:  # a migration script's own failure: details first, the message last
        traceback.print_exc()
        text = " ".join(str(err).split())[:300]
        print(
            f"{describe(url)}: migrating the broker schema failed: {type(err).__name__}: {text}. "
            "Nothing was changed (the migration runs in one transaction).",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
