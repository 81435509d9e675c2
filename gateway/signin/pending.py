"""Sign-ins under way in the broker's database: clients registered dynamically, the sign-ins
between the consent page and GitLab's return, and authorization codes (single use).

Each method is one transaction. Raises (every method): ``StoreError`` when the database cannot
serve the call.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa

from gateway.broker.schema import sign_in_clients, sign_in_codes, sign_in_transactions
from gateway.broker.store import Store


@dataclass(frozen=True)
class ClientRow:
    """A registered client."""

    client_id: str
    secret_hash: str | None
    name: str | None
    redirect_uris: tuple[str, ...]
    auth_method: str


@dataclass(frozen=True)
class TransactionRow:
    """A sign-in under way."""

    id_hash: str
    client_id: str
    redirect_uri: str
    state: str | None
    code_challenge: str
    scopes: str
    browser_hash: str
    role: str | None
    gitlab_verifier: str | None
    expires: float


@dataclass(frozen=True)
class CodeRow:
    """A redeemed authorization code."""

    grant_id: str
    client_id: str
    redirect_uri: str
    code_challenge: str
    expires: float


class PendingStorage:
    """Sign-in's statements on what is under way.

    Args:
        store: the broker's database.
        clock: Unix seconds.
    """

    def __init__(self, store: Store, clock: Callable[[], float]) -> None:
        self._store = store
        self._clock = clock

    @property
    def postgres(self) -> bool:
        """Whether the database is PostgreSQL (replicas may share it)."""
        return self._store.postgres

    # -- clients -------------------------------------------------------------------------------

    async def add_client(
        self, *, secret_hash: str | None, name: str | None, redirect_uris: tuple[str, ...], auth_method: str
    ) -> str:
        """Register a client; its new id."""
        client_id = "gw-" + secrets.token_urlsafe(18)
        async with self._store.write() as q:
            await q.conn.execute(
                sa.insert(sign_in_clients).values(
                    client_id=client_id,
                    secret_hash=secret_hash,
                    name=name,
                    redirect_uris=json.dumps(list(redirect_uris)),
                    auth_method=auth_method,
                    created=self._clock(),
                )
            )
        return client_id

    async def client(self, client_id: str) -> ClientRow | None:
        """A client registered dynamically, or None."""
        async with self._store.read() as q:
            row = (
                await q.conn.execute(
                    sa.select(sign_in_clients).where(sign_in_clients.c.client_id == client_id)
                )
            ).first()
        if row is None:
            return None
        return ClientRow(
            client_id=row.client_id,
            secret_hash=row.secret_hash,
            name=row.name,
            redirect_uris=tuple(json.loads(row.redirect_uris)),
            auth_method=row.auth_method,
        )

    async def client_count(self) -> int:
        """How many clients registered dynamically."""
        async with self._store.read() as q:
            found = await q.conn.execute(sa.select(sa.func.count()).select_from(sign_in_clients))
            return int(found.scalar_one())

    # -- sign-ins under way ----------------------------------------------------------------------

    async def pending_count(self) -> int:
        """How many sign-ins are under way (not expired)."""
        async with self._store.read() as q:
            found = await q.conn.execute(
                sa.select(sa.func.count())
                .select_from(sign_in_transactions)
                .where(sign_in_transactions.c.expires > self._clock())
            )
            return int(found.scalar_one())

    async def start(self, row: TransactionRow) -> None:
        """Record a sign-in that reached the consent page."""
        async with self._store.write() as q:
            await q.conn.execute(sa.insert(sign_in_transactions).values(**row.__dict__))

    async def transaction(self, id_hash: str) -> TransactionRow | None:
        """A sign-in under way that has not expired."""
        async with self._store.read() as q:
            row = (
                await q.conn.execute(
                    sa.select(*_TRANSACTION_COLUMNS).where(
                        sign_in_transactions.c.id_hash == id_hash,
                        sign_in_transactions.c.expires > self._clock(),
                    )
                )
            ).first()
        return None if row is None else TransactionRow(**row._mapping)

    async def to_gitlab(
        self, id_hash: str, *, role: str | None, gitlab_state_hash: str, verifier: str
    ) -> bool:
        """The person allowed: the sign-in goes to GitLab. False when it was gone already (a second post)."""
        async with self._store.write() as q:
            done = await q.conn.execute(
                sa.update(sign_in_transactions)
                .where(
                    sign_in_transactions.c.id_hash == id_hash,
                    sign_in_transactions.c.gitlab_state_hash.is_(None),
                    sign_in_transactions.c.expires > self._clock(),
                )
                .values(role=role, gitlab_state_hash=gitlab_state_hash, gitlab_verifier=verifier)
            )
            return bool(done.rowcount)

    async def forget(self, id_hash: str) -> None:
        """Drop a sign-in under way (denied)."""
        async with self._store.write() as q:
            await q.conn.execute(
                sa.delete(sign_in_transactions).where(sign_in_transactions.c.id_hash == id_hash)
            )

    async def back_from_gitlab(self, gitlab_state_hash: str) -> TransactionRow | None:
        """The sign-in GitLab's ``state`` names, taken (once) if it has not expired."""
        async with self._store.write() as q:
            row = (
                await q.conn.execute(
                    sa.delete(sign_in_transactions)
                    .where(sign_in_transactions.c.gitlab_state_hash == gitlab_state_hash)
                    .returning(*_TRANSACTION_COLUMNS)
                )
            ).first()
        if row is None or float(row.expires) <= self._clock():
            return None
        return TransactionRow(**row._mapping)

    async def redeem(self, code_hash: str) -> CodeRow | None:
        """Take an authorization code (single use); None when unknown, used or expired."""
        async with self._store.write() as q:
            row = (
                await q.conn.execute(
                    sa.delete(sign_in_codes)
                    .where(sign_in_codes.c.code_hash == code_hash)
                    .returning(
                        sign_in_codes.c.grant_id,
                        sign_in_codes.c.client_id,
                        sign_in_codes.c.redirect_uri,
                        sign_in_codes.c.code_challenge,
                        sign_in_codes.c.expires,
                    )
                )
            ).first()
        if row is None or float(row.expires) <= self._clock():
            return None
        return CodeRow(**row._mapping)


_TRANSACTION_COLUMNS = tuple(
    sign_in_transactions.c[name]
    for name in (
        "id_hash",
        "client_id",
        "redirect_uri",
        "state",
        "code_challenge",
        "scopes",
        "browser_hash",
        "role",
        "gitlab_verifier",
        "expires",
    )
)
