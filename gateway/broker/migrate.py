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
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy.engine import URL, make_url

from gateway.broker.database import (
    OPTION,
    DatabaseUnusable,
    StoreError,
    describe,
    refusal,
    sqlite_pragmas,
)

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
    (``to``: an older revision, for tests of later migrations).

    Returns:
        The revision before and after.

    Raises:
        DatabaseUnusable, StoreError: the message says why and what to do.
    """
    sync_url = url.set(drivername="sqlite") if url.get_backend_name() == "sqlite" else url
    engine = sa.create_engine(sync_url, poolclass=sa.NullPool)
    postgres = engine.dialect.name == "postgresql"
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
            command.upgrade(_config(conn), to)
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
            raise DatabaseUnusable(
                f"{where} has broker schema revision {current}, newer than this gateway's "
                f"{script.get_current_head()}: run the newer gateway that wrote it (or a later one)"
                + (
                    f"; {OPTION} names the database"
                    if postgres
                    else ", or move the file aside to start afresh"
                )
            ) from None
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
