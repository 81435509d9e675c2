"""Typed statements on one connection, the same for SQLite and PostgreSQL (SQLAlchemy Core).

Used inside ``Store.read`` / ``Store.write`` (``gateway.broker.store``). Row locks
(``FOR UPDATE``, ``FOR SHARE``, ``SKIP LOCKED``) render on PostgreSQL and are nothing on SQLite,
where every write transaction is ``BEGIN IMMEDIATE`` and so already alone.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.broker.machine import State
from gateway.broker.prepared import (
    ACKNOWLEDGE,
    CHANNEL,
    CLAIM,
    HOLD,
    MESSAGE_COLUMNS,
    QUEUE,
    QUEUE_AND_NOTIFY,
    Driver,
    run_prepared,
)
from gateway.broker.schema import activity_log, agents, issues, messages, pipeline, plan, transitions
from gateway.observability.logging import redact

RowLock = Literal["update", "share"] | None


@dataclass
class PipelineRow:
    """The single ``pipeline`` row. ``aa_deadline`` is Unix time (seconds)."""

    state: State
    phase: int | None
    fix_count: int
    auto_advance: bool
    aa_stage: str | None
    aa_deadline: float | None
    aa_next_phase: int | None
    human_origin: State | None
    human_reason: str | None
    human_by: str | None
    human_at: str | None
    stopped_by: str | None
    stopped_at: str | None


@dataclass
class IssueRow:
    """One issue of the current phase."""

    id: str
    position: int
    status: str
    fail_count: int


@dataclass
class PlanRow:
    """The phase plan: ``phases`` is ``[{"phase": int, "issues": [str]}]`` in plan order."""

    plan_id: str
    phases: list[dict[str, Any]]
    cooldown_minutes: float
    completed_phases: list[int] = field(default_factory=list)


@dataclass
class MessageRow:
    """One message, queued (``delivered_at`` None) or delivered."""

    seq: int
    id: str
    sender: str
    recipient: str
    subject: str
    body: dict[str, Any]
    priority: int
    reply_to: str | None
    thread_id: str
    created_at: str
    delivered_at: str | None
    delivery_attempts: int
    lease_token: str | None = None
    #: The recipient acknowledges its messages (as its row said when the message was claimed).
    acknowledges: bool = False
    #: Another free message of the recipient was queued behind this one when it was claimed.
    more: bool = True


_MESSAGE_COLUMNS = MESSAGE_COLUMNS

_PIPELINE_COLUMNS = (
    pipeline.c.state,
    pipeline.c.phase,
    pipeline.c.fix_count,
    pipeline.c.auto_advance,
    pipeline.c.aa_stage,
    pipeline.c.aa_deadline,
    pipeline.c.aa_next_phase,
    pipeline.c.human_origin,
    pipeline.c.human_reason,
    pipeline.c.human_by,
    pipeline.c.human_at,
    pipeline.c.stopped_by,
    pipeline.c.stopped_at,
)


def _message(r: Any) -> MessageRow:
    return MessageRow(
        seq=r.seq,
        id=r.id,
        sender=r.sender,
        recipient=r.recipient,
        subject=r.subject,
        body=json.loads(r.body),
        priority=r.priority,
        reply_to=r.reply_to,
        thread_id=r.thread_id,
        created_at=r.created_at,
        delivered_at=r.delivered_at,
        delivery_attempts=r.delivery_attempts,
        lease_token=r.lease_token,
    )


def _pipeline(r: Any) -> PipelineRow:
    return PipelineRow(
        state=State(r.state),
        phase=r.phase,
        fix_count=r.fix_count,
        auto_advance=bool(r.auto_advance),
        aa_stage=r.aa_stage,
        aa_deadline=r.aa_deadline,
        aa_next_phase=r.aa_next_phase,
        human_origin=State(r.human_origin) if r.human_origin else None,
        human_reason=r.human_reason,
        human_by=r.human_by,
        human_at=r.human_at,
        stopped_by=r.stopped_by,
        stopped_at=r.stopped_at,
    )


def issue_key(body: Mapping[str, Any]) -> str | None:
    """``body.issue`` as the history filter compares it (SQLite's ``CAST(json_extract(..) AS TEXT)``)."""
    value = body.get("issue")
    if value is None:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, str | int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class Queries:
    """The broker's statements on one connection (a transaction the caller opened)."""

    def __init__(self, conn: AsyncConnection, *, postgres: bool, driver: Driver | None = None) -> None:
        self.conn = conn
        self.postgres = postgres
        #: The aiosqlite connection under ``conn`` for one-statement uses (``Store.write_one``).
        self._driver = driver

    # pipeline ---------------------------------------------------------------------------------

    async def pipeline(self, lock: RowLock = None) -> PipelineRow:
        """The pipeline row, optionally held: ``update`` (``FOR UPDATE``: a change that may move the
        state) or ``share`` (``FOR SHARE``: a change that only must not race a stop)."""
        stmt = sa.select(*_PIPELINE_COLUMNS).where(pipeline.c.id == 1)
        if lock == "update":
            stmt = stmt.with_for_update()
        elif lock == "share":
            stmt = stmt.with_for_update(read=True)
        return _pipeline((await self.conn.execute(stmt)).one())

    async def due_pipeline(self, now: float) -> PipelineRow | None:
        """The pipeline row, held, when an auto-advance stage is due at ``now`` and no other
        transaction holds the row (``FOR UPDATE SKIP LOCKED``); else None."""
        stmt = (
            sa.select(*_PIPELINE_COLUMNS)
            .where(pipeline.c.id == 1, pipeline.c.aa_stage.is_not(None), pipeline.c.aa_deadline <= now)
            .with_for_update(skip_locked=True)
        )
        r = (await self.conn.execute(stmt)).first()
        return _pipeline(r) if r is not None else None

    async def state(self) -> State:
        """The pipeline's state alone."""
        return State(
            (await self.conn.execute(sa.select(pipeline.c.state).where(pipeline.c.id == 1))).scalar_one()
        )

    async def update_pipeline(self, now: str, **values: Any) -> None:
        """Set the given columns of the pipeline row (names are the code's, never a caller's)."""
        if not values:
            return
        clean = {k: (v.value if isinstance(v, State) else v) for k, v in values.items()}
        await self.conn.execute(sa.update(pipeline).where(pipeline.c.id == 1).values(**clean, updated_at=now))

    async def record_transition(
        self, at: str, from_state: State, to_state: State, event: str, agent: str | None
    ) -> None:
        """Append to the ``transitions`` audit table."""
        await self.conn.execute(
            sa.insert(transitions).values(
                at=at, from_state=from_state.value, to_state=to_state.value, event=event, agent=agent
            )
        )

    # issues -----------------------------------------------------------------------------------

    async def issues(self) -> list[IssueRow]:
        """The current phase's issues in phase order."""
        rows = await self.conn.execute(
            sa.select(issues.c.id, issues.c.position, issues.c.status, issues.c.fail_count).order_by(
                issues.c.position
            )
        )
        return [IssueRow(r.id, r.position, r.status, r.fail_count) for r in rows]

    async def replace_issues(self, ids: Iterable[str]) -> None:
        """Drop the previous phase's issues and store ``ids``, all ``todo``."""
        await self.conn.execute(sa.delete(issues))
        rows = [
            {"id": issue, "position": i, "status": "todo", "fail_count": 0} for i, issue in enumerate(ids)
        ]
        if rows:
            await self.conn.execute(sa.insert(issues), rows)

    async def set_issue(
        self, issue: str, *, status: str | None = None, fail_count: int | None = None
    ) -> None:
        """Update one issue's status and/or fail count."""
        values: dict[str, Any] = {}
        if status is not None:
            values["status"] = status
        if fail_count is not None:
            values["fail_count"] = fail_count
        if values:
            await self.conn.execute(sa.update(issues).where(issues.c.id == issue).values(**values))

    async def reopen_issues(self) -> None:
        """Every issue back to ``todo``, the first ``in_progress``; fail counts kept."""
        await self.conn.execute(sa.update(issues).values(status="todo"))
        first = sa.select(sa.func.min(issues.c.position)).scalar_subquery()
        await self.conn.execute(
            sa.update(issues).where(issues.c.position == first).values(status="in_progress")
        )

    # plan -------------------------------------------------------------------------------------

    async def plan(self) -> PlanRow | None:
        """The phase plan, or None before ``set_phase_plan``."""
        r = (
            await self.conn.execute(
                sa.select(
                    plan.c.plan_id, plan.c.phases, plan.c.cooldown_minutes, plan.c.completed_phases
                ).where(plan.c.id == 1)
            )
        ).first()
        if r is None:
            return None
        return PlanRow(r.plan_id, json.loads(r.phases), r.cooldown_minutes, json.loads(r.completed_phases))

    async def save_plan(self, row: PlanRow, now: str) -> None:
        """Insert or replace the plan."""
        values = {
            "plan_id": row.plan_id,
            "phases": json.dumps(row.phases),
            "cooldown_minutes": row.cooldown_minutes,
            "completed_phases": json.dumps(row.completed_phases),
            "updated_at": now,
        }
        done = await self.conn.execute(sa.update(plan).where(plan.c.id == 1).values(**values))
        if done.rowcount == 0:
            await self.conn.execute(sa.insert(plan).values(id=1, **values))

    # messages ---------------------------------------------------------------------------------

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
        r = (await self.conn.execute(sa.select(*_MESSAGE_COLUMNS).where(messages.c.id == message_id))).first()
        return _message(r) if r else None

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
        row = _message(r)
        row.acknowledges = bool(r.acknowledges)
        row.more = bool(r.more)
        return row

    async def acknowledge(self, message_id: str, token: str, at: str) -> bool:
        """Take a delivered message off its queue, fenced by its lease token; False when that
        lease is no longer the message's (it was delivered, or leased again after running out)."""
        params = {"b_id": message_id, "token": token, "at": at}
        return bool(await run_prepared(self.conn, self._driver, ACKNOWLEDGE, params))

    async def hold_for_ack(self, message_id: str, token: str, until: float) -> bool:
        """Keep a written message leased until ``until``: it leaves its queue when the agent
        acknowledges it, and goes out again if that does not happen in time."""
        params = {"b_id": message_id, "token": token, "until": until}
        return bool(await run_prepared(self.conn, self._driver, HOLD, params))

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
        insert = postgresql.insert if self.postgres else sqlite.insert
        ins = insert(agents).values(id=agent, acknowledges=1)
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

    async def history(self, issue: str | None, limit: int) -> list[MessageRow]:
        """The ``limit`` newest messages (those whose ``body.issue`` is ``issue``, if given), oldest first."""
        stmt = sa.select(*_MESSAGE_COLUMNS).order_by(messages.c.seq.desc()).limit(limit)
        if issue is not None:
            stmt = stmt.where(messages.c.issue == issue)
        rows = list(await self.conn.execute(stmt))
        return [_message(r) for r in reversed(rows)]

    async def history_page(
        self, issue: str | None, before_seq: int | None, limit: int, item_chars: int
    ) -> list[tuple[MessageRow, str, int]]:
        """Up to ``limit`` messages older than ``before_seq`` (all, if None), newest first.

        Each as ``(row with an empty body, the body's JSON text cut to item_chars + 1 characters,
        the full text's length)``: a huge body never leaves the database whole.
        """
        columns = [c for c in _MESSAGE_COLUMNS if c is not messages.c.body]
        stmt = (
            sa.select(
                *columns,
                sa.literal("{}").label("body"),
                sa.func.substr(messages.c.body, 1, item_chars + 1).label("body_head"),
                sa.func.length(messages.c.body).label("body_length"),
            )
            .order_by(messages.c.seq.desc())
            .limit(limit)
        )
        if issue is not None:
            stmt = stmt.where(messages.c.issue == issue)
        if before_seq is not None:
            stmt = stmt.where(messages.c.seq < before_seq)
        rows = await self.conn.execute(stmt)
        return [(_message(r), r.body_head, r.body_length) for r in rows]

    # agents -----------------------------------------------------------------------------------

    async def last_seen(self) -> dict[str, str]:
        """Stored ``lastSeen`` per agent."""
        rows = await self.conn.execute(
            sa.select(agents.c.id, agents.c.last_seen).where(agents.c.last_seen.is_not(None))
        )
        return {r[0]: r[1] for r in rows}

    async def save_last_seen(self, seen: Mapping[str, str]) -> None:
        """Store ``lastSeen`` values; a later time already stored (another replica's) is kept.

        One statement for all agents (rows in one order everywhere: no deadlock between replicas).
        """
        if not seen:
            return
        insert = postgresql.insert if self.postgres else sqlite.insert
        ins = insert(agents)
        stmt = ins.on_conflict_do_update(
            index_elements=[agents.c.id],
            set_={"last_seen": ins.excluded.last_seen},
            where=sa.or_(agents.c.last_seen.is_(None), agents.c.last_seen < ins.excluded.last_seen),
        )
        await self.conn.execute(stmt, [{"id": a, "last_seen": at} for a, at in sorted(seen.items())])

    # activity logs ----------------------------------------------------------------------------

    async def append_log(self, lines: Iterable[tuple[str, str, str, str]]) -> None:
        """Append ``(name, at, who, text)`` lines to the activity logs, redacted as the gateway's
        own log lines are (an agent may paste a token into a line; it must not be stored)."""
        rows = [{"name": n, "at": at, "who": who, "text": redact(text)} for n, at, who, text in lines]
        if rows:
            await self.conn.execute(sa.insert(activity_log), rows)

    async def tail_log(self, name: str, lines: int) -> list[tuple[str, str, str]]:
        """The last ``lines`` ``(at, who, text)`` of log ``name``, oldest first."""
        rows = list(
            await self.conn.execute(
                sa.select(activity_log.c.at, activity_log.c.who, activity_log.c.text)
                .where(activity_log.c.name == name)
                .order_by(activity_log.c.seq.desc())
                .limit(lines)
            )
        )
        return [(r.at, r.who, r.text) for r in reversed(rows)]

    async def log_is_empty(self) -> bool:
        """No activity line stored yet (a database written before logs moved into it)."""
        return (await self.conn.execute(sa.select(activity_log.c.seq).limit(1))).first() is None

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

    async def prune_log(self, name: str, keep: int) -> None:
        """Keep only the newest ``keep`` lines of log ``name``."""
        cutoff = (
            sa.select(activity_log.c.seq)
            .where(activity_log.c.name == name)
            .order_by(activity_log.c.seq.desc())
            .offset(keep)
            .limit(1)
            .scalar_subquery()
        )
        await self.conn.execute(
            sa.delete(activity_log).where(activity_log.c.name == name, activity_log.c.seq <= cutoff)
        )
