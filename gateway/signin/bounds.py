"""Bounds on what writes rows before anyone signed in: ``POST /oauth/register`` (a client, kept),
and the consent page and the sign-ins of the account page and the console (a sign-in under way,
kept until it expires).

Both are open to anyone who can reach the gateway, so each client address gets a budget
(``sign_in.starts_per_address``, refilled evenly over ``sign_in.starts_window_seconds``; an IPv6
address counts by its /64), and the database a cap: at most ``sign_in.max_pending_sign_ins``
sign-ins under way and ``sign_in.max_registered_clients`` registered clients, counted in the
broker's database so the caps hold across replicas. Past a budget or a cap the gateway answers
HTTP 429 (OAuth ``temporarily_unavailable``) saying which setting and when to retry.

The address budgets live in this process, as the console's and passthrough's do: replicas
multiply them, and behind a reverse proxy every client shares the proxy's address (raise the
budget there; the caps still hold).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from cachetools import TTLCache

from gateway.config import SignInSettings
from gateway.signin.pending import PendingStorage
from gateway.tools.call_limits import MAX_TRACKED, address_key
from gateway.tools.rate_limits import Limit, TokenBucket

#: What a budget is kept for: a client registration, a consent page.
REGISTER = "register"
CONSENT = "consent"


class StartBounds:
    """Per-address budgets and database caps of new clients and sign-ins.

    Args:
        config: ``[sign_in]``.
        storage: counts the rows.
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self, config: SignInSettings, storage: PendingStorage, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._config = config
        self._storage = storage
        self._clock = clock
        window = config.starts_window_seconds
        self._limit = Limit(config.starts_per_address / window, config.starts_per_address)
        # A bucket forgotten is full again; a window after its last use it would be anyway.
        self._buckets: TTLCache[str, TokenBucket] = TTLCache(maxsize=MAX_TRACKED, ttl=window, timer=clock)

    def retry_after(self, what: str, remote: str | None) -> int | None:
        """Take one of ``remote``'s ``what`` budget: None when taken, else whole seconds to wait."""
        key = f"{what}:{address_key(remote)}"
        now = self._clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = TokenBucket(self._limit, now)
        wait = bucket.take(now)
        self._buckets[key] = bucket  # (re)stored: its window starts again
        return None if wait == 0.0 else max(1, math.ceil(wait))

    def address_refusal(self, seconds: int) -> str:
        """Why an address was refused, and what to do."""
        return (
            f"too many new sign-ins and client registrations from your address lately (at most "
            f"{self._config.starts_per_address} per {self._config.starts_window_seconds:g} s, "
            f"sign_in.starts_per_address); retry after {seconds} s"
        )

    async def own_flow_refusal(self, remote: str | None) -> tuple[str, int | None] | None:
        """Why a sign-in of the gateway's own pages (account, console) may not start now, and the
        seconds to wait when that is known; None when it may.

        Raises:
            StoreError: the database cannot count the sign-ins under way.
        """
        wait = self.retry_after(CONSENT, remote)
        if wait is not None:
            return self.address_refusal(wait), wait
        full = await self.pending_full()
        return None if full is None else (full, None)

    async def pending_full(self) -> str | None:
        """Why no sign-in may start now (the cap of sign-ins under way is reached), or None."""
        cap = self._config.max_pending_sign_ins
        if await self._storage.pending_count() < cap:
            return None
        return (
            f"the gateway has {cap} sign-ins under way, its limit (sign_in.max_pending_sign_ins); each "
            "ends within 10 minutes: try again in a few minutes"
        )

    async def clients_full(self) -> str | None:
        """Why no client may register now (the cap of registered clients is reached), or None."""
        cap = self._config.max_registered_clients
        if await self._storage.client_count() < cap:
            return None
        return (
            f"the gateway holds {cap} registered clients, its limit (sign_in.max_registered_clients): "
            "ask its operator, or use a client id the operator registered"
        )
