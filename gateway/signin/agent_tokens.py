"""Named agent tokens: bearer tokens a signed-in person mints on the account page for headless
agents, each with a name, a broker role, scopes and an expiry, backed by the person's account
grant (its GitLab tokens, refreshed as any grant's). Kept as hashes; listed and revoked by a
short public id. Ending the grant (sign out everywhere, GitLab revoking it) ends them all.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa

from gateway.broker.schema import sign_in_agent_tokens, sign_in_grants
from gateway.broker.store import Store
from gateway.signin.storage import SignInStorage

#: Most live agent tokens one person may hold.
MAX_PER_PERSON = 50


@dataclass(frozen=True)
class AgentToken:
    """A named agent token as the account page lists it (never the token itself)."""

    id: str
    name: str
    role: str | None
    scopes: str
    created: float
    expires: float


class TooManyTokens(Exception):
    """The person holds :data:`MAX_PER_PERSON` live agent tokens already."""


class AgentTokens:
    """Agent tokens in the broker's database. Raises ``StoreError`` when it cannot serve a call."""

    def __init__(self, store: Store, clock: Callable[[], float]) -> None:
        self._store = store
        self._clock = clock

    async def mint(
        self,
        *,
        grant_id: str,
        gitlab_user_id: int,
        name: str,
        role: str | None,
        scopes: str,
        token_hash: str,
        days: int,
    ) -> AgentToken:
        """Store a new agent token backed by ``grant_id``.

        Raises:
            TooManyTokens: the person holds too many already.
        """
        now = self._clock()
        table = sign_in_agent_tokens
        async with self._store.write() as q:
            held = await q.conn.execute(
                sa.select(sa.func.count())
                .select_from(table)
                .where(table.c.gitlab_user_id == gitlab_user_id, table.c.expires > now)
            )
            if int(held.scalar_one()) >= MAX_PER_PERSON:
                raise TooManyTokens
            made = AgentToken(
                id=secrets.token_hex(6),
                name=name,
                role=role,
                scopes=scopes,
                created=now,
                expires=now + days * 86400,
            )
            await q.conn.execute(
                sa.insert(table).values(
                    **made.__dict__, token_hash=token_hash, grant_id=grant_id, gitlab_user_id=gitlab_user_id
                )
            )
            await SignInStorage.extend(q, grant_id, made.expires)
        return made

    async def listed(self, gitlab_user_id: int) -> list[AgentToken]:
        """The person's live agent tokens, newest first."""
        table = sign_in_agent_tokens
        async with self._store.read() as q:
            rows = await q.conn.execute(
                sa.select(
                    table.c.id, table.c.name, table.c.role, table.c.scopes, table.c.created, table.c.expires
                )
                .join(sign_in_grants, sign_in_grants.c.id == table.c.grant_id)
                .where(
                    table.c.gitlab_user_id == gitlab_user_id,
                    table.c.expires > self._clock(),
                    sign_in_grants.c.revoked.is_(None),
                )
                .order_by(table.c.created.desc())
            )
            return [AgentToken(**row._mapping) for row in rows]

    async def revoke(self, gitlab_user_id: int, token_id: str) -> bool:
        """End one of the person's agent tokens; whether it was theirs and live."""
        table = sign_in_agent_tokens
        async with self._store.write() as q:
            done = await q.conn.execute(
                sa.delete(table).where(table.c.id == token_id, table.c.gitlab_user_id == gitlab_user_id)
            )
            return bool(done.rowcount)
