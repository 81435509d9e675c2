"""Statements on ended MCP sessions (``gateway.broker.ended_sessions``) and signed-out console
sessions (``gateway.broker.console_sign_outs``)."""

from __future__ import annotations

import sqlalchemy as sa

from gateway.broker.prepared import CHANNEL
from gateway.broker.queries.base import Statements
from gateway.broker.schema import console_sign_outs, ended_sessions


class SessionQueries(Statements):
    """Sessions ended by DELETE, until they would have expired."""

    async def end_session(self, id_hash: str, expires: float) -> None:
        """Record ``id_hash`` as ended; ending it again (another replica, a retry) changes nothing."""
        await self.conn.execute(
            self.insert(ended_sessions).values(id_hash=id_hash, expires=expires).on_conflict_do_nothing()
        )

    async def ended_sessions_since(self, now: float) -> dict[str, float]:
        """Every session ended whose id has not expired by ``now``: id hash -> expiry."""
        rows = await self.conn.execute(
            sa.select(ended_sessions.c.id_hash, ended_sessions.c.expires).where(
                ended_sessions.c.expires > now
            )
        )
        return {str(h): float(e) for h, e in rows}

    async def notify(self, payload: str) -> None:
        """A notification to every replica's LISTEN connection at commit (PostgreSQL only)."""
        await self.conn.execute(sa.select(sa.func.pg_notify(CHANNEL, payload)))

    async def prune_ended_sessions(self, now: float, limit: int) -> int:
        """Forget at most ``limit`` sessions whose ids have expired; how many were."""
        expired = (
            sa.select(ended_sessions.c.id_hash)
            .where(ended_sessions.c.expires <= now)
            .order_by(ended_sessions.c.expires)
            .limit(limit)
        )
        done = await self.conn.execute(sa.delete(ended_sessions).where(ended_sessions.c.id_hash.in_(expired)))
        return int(done.rowcount or 0)

    async def ended_sessions_count(self, now: float) -> int:
        """Sessions ended and not yet expired."""
        count = await self.conn.execute(
            sa.select(sa.func.count()).select_from(ended_sessions).where(ended_sessions.c.expires > now)
        )
        return int(count.scalar_one())

    async def sign_out_console(self, nonce_hash: str, expires: float) -> None:
        """Record console session ``nonce_hash`` as signed out; again changes nothing."""
        await self.conn.execute(
            self.insert(console_sign_outs)
            .values(nonce_hash=nonce_hash, expires=expires)
            .on_conflict_do_nothing()
        )

    async def console_signed_out(self, nonce_hash: str) -> bool:
        """Whether console session ``nonce_hash`` was signed out."""
        found = await self.conn.execute(
            sa.select(console_sign_outs.c.nonce_hash).where(console_sign_outs.c.nonce_hash == nonce_hash)
        )
        return found.first() is not None

    async def prune_console_sign_outs(self, now: float) -> int:
        """Forget the sign-outs of cookies that have expired; how many."""
        done = await self.conn.execute(sa.delete(console_sign_outs).where(console_sign_outs.c.expires <= now))
        return int(done.rowcount or 0)
