"""Statements on what agents did: their saved ``lastSeen`` and the activity logs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import sqlalchemy as sa

from gateway.broker.queries.base import Statements
from gateway.broker.schema import activity_log, agents
from gateway.observability.logging import redact


class ActivityQueries(Statements):
    """Agents' ``lastSeen`` and the activity logs' lines."""

    async def last_seen(self) -> dict[str, str]:
        """Stored ``lastSeen`` per agent."""
        rows = await self.conn.execute(
            sa.select(agents.c.id, agents.c.last_seen).where(agents.c.last_seen.is_not(None))
        )
        return {r[0]: r[1] for r in rows}

    async def save_last_seen(self, seen: Mapping[str, str], replica: str | None = None) -> None:
        """Store ``lastSeen`` values, seen by ``replica``; a later time already stored (another
        replica's) is kept, with that replica.

        One statement for all agents (rows in one order everywhere: no deadlock between replicas).
        """
        if not seen:
            return
        ins = self.insert(agents)
        stmt = ins.on_conflict_do_update(
            index_elements=[agents.c.id],
            set_={"last_seen": ins.excluded.last_seen, "replica": ins.excluded.replica},
            where=sa.or_(agents.c.last_seen.is_(None), agents.c.last_seen < ins.excluded.last_seen),
        )
        rows = [{"id": a, "last_seen": at, "replica": replica} for a, at in sorted(seen.items())]
        await self.conn.execute(stmt, rows)

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
