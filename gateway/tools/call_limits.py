"""Limits on GitLab tool calls besides the rate: calls in flight per caller, and GitLab's 401s
per source in passthrough mode.

- **Calls in flight** (``limits.max_calls_in_flight``): a caller (its
  :func:`~gateway.tools.caller.rate_limit_key`) may have at most this many GitLab tool calls under
  way at once, however it sends them (concurrent POSTs, a JSON-RPC batch, tasks). One more is
  refused at once with ``rate_limited`` (``limit: gateway_calls_in_flight``), never queued: a held
  call would keep its connection and worker busy. Broker tools are not counted (their waits are
  long by design).
- **Rejected GitLab tokens** (passthrough mode, ``limits.passthrough_auth_failures`` within
  ``limits.passthrough_auth_failure_window_seconds``): every GitLab 401 to a caller's own token
  counts against its source (the agent of its client token, else its address, an IPv6 address by
  its /64), which rotating tokens does not change. Past the budget, the source's calls with a token
  GitLab has not accepted lately are refused without reaching GitLab (GitLab would count them
  against the gateway's own address, where its failed-authentication ban would stop everyone);
  a token GitLab accepted lately still goes through, so a person with a valid token behind the
  same proxy is never locked out. Each failure restarts the source's window.

Both live in this process (cachetools), so replicas multiply them.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections.abc import Callable

from cachetools import LRUCache, TTLCache

from gateway.errors import gateway_refusal
from gateway.tools.caller import Caller, rate_limit_key

#: Sources and accepted tokens remembered at most (the least recent forgotten first).
MAX_TRACKED = 10_000


def address_key(remote: str | None) -> str:
    """The budget ``remote`` counts against: the address, or its /64 network for IPv6."""
    if not remote:
        return "unknown"
    try:
        address = ipaddress.ip_address(remote)
    except ValueError:
        return remote  # a Unix socket path, for example
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


def source_key(caller: Caller) -> str:
    """What a caller cannot change for free: its agent id (a client token's, or a configured
    agent named on loopback), else its address."""
    if caller.agent_id is not None:
        return f"agent:{caller.agent_id}"
    return f"address:{address_key(caller.remote)}"


def _label(caller: Caller) -> str:
    return caller.agent_id if caller.agent_id is not None else "anonymous"


class Slots:
    """At most ``cap`` of something held at once per key (calls in flight, open streams)."""

    __slots__ = ("_open", "cap")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._open: dict[str, int] = {}

    def take(self, key: str) -> bool:
        """Take a slot of ``key``; False when it holds ``cap`` already."""
        count = self._open.get(key, 0)
        if count >= self.cap:
            return False
        self._open[key] = count + 1
        return True

    def give_back(self, key: str) -> None:
        count = self._open.get(key, 1) - 1
        if count > 0:
            self._open[key] = count
        else:
            self._open.pop(key, None)


class FailureWindows:
    """Failures per key, each restarting its key's window; a key is forgotten a window after its
    last failure (at most :data:`MAX_TRACKED` keys, the least recent out first)."""

    def __init__(self, window_seconds: float, clock: Callable[[], float]) -> None:
        self._window = window_seconds
        self._clock = clock
        self._counts: TTLCache[str, tuple[int, float]] = TTLCache(
            maxsize=MAX_TRACKED, ttl=window_seconds, timer=clock
        )

    def __bool__(self) -> bool:
        return bool(self._counts)

    def count(self, key: str) -> int:
        return self._counts.get(key, (0, 0.0))[0]

    def wait(self, key: str, budget: int) -> int | None:
        """Whole seconds until ``key`` is under ``budget`` again, or None when it is."""
        count, last = self._counts.get(key, (0, 0.0))
        if count < budget:
            return None
        return max(1, math.ceil(last + self._window - self._clock()))

    def failed(self, key: str) -> None:
        count, _ = self._counts.get(key, (0, 0.0))
        self._counts[key] = (count + 1, self._clock())

    def forget(self, key: str) -> None:
        self._counts.pop(key, None)


class CallsInFlight(Slots):
    """GitLab tool calls under way per caller, at most ``cap`` each: :class:`Slots` keyed by
    :func:`~gateway.tools.caller.rate_limit_key`."""

    __slots__ = ("_on_limited",)

    def __init__(self, cap: int, on_limited: Callable[[str], None]) -> None:
        super().__init__(cap)
        self._on_limited = on_limited

    def enter(self, caller: Caller) -> str:
        """Count a call of ``caller`` in; the key to :meth:`leave` with.

        Raises:
            ToolError: ``rate_limited``: ``caller`` already has ``cap`` calls under way.
        """
        key = caller.rate_limit_key or rate_limit_key(caller)
        if not self.take(key):
            self._on_limited(_label(caller))
            raise gateway_refusal(
                "rate_limited",
                f"Too many calls at once: this gateway runs at most {self.cap} GitLab tool calls at a "
                "time for one caller (limits.max_calls_in_flight). Wait for your calls under way to "
                "finish, then retry.",
                retry_after_seconds=1,
                limit="gateway_calls_in_flight",
            )
        return key

    #: Count a call out, by the key :meth:`enter` gave.
    leave = Slots.give_back


class RejectedTokens:
    """GitLab's 401s to passthrough tokens, per source (see the module docstring).

    Args:
        failures: 401s a source may collect before its untried tokens are refused.
        window_seconds: how long a source's 401s count after its last one.
        on_limited: called with the metric label of every refused call.
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        failures: int,
        window_seconds: float,
        on_limited: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._failures = failures
        self._on_limited = on_limited
        self._counts = FailureWindows(window_seconds, clock)
        #: Callers (their rate-limit key: agent and token digest) whose token GitLab accepted
        #: lately: never refused here.
        self._accepted: LRUCache[str, bool] = LRUCache(maxsize=MAX_TRACKED)

    @staticmethod
    def _applies(caller: Caller) -> bool:
        return caller.credential is not None and caller.credential.source == "passthrough"

    def check(self, caller: Caller) -> None:
        """Refuse ``caller``'s call when its source's budget is spent and GitLab has not
        accepted its token lately.

        Raises:
            ToolError: ``rate_limited`` with ``retry_after_seconds``.
        """
        if not self._counts or not self._applies(caller):
            return
        source = source_key(caller)
        seconds = self._counts.wait(source, self._failures)
        if seconds is None or rate_limit_key(caller) in self._accepted:
            return
        self._on_limited(_label(caller))
        raise gateway_refusal(
            "rate_limited",
            f"GitLab rejected {self._counts.count(source)} tokens from this caller lately (HTTP 401), "
            "so this gateway sends no more untried tokens from it to GitLab for now "
            "(limits.passthrough_auth_failures). "
            f"Send a valid GitLab token (PRIVATE-TOKEN), and retry after {seconds} second"
            f"{'s' if seconds != 1 else ''}.",
            retry_after_seconds=seconds,
            limit="gateway_passthrough_auth_failures",
        )

    def rejected(self, caller: Caller) -> None:
        """GitLab answered 401 to ``caller``'s token."""
        if not self._applies(caller):
            return
        self._accepted.pop(rate_limit_key(caller), None)
        self._counts.failed(source_key(caller))

    def accepted(self, caller: Caller) -> None:
        """GitLab answered ``caller``'s call: its token is good."""
        if self._applies(caller):
            self._accepted[rate_limit_key(caller)] = True
