"""Alembic migrations of the broker's database (SQLite, PostgreSQL), applied by ``gateway.broker.migrate``."""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path

#: The newest revision under ``versions/``. The gateway compares the database's revision with it
#: at start without loading Alembic; a test checks it against Alembic's own reading of the scripts,
#: so a new migration cannot be added without it.
HEAD = "0011"

#: Every revision this install has a script for, oldest first, read from the scripts' file names
#: (``versions/0008_task_input.py``) so that no list needs keeping; a test checks it against
#: Alembic's history.
REVISIONS: tuple[str, ...] = tuple(
    sorted(
        match.group(1)
        for path in (Path(__file__).resolve().parent / "versions").glob("*.py")
        if (match := re.fullmatch(r"(\d{4})_\w+\.py", path.name))
    )
)

#: The newest revision of each release before this install's, by version: what a rollback to
#: that release needs the database at (``gitlab-mcp-gateway database downgrade`` until then), and
#: what the upgrade test starts from. A release adds itself here in the next release.
RELEASED: dict[str, str] = {"0.1.0": "0008", "0.2.0": "0009"}


class Standing(Enum):
    """Where a database's revision stands against this install's :data:`HEAD`."""

    NEW = "new"  # no broker schema yet
    OLDER = "older"  # written by an older gateway: this one migrates it forward
    CURRENT = "current"
    NEWER = "newer"  # written by a newer gateway: this one has no script for it


def standing(revision: str | None) -> Standing:
    """How ``revision`` (None: a database Alembic never touched) compares with :data:`HEAD`."""
    if revision is None:
        return Standing.NEW
    if revision == HEAD:
        return Standing.CURRENT
    return Standing.OLDER if revision in REVISIONS else Standing.NEWER


def newer_refusal(where: str, revision: str, *, postgres: bool) -> str:
    """What to say of a database at ``revision``, newer than this install's :data:`HEAD`."""
    return (
        f"{where} has broker schema revision {revision}, newer than this gateway's {HEAD}: run the "
        "newer gateway that wrote it (or a later one), or roll the database back to "
        f"{HEAD} with that newer install's 'gitlab-mcp-gateway database downgrade'"
        + (
            "; broker.database_url (GATEWAY_BROKER__DATABASE_URL) names the database"
            if postgres
            else ", or move the file aside to start afresh"
        )
    )
