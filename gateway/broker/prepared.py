"""The statements of the message path (send, claim, delivery) and of the ended-session lookup,
built once, and how they run.

Every message goes through three of them: queued (:data:`QUEUE`, on PostgreSQL :data:`QUEUE_AND_NOTIFY`
with its ``pg_notify``), claimed by a wait (:data:`CLAIM`), taken off its queue or held for an
acknowledgement (:data:`ACKNOWLEDGE`, :data:`HOLD`); a claim that finds nothing reads when the
queue's first lease ends (:data:`NEXT_LEASE_END`). Each is one statement, atomic by itself, so
it runs outside any explicit transaction (``Store.write_one``). Built once at import, they cost no
construction per message, and each is compiled once per dialect.

On PostgreSQL they run through SQLAlchemy as any statement (psycopg is asyncio-native). On SQLite,
aiosqlite runs the database in a thread of its own and every call into it is a hand-off to that
thread and back; SQLAlchemy's asyncio adapter makes five per statement (open a cursor, execute,
fetch, close, and the rollback ending its implicit transaction). :func:`run_prepared` hands the
SQL SQLAlchemy compiled to aiosqlite's ``execute_fetchall`` (values go to the driver as they are:
these statements bind only text and numbers, which need no type processing): one hand-off per statement
(https://aiosqlite.omnilib.dev/en/stable/api.html, https://docs.sqlalchemy.org/en/20/orm/extensions/asyncio.html
"Using awaitables-only driver methods").
"""

from __future__ import annotations

import sqlite3
from collections import namedtuple
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.broker.machine import State
from gateway.broker.schema import agents, messages, pipeline

#: PostgreSQL channel of the broker's wake-ups (``gateway.broker.wakeups``).
CHANNEL = "gateway_broker"

#: A message's columns as ``queries.MessageRow`` holds them.
MESSAGE_COLUMNS = (
    messages.c.seq,
    messages.c.id,
    messages.c.sender,
    messages.c.recipient,
    messages.c.subject,
    messages.c.body,
    messages.c.priority,
    messages.c.reply_to,
    messages.c.thread_id,
    messages.c.created_at,
    messages.c.delivered_at,
    messages.c.delivery_attempts,
    messages.c.lease_token,
)


class Driver(Protocol):
    """The part of an ``aiosqlite.Connection`` used here."""

    async def execute_fetchall(self, sql: str, parameters: Sequence[Any]) -> Any:
        """Execute ``sql`` and fetch every row, in one call into the database thread."""
        ...


def _queue_statements() -> tuple[sa.Insert, sa.Select[Any]]:
    names = ("id", "sender", "recipient", "subject", "body", "priority", "created_at", "issue")
    values = [sa.bindparam(n, type_=messages.c[n].type) for n in names]
    source = (
        sa.select(*values, sa.bindparam("id", type_=messages.c.thread_id.type))  # its own thread
        .where(pipeline.c.id == 1, pipeline.c.state != State.STOPPED.value)
        .with_for_update(read=True)
    )
    insert = sa.insert(messages).from_select([*names, "thread_id"], source).returning(messages.c.recipient)
    queued = insert.cte("queued")
    return insert, sa.select(sa.func.pg_notify(CHANNEL, queued.c.recipient))


def _claim_statement() -> sa.Update:
    running = sa.select(pipeline.c.id).where(pipeline.c.id == 1, pipeline.c.state != State.STOPPED.value)
    now = sa.bindparam("now", type_=sa.Float)
    recipient = sa.bindparam("b_recipient", type_=sa.Text)
    free = (
        messages.c.recipient == recipient,
        messages.c.delivered_at.is_(None),
        sa.or_(messages.c.lease_until.is_(None), messages.c.lease_until <= now),
    )
    # Read with the claim, so that the answer's delivery needs no look of its own.
    acknowledges = sa.select(agents.c.acknowledges).where(agents.c.id == recipient).scalar_subquery()
    # Whether another message waits behind this one: when not, the next look of this agent's
    # waits needs no round trip until something is sent to it (``Wakeups.looked_empty``).
    other = messages.alias("other")
    more = sa.exists().where(
        other.c.recipient == recipient,
        other.c.delivered_at.is_(None),
        sa.or_(other.c.lease_until.is_(None), other.c.lease_until <= now),
        # Spelled out: SQLite's RETURNING renders column names without their table.
        other.c.seq != sa.literal_column("messages.seq"),
    )
    # When none waits behind it: the earliest end of the agent's other leases and acknowledgement
    # holds, when that look's "nothing to claim" stops being true (``Wakeups.looked_empty``). Read
    # only then: the agent's other queued messages are all leased, a few.
    leased = messages.alias("leased")
    next_end = (
        sa.select(sa.func.min(leased.c.lease_until))
        .where(
            leased.c.recipient == recipient,
            leased.c.delivered_at.is_(None),
            leased.c.lease_until > now,
            leased.c.seq != sa.literal_column("messages.seq"),
        )
        .scalar_subquery()
    )
    first = (
        sa.select(messages.c.seq)
        .where(*free)
        .order_by(messages.c.priority, messages.c.seq)
        .limit(1)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    return (
        sa.update(messages)
        .where(messages.c.seq == first, running.exists())
        .values(
            lease_until=sa.bindparam("b_lease_until", type_=sa.Float),
            lease_token=sa.bindparam("b_lease_token", type_=sa.Text),
            delivery_attempts=messages.c.delivery_attempts + 1,
        )
        .returning(
            *MESSAGE_COLUMNS,
            acknowledges.label("acknowledges"),
            more.label("more"),
            sa.case((more, None), else_=next_end).label("next_lease_end"),
        )
    )


def _next_lease_end_statement() -> sa.Select[Any]:
    recipient = sa.bindparam("b_recipient", type_=sa.Text)
    return sa.select(sa.func.min(messages.c.lease_until).label("next_lease_end")).where(
        messages.c.recipient == recipient,
        messages.c.delivered_at.is_(None),
        messages.c.lease_until.is_not(None),
    )


def _leased_update(**values: sa.BindParameter[Any] | None) -> sa.Update:
    """An update of the message ``:b_id`` while the lease ``:token`` is still its own."""
    return (
        sa.update(messages)
        .where(
            messages.c.id == sa.bindparam("b_id", type_=sa.Text),
            messages.c.lease_token == sa.bindparam("token", type_=sa.Text),
            messages.c.delivered_at.is_(None),
        )
        .values(**values)
        .returning(messages.c.recipient)
    )


def _hold_statements() -> tuple[sa.Update, sa.Select[Any]]:
    hold = _leased_update(lease_until=sa.bindparam("until", type_=sa.Float))
    held = hold.cte("held")
    return hold, sa.select(sa.func.pg_notify(CHANNEL, held.c.recipient))


#: Queue ``:id`` (its own thread) unless the pipeline is STOPPED; returns its recipient.
QUEUE, QUEUE_AND_NOTIFY = _queue_statements()
#: Lease ``:b_recipient``'s first free message: its columns, ``acknowledges``, ``more``,
#: ``next_lease_end`` (None when ``more``).
CLAIM = _claim_statement()
#: When the first lease or acknowledgement hold of ``:b_recipient``'s queued messages ends (it
#: may have ended already: then one is free); None when none is leased.
NEXT_LEASE_END = _next_lease_end_statement()
#: Take the message off its queue (delivered at ``:at``).
ACKNOWLEDGE = _leased_update(delivered_at=sa.bindparam("at", type_=sa.Text), lease_until=None)
#: Keep the message leased until ``:until`` (waiting for the agent's acknowledgement); on
#: PostgreSQL the recipient is signalled too: the other replicas' waits that looked while the
#: message was leased for its answer learn when it will be free instead.
HOLD, HOLD_AND_NOTIFY = _hold_statements()


@dataclass(frozen=True)
class _Compiled:
    sql: str
    defaults: dict[str, Any]
    order: tuple[str, ...]
    row: Any


_compiled: dict[tuple[int, str], _Compiled] = {}


def _compile(stmt: sa.Insert | sa.Update | sa.Select[Any], dialect: Dialect) -> _Compiled:
    key = (id(stmt), dialect.name)
    found = _compiled.get(key)
    if found is None:
        compiled = stmt.compile(dialect=dialect)
        names = [str(c.key) for c in stmt.exported_columns]
        found = _compiled[key] = _Compiled(
            sql=compiled.string,
            defaults=dict(compiled.params),
            order=tuple(compiled.positiontup or ()),
            row=namedtuple("PreparedRow", names),
        )
    return found


async def run_prepared(
    conn: AsyncConnection, driver: Driver | None, stmt: sa.Executable, params: Mapping[str, Any]
) -> Sequence[Any]:
    """The rows ``stmt`` (one of this module's) returns, run on ``conn``, or with ``driver`` (the
    aiosqlite connection under ``conn``, outside any transaction) in one call into its thread.

    Raises:
        sqlalchemy.exc.DBAPIError: as SQLAlchemy raises it, whichever way the statement ran.
    """
    if driver is None or not isinstance(stmt, sa.Insert | sa.Update | sa.Select):
        return (await conn.execute(stmt, dict(params))).all()
    form = _compile(stmt, conn.dialect)
    values = {**form.defaults, **params}
    positional = [values[name] for name in form.order]
    try:
        rows = await driver.execute_fetchall(form.sql, positional)
    except sqlite3.Error as err:
        raise sa.exc.DBAPIError.instance(form.sql, positional, err, sqlite3.Error) from None
    return [form.row(*r) for r in rows]
