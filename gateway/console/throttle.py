"""Budgets of failed console sign-ins: per client address, and for the console as a whole.

Console tokens are long random secrets, so guessing one over the network is hopeless; still, a
client that keeps presenting wrong tokens is refused for a while (HTTP 429 with ``Retry-After``)
instead of being answered as fast as it can ask. Each failure restarts the address's window, so
the address is let in again ``console.sign_in_window_seconds`` after its last failure. While an
address is refused its tokens are not even checked: a right token then tells it nothing either.

A guesser that rotates addresses (a block of IPv4 addresses, loopback's 127/8) meets the second
budget: ``console.sign_in_failures_total`` failures from all addresses together, within the same
window. A guess names no account (the token alone says which role it opens), so this is the
budget of every account at once. Once it is spent, only addresses that signed in successfully
within ``console.session_hours`` may still try (each within its own budget): the operator who
signed in from their machine is not locked out by someone else's guesses, while a stranger's new
address is refused until the window passes. The choice costs a person signing in for the first
time from a new address during such an attack a wait; the operator CLI (``gitlab-mcp-gateway
broker``) and open sessions are not affected.

Addresses are the peer's (``request.remote``): behind a reverse proxy every browser shares the
proxy's address, and so one budget. An IPv6 address counts by its /64 network, which one host
usually holds whole. The counters live in this process (``cachetools.TTLCache``): each replica
keeps its own, which only multiplies the budgets by the number of replicas.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from cachetools import TTLCache

from gateway.tools.call_limits import FailureWindows, address_key

#: Addresses remembered for a successful sign-in at most (failing ones: ``FailureWindows``'s bound).
MAX_ADDRESSES = 10_000
_ALL = "*"


class SignInBudget:
    """Failed sign-ins per address, and in all, within a window.

    Args:
        failures: failed sign-ins an address may make before it is refused.
        window_seconds: how long failures count after the last one.
        total_failures: failed sign-ins from all addresses before only addresses that signed in
            lately may try (None: no such budget).
        known_seconds: how long an address that signed in stays known.
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        failures: int,
        window_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        *,
        total_failures: int | None = None,
        known_seconds: float = 12 * 3600.0,
    ) -> None:
        self._failures = failures
        self._total = total_failures
        self._counts = FailureWindows(window_seconds, clock)
        self._known: TTLCache[str, bool] = TTLCache(maxsize=MAX_ADDRESSES, ttl=known_seconds, timer=clock)

    def retry_after(self, remote: str | None) -> int | None:
        """Seconds before ``remote`` may try again when a budget it is under is spent, else None."""
        key = address_key(remote)
        wait = self._counts.wait(key, self._failures)
        if wait is None and self._total is not None and key not in self._known:
            wait = self._counts.wait(_ALL, self._total)
        return wait

    def failed(self, remote: str | None) -> None:
        """Count one failed sign-in of ``remote`` (it restarts the address's window and the
        console's)."""
        self._counts.failed(address_key(remote))
        self._counts.failed(_ALL)

    def succeeded(self, remote: str | None) -> None:
        """A right token from ``remote``: its earlier mistakes are forgotten, and it is known."""
        key = address_key(remote)
        self._counts.forget(key)
        self._known[key] = True
