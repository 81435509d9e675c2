"""Statements on the message queues: queue, claim, deliver or give back, history, retention."""

from __future__ import annotations

import json
import secrets
from typing import Any

import sqlalchemy as sa

from gateway.broker.prepared import (
    ACKNOWLEDGE,
    CHANNEL,
    CLAIM,
    HOLD,
    HOLD_AND_NOTIFY,
    MESSAGE_COLUMNS,
    NEXT_LEASE_END,
    QUEUE,
    QUEUE_AND_NOTIFY,
    run_prepared,
)
from gateway.broker.queries.base import Statements
from gateway.broker.queries.rows import MessageRow, issue_key, message_row
from gateway.broker.schema import agents, archived_messages, messages


class MessageQueries(Statements):
    """The message queues' statements."""

    async def insert_message(
        self,
        *,
        id: str,
        sender: str,
        recipient: str,
        subject: str,
        body: dict[str, Any],
        priority: int,
        reply_to: str | None,
        thread_id: str,
        created_at: str,
    ) -> None:
        """Queue one message (and, on PostgreSQL, signal its recipient at commit: :meth:`notify`)."""
        await self.conn.execute(
            sa.insert(messages).values(
                id=id,
                sender=sender,
                recipient=recipient,
                subject=subject,
                body=json.dumps(body, ensure_ascii=False),
                priority=priority,
                reply_to=reply_to,
                thread_id=thread_id,
                created_at=created_at,
                issue=issue_key(body),
            )
        )

    async def queue_if_running(
        self,
        *,
        id: str,
        sender: str,
        recipient: str,
        subject: str,
        body: dict[str, Any],
        priority: int,
        created_at: str,
    ) -> bool:
        """Queue one message that starts its own thread, unless the pipeline is STOPPED; whether it
        was queued. One statement, atomic by itself: the pipeline row is read ``FOR SHARE`` (a
        stop committing meanwhile is waited for and then seen), and on PostgreSQL the recipient is
        signalled (:meth:`notify`) in the same statement."""
        params = {
            "id": id,
            "sender": sender,
            "recipient": recipient,
            "subject": subject,
            "body": json.dumps(body, ensure_ascii=False),
            "priority": priority,
            "created_at": created_at,
            "issue": issue_key(body),
        }
        stmt = QUEUE_AND_NOTIFY if self.postgres else QUEUE
        return bool(await run_prepared(self.conn, self._driver, stmt, params))

    async def notify(self, payload: str) -> None:
        """``pg_notify`` on the broker's channel, delivered at commit and dropped on rollback.

        A signal only (an agent id, ``*stop``, ``*timer``): listeners re-read the tables. Nothing
        on SQLite, where one process owns the database and wakes its waits itself.
        """
        if self.postgres:
            await self.conn.execute(sa.select(sa.func.pg_notify(CHANNEL, payload)))

    async def message(self, message_id: str) -> MessageRow | None:
        """One message by id, delivered or not."""
        r = (await self.conn.execute(sa.select(*MESSAGE_COLUMNS).where(messages.c.id == message_id))).first()
        return message_row(r) if r else None

    async def claim(self, recipient: str, now: float, lease_seconds: float) -> MessageRow | None:
        """Lease ``recipient``'s first free message (priority, then age) for ``lease_seconds``;
        nothing while the pipeline is STOPPED.

        Free: not delivered and not leased, or its lease ran out (a wait whose answer never
        reached the agent: it goes out again with the same id and one more attempt). Rows other
        transactions are claiming are skipped (``FOR UPDATE SKIP LOCKED``). One statement.
        """
        params = {
            "b_recipient": recipient,
            "now": now,
            "b_lease_until": now + lease_seconds,
            "b_lease_token": secrets.token_hex(8),
        }
        rows = await run_prepared(self.conn, self._driver, CLAIM, params)
        if not rows:
            return None
        r = rows[0]
        row = message_row(r)
        row.acknowledges = bool(r.acknowledges)
        row.more = bool(r.more)
        row.next_lease_end = r.next_lease_end
        return row

    async def next_lease_end(self, recipient: str) -> float | None:
        """When the first lease or acknowledgement hold of ``recipient``'s queued messages ends
        (Unix time, maybe past: that message is free again); None when none of them is leased."""
        rows = await run_prepared(self.conn, self._driver, NEXT_LEASE_END, {"b_recipient": recipient})
        end = rows[0].next_lease_end if rows else None
        return None if end is None else float(end)

    async def acknowledge(self, message_id: str, token: str, at: str) -> bool:
        """Take a delivered message off its queue, fenced by its lease token; False when that
        lease is no longer the message's (it was delivered, or leased again after running out)."""
        params = {"b_id": message_id, "token": token, "at": at}
        return bool(await run_prepared(self.conn, self._driver, ACKNOWLEDGE, params))

    async def hold_for_ack(self, message_id: str, token: str, until: float) -> bool:
        """Keep a written message leased until ``until``: it leaves its queue when the agent
        acknowledges it, and goes out again if that does not happen in time. On PostgreSQL its
        recipient is signalled in the same statement: another replica's wait that looked while
        the message was leased for its answer learns when it is free again."""
        params = {"b_id": message_id, "token": token, "until": until}
        stmt = HOLD_AND_NOTIFY if self.postgres else HOLD
        return bool(await run_prepared(self.conn, self._driver, stmt, params))

    async def acknowledge_ids(self, recipient: str, ids: list[str], at: str) -> int:
        """The agent processed these of its messages: off their queue; how many were still on it."""
        if not ids:
            return 0
        done = await self.conn.execute(
            sa.update(messages)
            .where(
                messages.c.id.in_(ids),
                messages.c.recipient == recipient,
                messages.c.delivered_at.is_(None),
            )
            .values(delivered_at=at, lease_until=None)
        )
        return int(done.rowcount or 0)

    async def set_acknowledges(self, agent: str) -> None:
        """Remember that ``agent`` acknowledges its messages (for good, on every replica)."""
        ins = self.insert(agents).values(id=agent, acknowledges=1)
        await self.conn.execute(
            ins.on_conflict_do_update(
                index_elements=[agents.c.id], set_={"acknowledges": 1}, where=agents.c.acknowledges == 0
            )
        )

    async def release_every_lease(self) -> int:
        """End every lease (SQLite at start: the process that held them is gone); how many."""
        done = await self.conn.execute(
            sa.update(messages)
            .where(messages.c.delivered_at.is_(None), messages.c.lease_until.is_not(None))
            .values(lease_until=None)
        )
        return int(done.rowcount or 0)

    async def release(self, message_id: str, token: str) -> bool:
        """End a lease without delivery (the answer never went out): free for the next wait."""
        done = await self.conn.execute(
            sa.update(messages)
            .where(
                messages.c.id == message_id,
                messages.c.lease_token == token,
                messages.c.delivered_at.is_(None),
            )
            .values(lease_until=None)
        )
        return done.rowcount == 1

    async def queue_depths(self) -> dict[str, int]:
        """Undelivered messages per recipient (leased ones included)."""
        rows = await self.conn.execute(
            sa.select(messages.c.recipient, sa.func.count())
            .where(messages.c.delivered_at.is_(None))
            .group_by(messages.c.recipient)
        )
        return {r[0]: r[1] for r in rows}

    async def latest_from(self, sender: str, recipient: str, since: str) -> MessageRow | None:
        """The newest message of ``sender`` to ``recipient`` created at ``since`` (ISO 8601 UTC)
        or later, or None."""
        stmt = (
            sa.select(*MESSAGE_COLUMNS)
            .where(messages.c.sender == sender, messages.c.recipient == recipient)
            .where(messages.c.created_at >= since)
            .order_by(messages.c.seq.desc())
            .limit(1)
        )
        row = (await self.conn.execute(stmt)).first()
        return message_row(row) if row is not None else None

    async def history(self, issue: str | None, limit: int) -> list[MessageRow]:
        """The ``limit`` newest messages (those whose ``body.issue`` is ``issue``, if given), oldest first."""
        stmt = sa.select(*MESSAGE_COLUMNS).order_by(messages.c.seq.desc()).limit(limit)
        if issue is not None:
            stmt = stmt.where(messages.c.issue == issue)
        rows = list(await self.conn.execute(stmt))
        return [message_row(r) for r in reversed(rows)]

    async def history_page(
        self,
        issue: str | None,
        before_seq: int | None,
        limit: int,
        item_chars: int,
        generation: int | None = None,
    ) -> list[tuple[MessageRow, str, int]]:
        """Up to ``limit`` messages older than ``before_seq`` (all, if None), newest first; of the
        archived pipeline ``generation`` when given (the live one's otherwise).

        Each as ``(row with an empty body, the body's JSON text cut to item_chars + 1 characters,
        the full text's length)``: a huge body never leaves the database whole.
        """
        table = messages if generation is None else archived_messages
        columns = [
            table.c[c.name] if c.name in table.c else sa.null().label(c.name)  # archives keep no lease
            for c in MESSAGE_COLUMNS
            if c is not messages.c.body
        ]
        stmt = (
            sa.select(
                *columns,
                sa.literal("{}").label("body"),
                sa.func.substr(table.c.body, 1, item_chars + 1).label("body_head"),
                sa.func.length(table.c.body).label("body_length"),
            )
            .order_by(table.c.seq.desc())
            .limit(limit)
        )
        if generation is not None:
            stmt = stmt.where(table.c.generation == generation)
        if issue is not None:
            stmt = stmt.where(table.c.issue == issue)
        if before_seq is not None:
            stmt = stmt.where(table.c.seq < before_seq)
        rows = await self.conn.execute(stmt)
        return [(message_row(r), r.body_head, r.body_length) for r in rows]

    async def purge_delivered(self, before: str, keep: int, batch: int) -> int:
        """Delete up to ``batch`` delivered messages, the oldest first, that were delivered before
        ``before`` (ISO time) or are older than the newest ``keep`` delivered ones; how many."""
        delivered = messages.c.delivered_at.is_not(None)
        newest_kept = (
            sa.select(messages.c.seq)
            .where(delivered)
            .order_by(messages.c.seq.desc())
            .offset(keep)
            .limit(1)
            .scalar_subquery()
        )
        victims = (
            sa.select(messages.c.seq)
            .where(delivered, sa.or_(messages.c.delivered_at < before, messages.c.seq <= newest_kept))
            .order_by(messages.c.seq)
            .limit(batch)
        )
        done = await self.conn.execute(sa.delete(messages).where(messages.c.seq.in_(victims)))
        return int(done.rowcount or 0)
