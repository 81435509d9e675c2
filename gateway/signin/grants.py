"""Signed-in callers of ``/mcp``: a gateway access token looked up (by its hash, cached briefly per
replica), its grant's GitLab token opened, and refreshed at GitLab once across every replica.

Revocation bound: a replica keeps what it looked up for :data:`CACHE_SECONDS`, so a token revoked
(RFC 7009, a grant ended, a refresh at GitLab that failed) stops working on every replica within
that long; nothing else is cached.

GitLab's tokens are refreshed when less than :data:`REFRESH_MARGIN_SECONDS` remain, or when GitLab
answered 401 to the token in use (:meth:`Grants.after_gitlab_401`). GitLab locks a user's grant out
when two refreshes race with one refresh token, so a refresh runs once: within a replica the
callers of one grant wait on one asyncio lock; across replicas on PostgreSQL the refresh runs
inside a transaction holding the grant's row (``SELECT ... FOR UPDATE``), and whoever waited
reads the tokens it stored. SQLite is one process's file, so the asyncio lock is enough there and
no write transaction stays open across GitLab's answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from gateway.broker.store import StoreError
from gateway.mcp.http.auth import SignedInCaller
from gateway.signin.gitlab_oauth import INVALID_GRANT, GitLabOAuth, GitLabRefused, GitLabTokens
from gateway.signin.sealing import ACCESS_PREFIX, Sealer, SealError, hashed
from gateway.signin.storage import GrantRow, SignInStorage

log = logging.getLogger("gateway.signin")

#: How long a replica trusts what it looked up of an access token (the revocation bound).
CACHE_SECONDS = 1.0
#: Tokens looked up kept at most (the cache is emptied when it would hold more).
CACHE_SIZE = 10_000
#: GitLab's token is refreshed when it has less than this left.
REFRESH_MARGIN_SECONDS = 120.0
WRITE_SCOPE = "mcp:write"
READ_SCOPE = "mcp:read"
#: The scope of the account page's own session token: never accepted on ``/mcp``.
ACCOUNT_SCOPE = "account"


@dataclass(frozen=True)
class SignedIn:
    """A signed-in caller: who at GitLab, the role they took, what the token allows."""

    grant_id: str
    gitlab_user_id: int
    gitlab_username: str
    role: str | None
    can_write: bool
    gitlab_token: str
    scopes: str = READ_SCOPE


class SignInEnded(Exception):
    """The grant is gone (revoked here or at GitLab): the client must sign in again."""


class GitLabUnavailable(Exception):
    """GitLab could not refresh the token now, and the one held has expired."""


class Grants:
    """Access tokens to signed-in callers, and their GitLab tokens kept fresh."""

    def __init__(
        self,
        storage: SignInStorage,
        sealer: Sealer,
        gitlab: GitLabOAuth,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        count: Callable[[str], None] = lambda event: None,
    ) -> None:
        self._count = count
        self._storage = storage
        self._sealer = sealer
        self._gitlab = gitlab
        self._clock = clock
        self._monotonic = monotonic
        self._cache: dict[str, tuple[float, SignedIn]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        #: GitLab refreshes this replica made (tests and the metrics read it).
        self.refreshes = 0

    @staticmethod
    def is_ours(bearer: str) -> bool:
        """Whether ``bearer`` has the shape of a gateway access token."""
        return bearer.startswith(ACCESS_PREFIX)

    def forget(self) -> None:
        """Drop what this replica cached (a grant revoked here)."""
        self._cache.clear()

    async def signed_in(self, bearer: str, *, account: bool = False) -> SignedIn | None:
        """The caller a gateway access token stands for; None when it is not a live one (for
        ``/mcp``, or with ``account`` for the account page: each refuses the other's tokens).

        Raises:
            StoreError: the database cannot answer.
            GitLabUnavailable: GitLab's token expired and GitLab cannot refresh it now.
        """
        key = hashed(bearer)
        now = self._monotonic()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            return cached[1] if (ACCOUNT_SCOPE in cached[1].scopes.split()) == account else None
        found = await self._storage.access(key)
        if found is None:
            self._cache.pop(key, None)
            return None
        grant, scopes = found
        if (ACCOUNT_SCOPE in scopes.split()) != account:
            return None
        try:
            tokens = await self._fresh(grant)
        except SignInEnded:
            return None
        who = SignedIn(
            grant_id=grant.id,
            gitlab_user_id=grant.gitlab_user_id,
            gitlab_username=grant.gitlab_username,
            role=grant.role,
            can_write=WRITE_SCOPE in scopes.split(),
            gitlab_token=tokens.access_token,
            scopes=scopes,
        )
        if len(self._cache) >= CACHE_SIZE:
            self._cache.clear()
        self._cache[key] = (now + CACHE_SECONDS, who)
        return who

    def _open(self, grant: GrantRow) -> GitLabTokens:
        try:
            return GitLabTokens.unsealed(
                self._sealer.open(grant.gitlab_tokens, grant.id), grant.gitlab_expires
            )
        except SealError:
            # sign_in.encryption_key changed: the sign-in cannot be used; the person signs in again.
            log.warning(
                "a signed-in grant's GitLab tokens do not open with sign_in.encryption_key; it is ended"
            )
            raise SignInEnded from None

    async def _fresh(self, grant: GrantRow) -> GitLabTokens:
        tokens = self._open(grant)
        if tokens.expires_at - self._clock() > REFRESH_MARGIN_SECONDS:
            return tokens
        return await self._refresh(grant.id, tokens.access_token)

    async def after_gitlab_401(self, who: SignedInCaller) -> str:
        """GitLab answered 401 to ``who``'s token: refresh it (once across replicas); the new token.

        Raises:
            SignInEnded: GitLab refused the refresh (the grant was revoked there).
            GitLabUnavailable: GitLab could not be reached.
        """
        self._cache.clear()
        tokens = await self._refresh(who.grant_id, who.gitlab_token, failed=True)
        return tokens.access_token

    async def _refresh(self, grant_id: str, seen: str, *, failed: bool = False) -> GitLabTokens:
        """Refresh the grant's GitLab tokens, unless someone did since ``seen`` was read."""
        if len(self._locks) > CACHE_SIZE:
            self._locks = {key: held for key, held in self._locks.items() if held.locked()}
        lock = self._locks.setdefault(grant_id, asyncio.Lock())
        try:
            async with lock:
                if self._storage.postgres:
                    async with self._storage.locked_grant(grant_id) as (row, q):
                        tokens, renewed = await self._renew(row, seen, failed)
                        if renewed:
                            await self._storage.store_gitlab_tokens(
                                q, grant_id, self._sealer.seal(tokens.sealable(), grant_id), tokens.expires_at
                            )
                    return tokens
                row = await self._storage.grant(grant_id)
                tokens, renewed = await self._renew(row, seen, failed)
                if renewed:
                    async with self._storage.locked_grant(grant_id) as (_, q):
                        await self._storage.store_gitlab_tokens(
                            q, grant_id, self._sealer.seal(tokens.sealable(), grant_id), tokens.expires_at
                        )
                return tokens
        except SignInEnded:
            await self._storage.revoke_grant(grant_id)
            self._cache.clear()
            raise

    async def _renew(self, row: GrantRow | None, seen: str, failed: bool) -> tuple[GitLabTokens, bool]:
        """The tokens to use, and whether they are new (to be stored)."""
        if row is None or row.revoked is not None:
            raise SignInEnded
        held = self._open(row)
        if held.access_token != seen and (
            not failed or held.expires_at - self._clock() > REFRESH_MARGIN_SECONDS
        ):
            return held, False  # another caller or replica refreshed meanwhile
        if not failed and held.expires_at - self._clock() > REFRESH_MARGIN_SECONDS:
            return held, False
        try:
            tokens = await self._gitlab.refresh(held.refresh_token)
        except GitLabRefused as err:
            if err.error == INVALID_GRANT:
                self._count("ended")
                log.info(
                    "GitLab refused to refresh the sign-in of %s: it was revoked or expired",
                    row.gitlab_username,
                )
                raise SignInEnded from None
            if held.expires_at > self._clock() and not failed:
                self._count("gitlab_refresh_failed")
                log.warning("GitLab did not refresh a signed-in token (%s); the current one still works", err)
                return held, False
            self._count("gitlab_refresh_failed")
            raise GitLabUnavailable(str(err)) from None
        self.refreshes += 1
        self._count("gitlab_refreshed")
        log.info("refreshed the GitLab token of %s's sign-in", row.gitlab_username)
        return tokens, True

    async def gitlab_token(self, grant_id: str) -> str:
        """The GitLab access token of a grant (to ask GitLab who signed in, as the console does).

        Raises:
            SignInEnded: the grant is gone, or its tokens do not open.
        """
        row = await self._storage.grant(grant_id)
        if row is None or row.revoked is not None:
            raise SignInEnded
        return self._open(row).access_token

    async def sign_out(self, grant_id: str) -> None:
        """End a grant here and at GitLab."""
        await self._storage.revoke_grant(grant_id)
        self._cache.clear()
        await self.revoke_at_gitlab(grant_id)

    async def sign_out_everywhere(self, gitlab_user_id: int) -> int:
        """End every sign-in of one GitLab user, here and at GitLab; how many ended."""
        ended = await self._storage.revoke_person(gitlab_user_id)
        self._cache.clear()
        for grant_id in ended:
            await self.revoke_at_gitlab(grant_id)
        return len(ended)

    async def revoke_at_gitlab(self, grant_id: str) -> None:
        """Revoke an ended grant's tokens at GitLab (best effort)."""
        row = await self._storage.grant(grant_id)
        if row is not None:
            await self._revoke_tokens(row)

    async def _revoke_tokens(self, row: GrantRow) -> None:
        try:
            tokens = self._open(row)
        except SignInEnded:
            return
        await self._gitlab.revoke(tokens.refresh_token)
        await self._gitlab.revoke(tokens.access_token)

    async def prune(self) -> None:
        """Delete expired sign-in rows, and revoke at GitLab the grants deleted unended: a sign-in
        whose code was never redeemed (a closed tab, a burnt code, a console sign-in left before
        its end) or whose tokens all expired. GitLab's refresh tokens never expire, so without
        this the person's GitLab would list the application as authorized for good.

        Raises:
            StoreError: the database cannot serve the call.
        """
        for row in await self._storage.prune():
            await self._revoke_tokens(row)
            log.info("revoked at GitLab the abandoned sign-in of %s", row.gitlab_username)


__all__ = ["GitLabUnavailable", "Grants", "SignInEnded", "SignedIn", "StoreError"]
