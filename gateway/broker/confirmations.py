"""Confirmations of destructive actions, kept in the broker's database so that one answer acts
once on every replica and after a restart (``gateway.tools.confirmations`` asks; this keeps).

Two kinds of rows, one table (``confirmations``), each keyed by a SHA-256 of what it is bound to:

- **An answer** a client brought (``confirm_by = "client"``): bound to the sealed request state
  the answer came with. :meth:`ConfirmationStore.take` records a "yes" as ``taken`` in the same
  statement that decides to act (an insert on the primary key: of two replicas taking the same
  answer at once, one inserts, the other finds the row), :meth:`decline` records a "no" as
  ``declined``, which is final for that state (a later "yes" with it does not act), and
  :meth:`release` deletes a ``taken`` row whose action failed before GitLab accepted it, so the
  same answer may be sent again. A row is kept as long as its state could still be presented.
- **An approval** an operator gives (``confirm_by = "operator"``): bound to the caller, the tool
  and its arguments. :meth:`request` records it as ``pending`` with a ``ticket`` (what operators
  name it by), who asked, what would be done and why; :meth:`decide` (the console, the
  ``broker`` command line) moves it to ``approved`` or ``refused``; :meth:`take_approved` moves
  ``approved`` to ``taken`` just before acting (once), :meth:`finish` to ``done`` after, and
  :meth:`give_back` back to ``approved`` when the action failed before GitLab accepted it.

Every insert first deletes a bounded batch of expired rows (:data:`PRUNE_BATCH`), so the table
holds at most the rows of the last TTL: its size is the rate of confirmations times their TTL.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

import sqlalchemy as sa

from gateway.broker.errors import BrokerError
from gateway.broker.schema import confirmations
from gateway.broker.store import Store

#: Expired rows deleted per insert.
PRUNE_BATCH: Final = 100
#: The most pending approvals listed at once (the oldest first).
LIST_LIMIT: Final = 200

Taken = Literal["taken", "already_taken", "declined"]


def key_hash(value: str) -> str:
    """What the table keeps of a confirmation's binding."""
    return hashlib.sha256(value.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Approval:
    """An approval an operator is asked for (times in Unix seconds)."""

    ticket: str
    status: str
    agent: str | None
    tool: str | None
    what: str | None
    why: str | None
    created: float
    expires: float
    decided_by: str | None = None
    decided_at: float | None = None
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "ticket": self.ticket,
            "status": self.status,
            "agent": self.agent,
            "tool": self.tool,
            "what": self.what,
            "why": self.why,
            "created": self.created,
            "expires": self.expires,
            "decidedBy": self.decided_by,
            "decidedAt": self.decided_at,
            "note": self.note,
        }


class ConfirmationStore:
    """The shared record of confirmations.

    Args:
        store: the broker's database.
        clock: Unix seconds.

    Raises (every method):
        StoreError: the database cannot serve the call.
    """

    def __init__(self, store: Store, clock: Callable[[], float]) -> None:
        self._store = store
        self._clock = clock

    def _insert(self, values: dict[str, Any]) -> Any:
        # The dialect's module loads when first used: a gateway on SQLite never loads PostgreSQL's.
        if self._store.postgres:
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert  # type: ignore[assignment]
        # RETURNING says whether the row went in: a driver may not count the rows of an insert
        # that did nothing (psycopg answers -1).
        return (
            insert(confirmations)
            .values(**values)
            .on_conflict_do_nothing()
            .returning(confirmations.c.key_hash)
        )

    @staticmethod
    def _select(hashed: str, *columns: Any) -> sa.Select[Any]:
        return sa.select(*(columns or (confirmations,))).where(confirmations.c.key_hash == hashed)

    # -- answers a client brought -------------------------------------------------------------

    async def take(self, key: str, ttl_seconds: float) -> Taken:
        """Record the "yes" bound to ``key`` as taken, unless an answer with it was recorded
        before: ``taken`` (act now), ``already_taken`` (a "yes" with it acted or is acting),
        ``declined`` (a "no" with it came first)."""
        hashed = key_hash(key)
        now = self._clock()
        async with self._store.write() as q:
            await self._prune(q.conn, now)
            done = await q.conn.execute(
                self._insert(
                    {"key_hash": hashed, "status": "taken", "created": now, "expires": now + ttl_seconds}
                )
            )
            if done.first() is not None:
                return "taken"
            # An expired row the prune's batch did not reach yet counts as none.
            renewed = await q.conn.execute(
                sa.update(confirmations)
                .where(confirmations.c.key_hash == hashed, confirmations.c.expires <= now)
                .values(status="taken", created=now, expires=now + ttl_seconds)
            )
            if renewed.rowcount:
                return "taken"
            status = (
                await q.conn.execute(
                    sa.select(confirmations.c.status).where(confirmations.c.key_hash == hashed)
                )
            ).scalar_one_or_none()
        return "declined" if status == "declined" else "already_taken"

    async def decline(self, key: str, ttl_seconds: float) -> None:
        """Record the "no" bound to ``key``: a later "yes" with it does not act."""
        now = self._clock()
        async with self._store.write() as q:
            await self._prune(q.conn, now)
            await q.conn.execute(
                self._insert(
                    {
                        "key_hash": key_hash(key),
                        "status": "declined",
                        "created": now,
                        "expires": now + ttl_seconds,
                    }
                )
            )

    async def release(self, key: str) -> None:
        """Forget the taken "yes" bound to ``key`` (its action failed before GitLab accepted it):
        the same answer may be sent again."""
        async with self._store.write() as q:
            await q.conn.execute(
                sa.delete(confirmations).where(
                    confirmations.c.key_hash == key_hash(key), confirmations.c.status == "taken"
                )
            )

    # -- approvals an operator gives ----------------------------------------------------------

    async def request(
        self, key: str, *, agent: str | None, tool: str, what: str, why: str | None, ttl_seconds: float
    ) -> Approval:
        """The approval bound to ``key``: the one asked for already (pending, or decided and not
        acted on), else a new ``pending`` one (an approval ``done`` before is asked anew)."""
        hashed = key_hash(key)
        now = self._clock()
        values = {
            "key_hash": hashed,
            "status": "pending",
            "created": now,
            "expires": now + ttl_seconds,
            "ticket": secrets.token_hex(6),
            "agent": agent,
            "tool": tool,
            "what": what,
            "why": why,
            "decided_by": None,
            "decided_at": None,
            "note": None,
        }
        async with self._store.write() as q:
            await self._prune(q.conn, now)
            row = (
                await q.conn.execute(sa.select(confirmations).where(confirmations.c.key_hash == hashed))
            ).first()
            if row is None:
                await q.conn.execute(sa.insert(confirmations).values(**values))
            elif row.status == "done" or row.expires <= now or row.ticket is None:
                await q.conn.execute(
                    sa.update(confirmations).where(confirmations.c.key_hash == hashed).values(**values)
                )
            else:
                return _approval(row)
        return _approval(values)

    async def approval(self, key: str) -> Approval | None:
        """The approval bound to ``key`` as it is now, or None (never asked, or expired)."""
        async with self._store.read() as q:
            row = (
                await q.conn.execute(
                    sa.select(confirmations).where(confirmations.c.key_hash == key_hash(key))
                )
            ).first()
        return None if row is None or row.ticket is None else _approval(row)

    async def take_approved(self, key: str) -> bool:
        """Move an ``approved`` approval to ``taken`` (just before acting); False when it was not
        approved (any more: another call took it)."""
        return await self._move(key, "approved", "taken")

    async def finish(self, key: str) -> None:
        """The approved action was done: the approval serves no further call."""
        await self._move(key, "taken", "done")

    async def give_back(self, key: str) -> None:
        """The approved action failed before GitLab accepted it: approved again, for a retry."""
        await self._move(key, "taken", "approved")

    async def _move(self, key: str, old: str, new: str) -> bool:
        async with self._store.write() as q:
            done = await q.conn.execute(
                sa.update(confirmations)
                .where(confirmations.c.key_hash == key_hash(key), confirmations.c.status == old)
                .values(status=new)
            )
        return bool(done.rowcount)

    async def pending(self) -> list[Approval]:
        """The approvals waiting for an operator, oldest first."""
        now = self._clock()
        async with self._store.read() as q:
            rows = (
                await q.conn.execute(
                    sa.select(confirmations)
                    .where(confirmations.c.status == "pending", confirmations.c.expires > now)
                    .order_by(confirmations.c.created)
                    .limit(LIST_LIMIT)
                )
            ).all()
        return [_approval(row) for row in rows]

    async def pending_count(self) -> int:
        """How many approvals wait for an operator (``broker status``, the metric)."""
        async with self._store.read() as q:
            found = await q.conn.execute(
                sa.select(sa.func.count())
                .select_from(confirmations)
                .where(confirmations.c.status == "pending", confirmations.c.expires > self._clock())
            )
        return int(found.scalar_one())

    async def decide(self, ticket: str, *, approve: bool, operator: str, note: str | None) -> Approval:
        """Approve or refuse the pending approval ``ticket`` as ``operator``.

        Raises:
            BrokerError: ``not_found`` for no such pending approval (unknown, expired, decided).
        """
        now = self._clock()
        status = "approved" if approve else "refused"
        async with self._store.write() as q:
            done = await q.conn.execute(
                sa.update(confirmations)
                .where(
                    confirmations.c.ticket == ticket,
                    confirmations.c.status == "pending",
                    confirmations.c.expires > now,
                )
                .values(status=status, decided_by=operator, decided_at=now, note=note)
            )
            if not done.rowcount:
                raise BrokerError(
                    "not_found",
                    f"No pending confirmation has ticket {ticket!r}: it was decided already, expired, or "
                    "never asked. List the pending ones with 'broker confirmations'.",
                )
            row = (
                await q.conn.execute(sa.select(confirmations).where(confirmations.c.ticket == ticket))
            ).one()
        return _approval(row)

    async def _prune(self, conn: Any, now: float) -> None:
        expired = (
            sa.select(confirmations.c.key_hash)
            .where(confirmations.c.expires <= now)
            .order_by(confirmations.c.expires)
            .limit(PRUNE_BATCH)
        )
        await conn.execute(sa.delete(confirmations).where(confirmations.c.key_hash.in_(expired)))


def _approval(row: Any) -> Approval:
    m = row if isinstance(row, dict) else row._mapping
    return Approval(
        ticket=m["ticket"],
        status=m["status"],
        agent=m["agent"],
        tool=m["tool"],
        what=m["what"],
        why=m["why"],
        created=m["created"],
        expires=m["expires"],
        decided_by=m["decided_by"],
        decided_at=m["decided_at"],
        note=m["note"],
    )
