"""Reaching the broker's database: which engine a ``broker.database_url`` means, and what to tell
the operator when it cannot be used.

Unset, the broker is the SQLite file ``<state_dir>/broker.db`` (aiosqlite). A ``postgresql://``
URL is PostgreSQL through psycopg 3. Start-up failures become :class:`DatabaseUnusable` with a
message that names the option and says what to do; the URL's password never appears in it. A
server that does not answer yet (connection refused, no route, DNS not ready: a database pod
still starting) is retried with a logged backoff for ``broker.connect_timeout_seconds``; wrong
credentials or a missing database are not, since waiting does not fix them.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote

import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url

from gateway import __version__
from gateway.broker.errors import BrokerError
from gateway.broker.migrations import HEAD
from gateway.observability.redaction import MIN_SECRET_LENGTH, REDACTED

if TYPE_CHECKING:
    from gateway.config import BrokerSettings

log = logging.getLogger(__name__)

OPTION = "broker.database_url (GATEWAY_BROKER__DATABASE_URL)"
#: First and longest pause between connection attempts at start, seconds.
RETRY_FIRST_SECONDS = 0.5
RETRY_MAX_SECONDS = 10.0
BUSY_TIMEOUT_SECONDS = 5.0


class StoreError(Exception):
    """The database cannot be used (newer schema, unreadable file, closed). The message says why."""


class DatabaseUnusable(StoreError):
    """A configuration problem found at start: the gateway exits with status 2."""


class DatabaseUnavailable(StoreError, BrokerError):
    """The database failed a call while the gateway runs (unreachable, connection lost, locked
    past the busy timeout, disk full): an ``upstream_error`` for the caller, who may try again
    once it is back. A :class:`StoreError` as well, so what catches those still does."""

    def __init__(self, message: str) -> None:
        BrokerError.__init__(self, "upstream_error", message)


def engine_url(database_url: str | None, state_dir: Path) -> URL:
    """The SQLAlchemy URL: ``sqlite+aiosqlite`` on ``<state_dir>/broker.db`` (an absolute path,
    as the start-up line names it), or ``postgresql+psycopg``."""
    if database_url is None:
        return URL.create("sqlite+aiosqlite", database=str((state_dir / "broker.db").absolute()))
    url = make_url(database_url)
    return url.set(drivername="postgresql+psycopg")


#: Who holds a connection: a gateway serving, or a command line (``broker``, ``database``).
Role = Literal["gateway", "cli"]
#: The start of every ``application_name`` this project's connections give PostgreSQL.
APPLICATION = "gitlab-mcp-gateway/"


def application_name(role: Role) -> str:
    """``gitlab-mcp-gateway/0.2.0 gateway schema 0008``: what ``pg_stat_activity`` shows of a
    connection (``gateway.cli.schema`` reads it to tell which gateways use a database)."""
    return f"{APPLICATION}{__version__} {role} schema {HEAD}"


def postgres_connect_args(url: URL, role: Role) -> dict[str, Any]:
    """psycopg's connection arguments: the ``application_name``, unless the URL sets its own."""
    return {} if "application_name" in url.query else {"application_name": application_name(role)}


def shown_url(database_url: str) -> str:
    """The URL with its password masked (``--print-config``)."""
    try:
        return make_url(database_url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return "[REDACTED]"


def describe(url: URL) -> str:
    """``postgresql://user@host:port/db`` (never the password), for messages and logs."""
    if url.get_backend_name() == "sqlite":
        return f"SQLite file {url.database}"
    where = f"{url.host or 'localhost'}:{url.port or 5432}"
    return f"PostgreSQL {url.username + '@' if url.username else ''}{where}/{url.database or ''}"


def _sqlstate(err: BaseException) -> str | None:
    orig = getattr(err, "orig", None) or err
    state = getattr(orig, "sqlstate", None)
    return state if isinstance(state, str) else None


def failure_text(err: BaseException, url: URL) -> str:
    """What the database or its driver said, on one line, without ``url``'s password."""
    orig = getattr(err, "orig", None) or err
    return without_password(" ".join(str(orig).split()), url)[:300]


def without_password(text: str, url: URL) -> str:
    """``text`` with ``url``'s password removed, as it is and as written in a URL. A password
    shorter than the log redaction's minimum is removed only where a URL holds it (``:pw@``):
    replacing every ``e`` in a message would garble it and show the password all the same."""
    password = str(url.password or "")
    if not password:
        return text
    for form in dict.fromkeys((password, quote(password, safe=""))):
        if len(form) >= MIN_SECRET_LENGTH:
            text = text.replace(form, REDACTED)
        else:
            text = text.replace(f":{form}@", f":{REDACTED}@")
    return text


#: What the driver says of a URL option it refuses, or of an SSL mode the server does not offer:
#: no wait fixes either (an unknown query parameter is the driver's ProgrammingError, no SQLSTATE).
_SETTINGS_REFUSED = (
    "invalid uri query parameter",
    "invalid connection option",
    "invalid sslmode",
    "does not support ssl",
)


def classify(err: BaseException, url: URL) -> DatabaseUnusable | None:
    """A :class:`DatabaseUnusable` for a failure waiting cannot fix; None: worth retrying."""
    state = _sqlstate(err)
    reason = failure_text(err, url)
    lowered = reason.lower()
    where = describe(url)
    if (
        state in ("28P01", "28000")
        or "password authentication failed" in lowered
        or ("role" in lowered and "does not exist" in lowered)
        or "no password supplied" in lowered
    ):
        return DatabaseUnusable(
            f"{OPTION}: {where} refused the credentials ({reason}). Fix the user name and password in "
            "the URL (the Secret holding the DSN, in Kubernetes)."
        )
    if state == "3D000" or ("database" in lowered and "does not exist" in lowered):
        return DatabaseUnusable(
            f"{OPTION}: {where}: {reason}. Create the database (CREATE DATABASE ...) or name an existing one."
        )
    if state is not None and state[:2] in ("42", "0A", "22"):
        return DatabaseUnusable(f"{OPTION}: {where} cannot be used: {reason}")
    if (isinstance(err, sa.exc.ProgrammingError) and state is None) or any(
        words in lowered for words in _SETTINGS_REFUSED
    ):
        return DatabaseUnusable(
            f"{OPTION}: {where} cannot be used with the URL's options ({reason}). Fix or remove the "
            "option named (the part of the URL after '?', such as sslmode)."
        )
    return None


def refusal(err: sa.exc.DBAPIError, url: URL) -> StoreError:
    """What to tell the operator about a database that failed at start (not one still starting)."""
    if isinstance(err.orig, sqlite3.DatabaseError) or "not a database" in str(err):
        return StoreError(f"{url.database} cannot be used as the broker database: {err.orig}")
    return classify(err, url) or DatabaseUnusable(
        f"{OPTION}: {describe(url)} cannot be used: {failure_text(err, url)}"
    )


def sqlite_pragmas(engine: sa.Engine) -> None:
    """Per-connection pragmas, and transactions the code starts itself (``BEGIN IMMEDIATE`` to write).

    ``journal_mode=WAL`` (persistent in the file), ``busy_timeout``, ``synchronous=NORMAL``
    (durable across a process crash, ``kill -9`` included; the last commits may be lost on power
    loss), ``foreign_keys=ON`` (https://www.sqlite.org/pragma.html).
    """

    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        # No implicit transactions from the driver: "begin" below states each one.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_SECONDS * 1000)}")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        options = conn.get_execution_options()
        if options.get("broker_single", False):
            return  # one statement, atomic by itself (Store.write_one)
        conn.exec_driver_sql("BEGIN" if options.get("broker_read", False) else "BEGIN IMMEDIATE")


async def connect_with_retry(
    engine_connect: Callable[[], Awaitable[None]], url: URL, config: BrokerSettings
) -> None:
    """Try ``engine_connect()`` until it works, backing off while the server is not up yet.

    Raises:
        DatabaseUnusable: credentials or database wrong, or still unreachable after
            ``broker.connect_timeout_seconds``.
    """
    deadline = time.monotonic() + config.connect_timeout_seconds
    pause = RETRY_FIRST_SECONDS
    while True:
        try:
            await engine_connect()
            return
        except (sa.exc.DBAPIError, OSError) as err:
            fatal = classify(err, url)
            if fatal is not None:
                raise fatal from None
            left = deadline - time.monotonic()
            if left <= 0:
                raise DatabaseUnusable(
                    f"{OPTION}: cannot reach {describe(url)} after {config.connect_timeout_seconds:g} s "
                    f"({failure_text(err, url)}). Check the host and port, that PostgreSQL is running and "
                    "accepts connections from this gateway, or raise broker.connect_timeout_seconds."
                ) from None
            wait = min(pause, left)
            log.warning(
                "broker database %s is not reachable yet (%s); trying again in %.1f s",
                describe(url),
                failure_text(err, url),
                wait,
            )
            await asyncio.sleep(wait)
            pause = min(pause * 2, RETRY_MAX_SECONDS)
