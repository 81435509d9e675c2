"""``gitlab-mcp-gateway database status | upgrade | downgrade | backup FILE | restore FILE``
(``--migrate`` is ``database upgrade``).

The broker database's schema and copies, beside or between gateways: upgrade to this install's
newest revision (what a gateway does at start), roll back one revision at a time (each migration's
``downgrade()``, run by the newer install, before starting an older release on the database), and
the backup and restore of ``gateway.cli.backup``. Alembic runs in this short-lived process.

A migration never runs under a gateway of another schema: on SQLite this command takes the state
folder's lock (a running gateway holds it); on PostgreSQL it looks at the database's other
sessions (``gateway.cli.schema.users``) and refuses while gateways of another schema, or
connections that name no application (as gateways before 0.2.0 do), are open, unless ``--force``.
The migration itself holds the migration lock (``gateway.broker.migrate``), so two runs, or a run
and a gateway starting, migrate once.

Exit status: 0 done (or nothing to do); 1 refused or failed, with one line saying why and what to
do; 2 a configuration error (the database cannot be reached as configured, or its schema is newer
than this install's for ``upgrade``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from gateway import REVISION, __version__
from gateway.broker.database import DatabaseUnusable, StoreError
from gateway.broker.migrations import HEAD, RELEASED, REVISIONS, Standing, newer_refusal, standing
from gateway.broker.state_dir import DB_FILE, StateDirInUse, lock_state_dir
from gateway.cli import backup, schema

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

    from gateway.config import Settings

PROG = "gitlab-mcp-gateway"


class Refused(StoreError):
    """The command will not run as asked; the message says why and what to do (exit status 1)."""


def run(
    args: argparse.Namespace, settings: Settings, *, out: TextIO | None = None, stdin: TextIO | None = None
) -> int:
    """Run one ``database`` command (``--migrate``: ``upgrade``); its exit status."""
    out = out or sys.stdout
    command: str = args.database_command
    try:
        if command == "backup":
            line = backup.backup(settings, args.file)
        elif command == "restore":
            line = backup.restore(settings, args.file, confirmed=_confirmation(args, stdin), force=args.force)
        else:
            line = asyncio.run(
                _run(command, settings, force=getattr(args, "force", False), args=args, stdin=stdin)
            )
    except DatabaseUnusable as err:
        print(f"{PROG}: configuration error: {err}", file=sys.stderr)
        return 2
    except (StoreError, backup.BackupError) as err:
        doing = "cannot migrate" if command == "upgrade" else f"database {command}"
        print(f"{PROG}: {doing}: {err}", file=sys.stderr)
        return 1
    print(line, file=out)
    return 0


def _confirmation(args: argparse.Namespace, stdin: TextIO | None) -> backup.Confirm:
    def confirm(question: str) -> None:
        if getattr(args, "yes", False):
            return
        source = stdin or sys.stdin
        if not source.isatty():
            raise Refused(f"{question} Add --yes to confirm (no terminal to ask on); nothing was changed.")
        print(f"{question} [y/N] ", end="", flush=True)
        if source.readline().strip().lower() not in ("y", "yes"):
            raise Refused("cancelled; nothing was changed")

    return confirm


async def _run(
    command: str, settings: Settings, *, force: bool, args: argparse.Namespace, stdin: TextIO | None
) -> str:
    from gateway.broker.store import Store

    state_dir = Path(settings.state_dir).resolve()  # noqa: ASYNC240 - a command line, before any task
    sqlite = settings.broker.database_url is None
    if sqlite and command != "upgrade" and not (state_dir / DB_FILE).exists():
        raise Refused(
            f"no broker database in {state_dir} ({DB_FILE}): give the gateway's state folder "
            "(GATEWAY_STATE_DIR, or state_dir in --config)"
        )
    lock_fd: int | None = None
    held = False
    if sqlite and command != "status":
        try:
            lock_fd = lock_state_dir(state_dir)
        except StateDirInUse:
            held = True
            if not (state_dir / DB_FILE).exists():
                raise Refused(
                    f"a gateway holds the state folder {state_dir} and no broker database is there yet "
                    "(it is starting, and creates it): nothing to do"
                ) from None
    try:
        store = await Store.open(settings.broker, state_dir, migrate=False, role="cli")
        try:
            # SQLite: the lock this command tried to take tells; status takes none and asks.
            asks = store.postgres or command == "status"
            users = await schema.users(store, settings) if asks else schema.Users(folder_held=held)
            where, revision, url = store.where, store.revision, store.engine.url
        finally:
            await store.close()
        if command == "status":
            return _status(where, revision, users)
        if command == "upgrade":
            return await _upgrade(where, revision, url, users, force=force)
        return await _downgrade(where, revision, url, users, force=force, confirm=_confirmation(args, stdin))
    finally:
        if lock_fd is not None:
            os.close(lock_fd)


def _status(where: str, revision: str | None, users: schema.Users) -> str:
    found = standing(revision)
    lines = [f"{where}: broker schema revision {revision or '(none)'}"]
    lines.append(f"this install: gitlab-mcp-gateway {__version__} (revision {REVISION}), schema {HEAD}")
    if found is Standing.CURRENT:
        lines.append("the same: nothing to migrate")
    elif found is Standing.NEW:
        lines.append("no broker schema yet: a gateway's first start (or 'database upgrade') creates it")
    elif found is Standing.OLDER:
        lines.append(f"older: 'database upgrade' migrates it to {HEAD} (with the older gateways stopped)")
    else:
        lines.append(
            "newer: this install cannot use it; the newer install's 'database downgrade' rolls it back"
        )
    lines.append(f"in use by: {users.any_gateway() or 'no gateway seen'}")
    return "\n".join(lines)


async def _upgrade(where: str, revision: str | None, url: URL, users: schema.Users, *, force: bool) -> str:
    from gateway.broker import migrate

    found = standing(revision)
    if found is Standing.NEWER:
        assert revision is not None
        raise DatabaseUnusable(newer_refusal(where, revision, postgres=url.get_backend_name() != "sqlite"))
    if found is Standing.CURRENT:
        using = users.any_gateway()
        return f"{where}: already at {HEAD}, nothing to do" + (f" (in use by: {using})" if using else "")
    if users.folder_held:
        raise Refused(
            f"{where} is at broker schema revision {revision}, older than this install's {HEAD}, and a "
            "gateway is running on its state folder (it holds the lock file): that gateway is an older "
            "version (it brought the database to its own newest revision when it started). Stop it, run "
            "this again, then start this version; nothing was changed"
        )
    blockers = users.older_or_unknown()
    if blockers and not force:
        raise Refused(
            f"{where} is at broker schema revision {revision}, older than this install's {HEAD}, and "
            f"may be in use by older gateways: {blockers}. A gateway keeps running on the schema it "
            "started with and an older one refuses a newer schema at its next start: stop them (scale "
            "to 0), run this again, then start this version. If none of those connections is a "
            "gateway, run 'gitlab-mcp-gateway database upgrade --force'; nothing was changed"
        )
    started = time.monotonic()
    before, after = await asyncio.to_thread(migrate.upgrade, url)
    if before == after:  # another process migrated it while this one waited for the lock
        return f"{where}: already at {after}, nothing to do"
    return f"{where}: migrated {before or '(none: new)'} → {after} in {time.monotonic() - started:.1f} s"


async def _downgrade(
    where: str,
    revision: str | None,
    url: URL,
    users: schema.Users,
    *,
    force: bool,
    confirm: backup.Confirm,
) -> str:
    from gateway.broker import migrate

    found = standing(revision)
    if found is Standing.NEW or revision is None:
        raise Refused(f"{where} has no broker schema: nothing to roll back")
    if found is Standing.NEWER:
        raise Refused(
            f"{where} is at broker schema revision {revision}, newer than this install's {HEAD}: this "
            "install has no script to roll it back; run 'database downgrade' with the newer install "
            "(its container image) that wrote it"
        )
    if revision == REVISIONS[0]:
        raise Refused(
            f"{where} is at the first broker schema revision, {revision}: nothing older to roll back to"
        )
    if users.folder_held:
        raise Refused(
            f"a gateway is running on the state folder of {where} (it holds the lock file): stop it "
            "first, roll back, then start the release you roll back to; nothing was changed"
        )
    using = users.any_gateway()
    if using and not force:
        raise Refused(
            f"{where} is in use: {using}. A gateway cannot run on a schema older than its own: stop "
            "them all (scale to 0) first. If none of those connections is a gateway, add --force; "
            "nothing was changed"
        )
    older = migrate.previous(revision)
    confirm(
        f"Roll {where} back from broker schema revision {revision} to {older}? What {revision} added is "
        f"dropped ({migrate.described(revision)}). Take a backup first: 'gitlab-mcp-gateway database "
        "backup FILE'."
    )
    before, after = await asyncio.to_thread(migrate.downgrade, url)
    releases = [version for version, head in RELEASED.items() if head == after]
    then = (
        f"gitlab-mcp-gateway {' and '.join(releases)} can start on it now"
        if releases
        else "run 'database downgrade' again to go further back, one revision at a time"
    )
    return f"{where}: downgraded {before} → {after}; {then}"
