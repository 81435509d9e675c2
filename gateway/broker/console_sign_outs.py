"""Console sessions that were signed out, kept in the broker's database so that every replica, and
this one after a restart, refuses their cookie at once.

A console cookie is signed with a key derived from its role's token, so changing a token (or
moving it to the other role) already ends its sessions everywhere. Signing out must end one
session only, the one whose cookie a browser (or whoever copied it) still holds: its nonce is
recorded here. What is kept: a SHA-256 of the nonce (never the cookie) and the moment the cookie
expires, after which the row is pruned (the cookie is refused as expired from then on).

Every console request looks its session up here: one statement by primary key. No cache: a
replica that cached "not signed out" would honour a cookie signed out on another replica for as
long as it cached it, and people's page loads are few.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from gateway.broker.store import Store


def nonce_hash(nonce: str) -> str:
    """What the table keeps of a session's nonce."""
    return hashlib.sha256(f"console:{nonce}".encode()).hexdigest()


class ConsoleSignOuts:
    """The shared record of signed-out console sessions.

    Args:
        store: the broker's database.
        clock: Unix seconds.

    Raises (every method):
        StoreError: the database cannot serve the call (``DatabaseUnavailable`` while it is down).
    """

    def __init__(self, store: Store, clock: Callable[[], float]) -> None:
        self._store = store
        self._clock = clock

    async def sign_out(self, nonce: str, expires: float) -> None:
        """Record the session of ``nonce`` as signed out until ``expires`` (Unix seconds)."""
        async with self._store.write() as q:
            await q.sign_out_console(nonce_hash(nonce), expires)

    async def is_signed_out(self, nonce: str) -> bool:
        """Whether the session of ``nonce`` was signed out, on any replica."""
        async with self._store.read() as q:
            return await q.console_signed_out(nonce_hash(nonce))

    async def prune(self) -> int:
        """Forget the sign-outs of cookies that have expired; how many went."""
        async with self._store.write() as q:
            return await q.prune_console_sign_outs(self._clock())
