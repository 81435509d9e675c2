"""A budget of failed console sign-ins per client address.

Console tokens are long random secrets, so guessing one over the network is hopeless; still, a
client that keeps presenting wrong tokens is refused for a while (HTTP 429 with ``Retry-After``)
instead of being answered as fast as it can ask. Each failure restarts the address's window, so
the address is let in again ``console.sign_in_window_seconds`` after its last failure. While an
address is refused its tokens are not even checked: a right token then tells it nothing either.

Addresses are the peer's (``request.remote``): behind a reverse proxy every browser shares the
proxy's address, and so one budget. An IPv6 address counts by its /64 network, which one host
usually holds whole. The counters live in this process (``cachetools.TTLCache``): each replica
keeps its own, which only multiplies the budget by the number of replicas.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from cachetools import TTLCache

from gateway.tools.call_limits import address_key

#: Addresses tracked at once at most (the least recently failing are forgotten first).
MAX_ADDRESSES = 10_000


class SignInBudget:
    """Failed sign-ins per address within a window.

    Args:
        failures: failed sign-ins an address may make before it is refused.
        window_seconds: how long an address's failures count after its last one.
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self, failures: int, window_seconds: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._failures = failures
        self._window = window_seconds
        self._clock = clock
        self._counts: TTLCache[str, tuple[int, float]] = TTLCache(
            maxsize=MAX_ADDRESSES, ttl=window_seconds, timer=clock
        )

    def retry_after(self, remote: str | None) -> int | None:
        """Seconds before ``remote`` may try again when its budget is spent, else None."""
        count, last = self._counts.get(address_key(remote), (0, 0.0))
        if count < self._failures:
            return None
        return max(1, math.ceil(last + self._window - self._clock()))

    def failed(self, remote: str | None) -> None:
        """Count one failed sign-in of ``remote`` (it restarts the address's window)."""
        key = address_key(remote)
        count, _ = self._counts.get(key, (0, 0.0))
        self._counts[key] = (count + 1, self._clock())

    def succeeded(self, remote: str | None) -> None:
        """A right token from ``remote``: its earlier mistakes are forgotten."""
        self._counts.pop(address_key(remote), None)
