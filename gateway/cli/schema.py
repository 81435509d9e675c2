"""Where the broker database's schema stands for a command line, and who else uses the database.

The ``broker`` commands read and act without migrating: they say when the database is at another
revision than this install's (``gateway.broker.migrations.HEAD``) and refuse what they cannot do
safely. The ``database`` commands (``gateway.cli.database``) migrate, but only when no gateway of
another schema uses the database: on SQLite the gateway running on the state folder holds its lock
file (and migrated the database to its own newest revision when it started, so the database's
revision is that gateway's); on PostgreSQL every gateway from 0.2.0 on names itself and its schema
in ``pg_stat_activity.application_name`` (``gateway.broker.database.application_name``), and a
connection that names nothing may be an older gateway.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

from gateway.broker.database import APPLICATION, StoreError
from gateway.broker.migrations import HEAD, Standing, newer_refusal, standing
from gateway.broker.state_dir import StateDirInUse, lock_state_dir
from gateway.cli import remote

if TYPE_CHECKING:
    from gateway.broker.store import Store
    from gateway.config import Settings

#: The other sessions on the database (never this command's own), by ``application_name``.
#: Another role's sessions show their ``application_name`` to anyone, their ``backend_type`` only
#: to the role itself or ``pg_read_all_stats``, hence ``IS NULL``.
_SESSIONS = sa.text(
    "SELECT application_name, count(*) FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid() "
    "AND (backend_type = 'client backend' OR backend_type IS NULL) GROUP BY application_name"
)


@dataclass(frozen=True)
class Users:
    """Who else uses the database now (besides this command)."""

    #: SQLite: a gateway runs on the state folder (it holds the lock); None on PostgreSQL.
    folder_held: bool | None = None
    #: PostgreSQL: gateways' connections, by ``"<version> schema <revision>"``.
    gateways: dict[str, int] = field(default_factory=dict)
    #: PostgreSQL: connections that give no application name (as gateways before 0.2.0 do).
    unnamed: int = 0

    def older_or_unknown(self) -> str | None:
        """The gateways that may run on another schema than this install's, described; None: none."""
        parts = [
            f"{n} connection{'s' if n > 1 else ''} of gitlab-mcp-gateway {name}"
            for name, n in sorted(self.gateways.items())
            if not name.endswith(f"schema {HEAD}")
        ]
        if self.unnamed:
            parts.append(
                f"{self.unnamed} connection{'s' if self.unnamed > 1 else ''} giving no application name "
                "(gateways before 0.2.0 give none; pg_stat_activity shows where they come from)"
            )
        return "; ".join(parts) or None

    def any_gateway(self) -> str | None:
        """Every gateway that may use the database, described; None: none."""
        if self.folder_held:
            return "a gateway runs on the state folder (it holds its lock file)"
        parts = [
            f"{n} connection{'s' if n > 1 else ''} of gitlab-mcp-gateway {name}"
            for name, n in sorted(self.gateways.items())
        ]
        if self.unnamed:
            parts.append(
                f"{self.unnamed} connection{'s' if self.unnamed > 1 else ''} giving no application name"
            )
        return "; ".join(parts) or None


async def users(store: Store, settings: Settings) -> Users:
    """Who else uses the database ``store`` opened: see the module docstring."""
    if not store.postgres:
        return Users(folder_held=gateway_running(settings) is True)
    async with store.connection() as conn:
        rows = (await conn.execute(_SESSIONS)).all()
    gateways: dict[str, int] = {}
    unnamed = 0
    for name, n in rows:
        name = name or ""
        if not name:
            unnamed += n
        elif name.startswith(APPLICATION) and " gateway " in name:
            # "gitlab-mcp-gateway/0.2.0 gateway schema 0008" -> "0.2.0 schema 0008"
            key = name.removeprefix(APPLICATION).replace(" gateway ", " ", 1)
            gateways[key] = gateways.get(key, 0) + n
    return Users(gateways=gateways, unnamed=unnamed)


def gateway_running(settings: Settings) -> bool | None:
    """SQLite: whether a gateway runs on the state folder now (None on PostgreSQL: replicas may
    run anywhere). Asked of its operator socket, else of the folder's lock (taken and let go)."""
    if settings.broker.database_url is not None:
        return None
    state_dir = Path(settings.state_dir).resolve()
    if remote.answers(remote.socket_of(state_dir)):
        return True
    try:
        os.close(lock_state_dir(state_dir))
    except StateDirInUse:
        return True
    except StoreError:
        return None
    return False


def no_schema(where: str) -> str:
    return (
        f"{where} has no broker schema yet: start the gateway on it, or run "
        "'gitlab-mcp-gateway database upgrade' (--migrate) first"
    )


def reading_notice(store: Store) -> str | None:
    """What a command that reads without migrating says of a database at another revision
    (printed before reading); None at this install's revision.

    Raises:
        StoreError: no broker schema at all (nothing to read).
    """
    revision = store.revision
    found = standing(revision)
    if found is Standing.CURRENT:
        return None
    if found is Standing.NEW or revision is None:
        raise StoreError(no_schema(store.where))
    which = "older" if found is Standing.OLDER else "newer"
    return (
        f"note: {store.where} is at broker schema revision {revision}, {which} than this install's "
        f"{HEAD} (written by a gateway {which} than this command); reading it as it is, "
        "nothing migrated"
    )


def unreadable(store: Store) -> str:
    """Why a read of a database at another revision failed, and what to do."""
    if standing(store.revision) is Standing.NEWER:
        return (
            f"{store.where} is at broker schema revision {store.revision}, which this install "
            f"(schema {HEAD}) cannot read: run the command from the newer gateway's install (in its "
            "container: kubectl exec / podman exec ... gitlab-mcp-gateway broker ...)"
        )
    return (
        f"{store.where} is at broker schema revision {store.revision}, which this install (schema "
        f"{HEAD}) cannot read: run the command from the older gateway's install, or upgrade the "
        "database first ('gitlab-mcp-gateway database upgrade', which refuses while an older "
        "gateway uses it)"
    )


def acting_refusal(store: Store) -> str | None:
    """Why a command that changes the broker refuses a database at another revision (None: it may
    act): writing rows shaped for another schema could break what the other gateway reads."""
    revision = store.revision
    found = standing(revision)
    if found is Standing.CURRENT:
        return None
    if found is Standing.NEW or revision is None:
        return no_schema(store.where)
    if found is Standing.NEWER:
        return newer_refusal(store.where, revision, postgres=store.postgres) + "; nothing was changed"
    return (
        f"{store.where} is at broker schema revision {revision}, older than this install's {HEAD}: "
        "act with the gateway's own install (its console, or its 'broker' command), or upgrade the "
        "database first ('gitlab-mcp-gateway database upgrade'); nothing was changed"
    )
