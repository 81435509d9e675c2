"""Statements on replica heartbeats (``gateway.broker.replicas``) and which replica saw each agent."""

from __future__ import annotations

import dataclasses

import sqlalchemy as sa

from gateway.broker.queries.base import Statements
from gateway.broker.queries.rows import ReplicaRow
from gateway.broker.schema import agents, replicas


class ReplicaQueries(Statements):
    """The ``replicas`` rows and ``agents.replica``."""

    async def beat(self, row: ReplicaRow) -> None:
        """Write ``row`` (insert, or update its ``last_seen`` and ``every``)."""
        ins = self.insert(replicas).values(**dataclasses.asdict(row))
        await self.conn.execute(
            ins.on_conflict_do_update(
                index_elements=[replicas.c.id],
                set_={"last_seen": ins.excluded.last_seen, "every": ins.excluded.every},
            )
        )

    async def leave(self, replica_id: str) -> None:
        """Delete the row of ``replica_id`` (a clean stop: it is not gone, it is not there)."""
        await self.conn.execute(sa.delete(replicas).where(replicas.c.id == replica_id))

    async def forget_other_replicas(self, replica_id: str) -> None:
        """Delete every row but that of ``replica_id`` (SQLite: earlier runs on the state folder)."""
        await self.conn.execute(sa.delete(replicas).where(replicas.c.id != replica_id))

    async def replicas(self) -> list[ReplicaRow]:
        """Every replica's row, the one seen last first."""
        rows = await self.conn.execute(
            sa.select(replicas).order_by(replicas.c.last_seen.desc(), replicas.c.id)
        )
        return [ReplicaRow(**r._mapping) for r in rows]

    async def seen_by(self) -> dict[str, str]:
        """Agent id → the replica that saved its ``last_seen`` (agents saved before heartbeats: none)."""
        rows = await self.conn.execute(
            sa.select(agents.c.id, agents.c.replica).where(agents.c.replica.is_not(None))
        )
        return {str(a): str(r) for a, r in rows}

    async def prune_replicas(self, before: float) -> int:
        """Forget replicas last seen before ``before`` (Unix seconds); how many."""
        done = await self.conn.execute(sa.delete(replicas).where(replicas.c.last_seen < before))
        return int(done.rowcount or 0)
