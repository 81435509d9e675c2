"""Sign-in's rows in the broker's database (SQLite or PostgreSQL, ``gateway.broker.store``):
grants (a person's sign-in through one client) and the gateway's tokens; what is under way
before a grant exists is ``pending``'s.

Every secret is looked up by its hash (``sealing.hashed``); GitLab's tokens are stored sealed.
Each method is one transaction. Refresh-token rotation (:meth:`SignInStorage.rotate`) keeps the
presented token valid until its successor is first used: a client that lost the answer to its
refresh (a dropped connection) may refresh again with the same token and gets a new successor in
place of the unused one.

Raises (every method): ``StoreError`` when the database cannot serve the call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

import sqlalchemy as sa

from gateway.broker.queries import Queries
from gateway.broker.schema import (
    sign_in_access_tokens,
    sign_in_agent_tokens,
    sign_in_codes,
    sign_in_grants,
    sign_in_refresh_tokens,
    sign_in_transactions,
)
from gateway.signin.pending import CodeRow, PendingStorage

__all__ = ["PRUNE_GRACE_SECONDS", "CodeRow", "GrantRow", "NewTokens", "SignInStorage"]

#: How long after its expiry a grant is kept: a code redeemed in its last moment is taken in one
#: transaction and its tokens stored in the next, and pruning between them must not end it.
PRUNE_GRACE_SECONDS = 60.0


@dataclass(frozen=True)
class GrantRow:
    """A person's sign-in through one client."""

    id: str
    client_id: str
    gitlab_user_id: int
    gitlab_username: str
    role: str | None
    scopes: str
    gitlab_tokens: str
    gitlab_expires: float
    expires: float
    revoked: float | None


@dataclass(frozen=True)
class NewTokens:
    """The hashes and lifetimes of a new access and refresh token."""

    access_hash: str
    access_expires: float
    refresh_hash: str
    refresh_expires: float


def _grant(row: Any) -> GrantRow:
    return GrantRow(
        id=row.id,
        client_id=row.client_id,
        gitlab_user_id=int(row.gitlab_user_id),
        gitlab_username=row.gitlab_username,
        role=row.role,
        scopes=row.scopes,
        gitlab_tokens=row.gitlab_tokens,
        gitlab_expires=float(row.gitlab_expires),
        expires=float(row.expires),
        revoked=row.revoked,
    )


class SignInStorage(PendingStorage):
    """Sign-in's statements on the broker's database: what :class:`PendingStorage` has, and the
    grants and the gateway's tokens."""

    # -- grants and codes ------------------------------------------------------------------------

    async def grant_with_code(self, grant: GrantRow, code_hash: str, code: CodeRow) -> None:
        """Store a new grant and the authorization code that redeems it."""
        async with self._store.write() as q:
            await q.conn.execute(sa.insert(sign_in_grants).values(**grant.__dict__, created=self._clock()))
            await q.conn.execute(sa.insert(sign_in_codes).values(code_hash=code_hash, **code.__dict__))

    async def grant(self, grant_id: str) -> GrantRow | None:
        """A grant, revoked or not."""
        async with self._store.read() as q:
            row = (
                await q.conn.execute(sa.select(sign_in_grants).where(sign_in_grants.c.id == grant_id))
            ).first()
        return None if row is None else _grant(row)

    async def issue(
        self, grant_id: str, scopes: str, tokens: NewTokens, predecessor: str | None = None
    ) -> None:
        """Store a new access and refresh token of ``grant_id``."""
        async with self._store.write() as q:
            await self._insert_tokens(q, grant_id, scopes, tokens, predecessor)

    async def _insert_tokens(
        self, q: Queries, grant_id: str, scopes: str, tokens: NewTokens, predecessor: str | None
    ) -> None:
        await q.conn.execute(
            sa.insert(sign_in_access_tokens).values(
                token_hash=tokens.access_hash, grant_id=grant_id, scopes=scopes, expires=tokens.access_expires
            )
        )
        await q.conn.execute(
            sa.insert(sign_in_refresh_tokens).values(
                token_hash=tokens.refresh_hash,
                grant_id=grant_id,
                scopes=scopes,
                expires=tokens.refresh_expires,
                predecessor=predecessor,
            )
        )
        await q.conn.execute(
            sa.update(sign_in_grants)
            .where(sign_in_grants.c.id == grant_id)
            .values(expires=tokens.refresh_expires)
        )

    async def rotate(
        self, refresh_hash: str, client_id: str, make: Callable[[], NewTokens]
    ) -> GrantRow | None:
        """Refresh with the token of ``refresh_hash``: new tokens (``make()``) replace it.

        The presented token stays valid until its successor is first used: refreshing with it
        again replaces its unused successor; refreshing with the successor ends it. None: the
        token is unknown, expired, another client's, replaced by a successor already used, or its
        grant was revoked.
        """
        now = self._clock()
        async with self._store.write() as q:
            table = sign_in_refresh_tokens
            query = sa.select(table).where(table.c.token_hash == refresh_hash)
            row = (await q.conn.execute(query.with_for_update() if q.postgres else query)).first()
            if row is None or float(row.expires) <= now:
                return None
            grant_row = (
                await q.conn.execute(sa.select(sign_in_grants).where(sign_in_grants.c.id == row.grant_id))
            ).first()
            if grant_row is None or grant_row.revoked is not None or grant_row.client_id != client_id:
                return None
            if row.predecessor is not None:  # the successor's first use ends the token it replaced
                await q.conn.execute(sa.delete(table).where(table.c.token_hash == row.predecessor))
            if row.successor is not None:  # an unused successor: this refresh replaces it
                await q.conn.execute(sa.delete(table).where(table.c.token_hash == row.successor))
            tokens = make()
            await self._insert_tokens(q, row.grant_id, row.scopes, tokens, refresh_hash)
            await q.conn.execute(
                sa.update(table)
                .where(table.c.token_hash == refresh_hash)
                .values(successor=tokens.refresh_hash, predecessor=None)
            )
            return _grant(grant_row)

    async def access(self, access_hash: str) -> tuple[GrantRow, str] | None:
        """The grant and scopes of a live access token, or of a named agent token (its grant
        with the agent token's role); None when unknown, expired or revoked."""
        now = self._clock()
        async with self._store.read() as q:
            row = (
                await q.conn.execute(
                    sa.select(sign_in_grants, sign_in_access_tokens.c.scopes.label("token_scopes"))
                    .join(sign_in_access_tokens, sign_in_access_tokens.c.grant_id == sign_in_grants.c.id)
                    .where(
                        sign_in_access_tokens.c.token_hash == access_hash,
                        sign_in_access_tokens.c.expires > now,
                        sign_in_grants.c.revoked.is_(None),
                    )
                )
            ).first()
            if row is not None:
                return _grant(row), row.token_scopes
            agent = sign_in_agent_tokens
            row = (
                await q.conn.execute(
                    sa.select(
                        sign_in_grants, agent.c.scopes.label("token_scopes"), agent.c.role.label("agent_role")
                    )
                    .join(agent, agent.c.grant_id == sign_in_grants.c.id)
                    .where(
                        agent.c.token_hash == access_hash,
                        agent.c.expires > now,
                        sign_in_grants.c.revoked.is_(None),
                    )
                )
            ).first()
        if row is None:
            return None
        return replace(_grant(row), role=row.agent_role), row.token_scopes

    async def issue_access(self, grant_id: str, scopes: str, access_hash: str, expires: float) -> None:
        """Store an access token alone (no refresh token): the account page's session."""
        async with self._store.write() as q:
            await q.conn.execute(
                sa.insert(sign_in_access_tokens).values(
                    token_hash=access_hash, grant_id=grant_id, scopes=scopes, expires=expires
                )
            )
            await self.extend(q, grant_id, expires)

    @staticmethod
    async def extend(q: Queries, grant_id: str, until: float) -> None:
        """Keep a grant at least until ``until`` (a token backed by it lives that long)."""
        await q.conn.execute(
            sa.update(sign_in_grants)
            .where(sign_in_grants.c.id == grant_id, sign_in_grants.c.expires < until)
            .values(expires=until)
        )

    async def revoke_token(self, token_hash: str, client_id: str) -> str | None:
        """RFC 7009: an access token ends alone; a refresh token ends its whole grant. The grant
        id when a grant was revoked (its GitLab tokens are then to be revoked too)."""
        async with self._store.write() as q:
            found = (
                await q.conn.execute(
                    sa.select(sign_in_refresh_tokens.c.grant_id)
                    .join(sign_in_grants, sign_in_grants.c.id == sign_in_refresh_tokens.c.grant_id)
                    .where(
                        sign_in_refresh_tokens.c.token_hash == token_hash,
                        sign_in_grants.c.client_id == client_id,
                    )
                )
            ).first()
            if found is not None:
                await self._revoke(q, found.grant_id)
                return str(found.grant_id)
            mine = sa.select(sign_in_grants.c.id).where(sign_in_grants.c.client_id == client_id)
            await q.conn.execute(
                sa.delete(sign_in_access_tokens).where(
                    sign_in_access_tokens.c.token_hash == token_hash,
                    sign_in_access_tokens.c.grant_id.in_(mine),
                )
            )
        return None

    async def revoke_person(self, gitlab_user_id: int) -> list[str]:
        """End every live grant of one GitLab user (every client); their ids."""
        async with self._store.write() as q:
            rows = await q.conn.execute(
                sa.select(sign_in_grants.c.id).where(
                    sign_in_grants.c.gitlab_user_id == gitlab_user_id, sign_in_grants.c.revoked.is_(None)
                )
            )
            ended = [str(row.id) for row in rows]
            for grant_id in ended:
                await self._revoke(q, grant_id)
        return ended

    async def revoke_grant(self, grant_id: str) -> None:
        """End a grant and every token of it."""
        async with self._store.write() as q:
            await self._revoke(q, grant_id)

    async def _revoke(self, q: Queries, grant_id: str) -> None:
        await q.conn.execute(
            sa.update(sign_in_grants).where(sign_in_grants.c.id == grant_id).values(revoked=self._clock())
        )
        await q.conn.execute(
            sa.delete(sign_in_access_tokens).where(sign_in_access_tokens.c.grant_id == grant_id)
        )
        await q.conn.execute(
            sa.delete(sign_in_refresh_tokens).where(sign_in_refresh_tokens.c.grant_id == grant_id)
        )
        await q.conn.execute(
            sa.delete(sign_in_agent_tokens).where(sign_in_agent_tokens.c.grant_id == grant_id)
        )

    # -- GitLab's tokens -------------------------------------------------------------------------

    @asynccontextmanager
    async def locked_grant(self, grant_id: str) -> AsyncIterator[tuple[GrantRow | None, Queries]]:
        """The grant read under its row lock (PostgreSQL ``SELECT ... FOR UPDATE``; SQLite's write
        transaction is ``BEGIN IMMEDIATE``, alone in the file), held until the block ends: one
        replica refreshes GitLab's tokens while the others wait, then read what it stored."""
        async with self._store.write() as q:
            query = sa.select(sign_in_grants).where(sign_in_grants.c.id == grant_id)
            row = (await q.conn.execute(query.with_for_update() if q.postgres else query)).first()
            yield (None if row is None else _grant(row)), q

    @staticmethod
    async def store_gitlab_tokens(q: Queries, grant_id: str, sealed: str, expires: float) -> None:
        """Replace a grant's GitLab tokens (inside :meth:`locked_grant`)."""
        await q.conn.execute(
            sa.update(sign_in_grants)
            .where(sign_in_grants.c.id == grant_id)
            .values(gitlab_tokens=sealed, gitlab_expires=expires)
        )

    async def prune(self) -> list[GrantRow]:
        """Forget what has expired: sign-ins under way, codes, tokens, grants past their refresh.

        A grant is deleted once it expired at least :data:`PRUNE_GRACE_SECONDS` ago and no
        token of it is left (a code redeemed right at its expiry gets its tokens meanwhile).
        Returns the deleted grants that were never ended (a code never redeemed, or tokens all
        expired): their GitLab tokens are still live at GitLab, to be revoked there.
        """
        now = self._clock()
        async with self._store.write() as q:
            for table in (
                sign_in_transactions,
                sign_in_codes,
                sign_in_access_tokens,
                sign_in_refresh_tokens,
                sign_in_agent_tokens,
            ):
                await q.conn.execute(sa.delete(table).where(table.c.expires <= now))
            grants = sign_in_grants
            gone = sa.and_(
                grants.c.expires <= now - PRUNE_GRACE_SECONDS,
                *(
                    ~sa.exists().where(table.c.grant_id == grants.c.id)
                    for table in (sign_in_access_tokens, sign_in_refresh_tokens, sign_in_agent_tokens)
                ),
            )
            abandoned = [
                _grant(row)
                for row in await q.conn.execute(sa.select(grants).where(gone, grants.c.revoked.is_(None)))
            ]
            await q.conn.execute(sa.delete(grants).where(gone))
        return abandoned
