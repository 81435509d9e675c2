"""Per-agent rate limits on GitLab tool calls: a token bucket per caller.

A caller is its agent id (client token, or ``X-Agent-Id`` on loopback), and in passthrough mode
also its GitLab credential, keyed on a SHA-256 of the token (never the token): the
``Caller.rate_limit_key`` the transport built once with the caller. In passthrough mode a call
also takes from its source's bucket (the agent, else the client address:
:func:`~gateway.tools.call_limits.source_key`), with the same limit: a caller that rotates tokens
gets a new credential bucket each time, but never a new source bucket. Each bucket holds
up to ``burst`` calls and refills at ``calls_per_second``; a call that finds it empty is refused
at once with ``rate_limited`` and the whole seconds until a call fits, the shape GitLab's own 429
takes (:class:`~gateway.gitlab.errors.GitLabRateLimited`), and is counted in
``gateway_rate_limited_total{agent}``. Broker tools are never limited: their waits are the
broker's own.

A bucket of our own rather than ``aiolimiter``: that library makes callers wait for capacity,
while an agent over its limit should be told at once how long to wait (a held call would keep
its connection and worker busy); the refusal needs the time until the next token, which
``aiolimiter`` does not expose; and the clock here is injectable, so tests need no sleeps.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.errors import gateway_refusal
from gateway.tools.call_limits import source_key
from gateway.tools.caller import rate_limit_key

if TYPE_CHECKING:
    from gateway.config import Settings
    from gateway.tools.caller import Caller

#: Buckets kept at most (least recently used dropped): passthrough credentials are not bounded by
#: configuration, and a dropped bucket is full again, which only errs towards letting calls in.
MAX_BUCKETS = 10_000


@dataclass(frozen=True)
class Limit:
    """``calls_per_second`` sustained, ``burst`` at once."""

    calls_per_second: float
    burst: int


class TokenBucket:
    """``limit.burst`` tokens, refilled continuously at ``limit.calls_per_second``."""

    __slots__ = ("_last", "_tokens", "limit")

    def __init__(self, limit: Limit, now: float) -> None:
        self.limit = limit
        self._tokens = float(limit.burst)
        self._last = now

    def take(self, now: float) -> float:
        """Take one token: 0.0 when taken, else the seconds until one is there."""
        rate = self.limit.calls_per_second
        self._tokens = min(float(self.limit.burst), self._tokens + (now - self._last) * rate)
        self._last = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / rate


class AgentLimiter:
    """The buckets of one gateway.

    Args:
        default: the limit of callers without one of their own (None: unlimited).
        per_agent: agent id → its own limit (from its client token).
        passthrough: callers bring their own GitLab credential (the label of anonymous callers).
        on_limited: called with the metric label (a configured agent id, ``passthrough`` or
            ``anonymous``) for every refused call.
        per_role: sign-in is on: a signed-in person's role → its own limit (from
            ``sign_in.role_access``); a person without one gets ``default``, never a client
            token's limit. None: sign-in is off.
        clock: monotonic seconds (tests pass a fake one).
    """

    def __init__(
        self,
        default: Limit | None,
        per_agent: Mapping[str, Limit],
        *,
        passthrough: bool,
        on_limited: Callable[[str], None],
        per_role: Mapping[str, Limit] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._default = default
        self._per_agent = dict(per_agent)
        self._per_role = None if per_role is None else dict(per_role)
        self._passthrough = passthrough
        self._on_limited = on_limited
        self._clock = clock
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()

    def check(self, caller: Caller) -> None:
        """Count one GitLab tool call of ``caller`` (in the bucket of its ``rate_limit_key``).

        Raises:
            ToolError: ``rate_limited`` with ``retry_after_seconds``: over its limit.
        """
        agent = caller.agent_id
        if self._per_role is not None and caller.gitlab_user is not None:
            limit = self._per_role.get(agent, self._default) if agent is not None else self._default
        else:
            limit = self._per_agent.get(agent, self._default) if agent is not None else self._default
        if limit is None:
            return
        now = self._clock()
        wait = self._take(rate_limit_key(caller), limit, now)
        if wait == 0.0 and self._passthrough and caller.credential is not None:
            # A new credential is a new bucket: its source's bucket holds across them.
            wait = self._take(source_key(caller), limit, now)
        if wait == 0.0:
            return
        self._on_limited(
            agent if agent is not None else ("passthrough" if self._passthrough else "anonymous")
        )
        seconds = max(1, math.ceil(wait))
        calls = "call" if limit.calls_per_second == 1 else "calls"
        raise gateway_refusal(
            "rate_limited",
            f"Rate limited by this gateway: at most {limit.calls_per_second:g} GitLab tool {calls} per "
            f"second (bursts of {limit.burst}) for {'agent ' + repr(agent) if agent else 'this caller'}. "
            f"Retry after {seconds} second{'s' if seconds != 1 else ''}.",
            retry_after_seconds=seconds,
            limit="gateway_agent_calls",
        )

    def _take(self, key: str, limit: Limit, now: float) -> float:
        bucket = self._buckets.get(key)
        if bucket is None or bucket.limit != limit:
            bucket = self._buckets[key] = TokenBucket(limit, now)
            if len(self._buckets) > MAX_BUCKETS:
                self._buckets.popitem(last=False)
        self._buckets.move_to_end(key)
        return bucket.take(now)


def build_limiter(settings: Settings, on_limited: Callable[[str], None]) -> AgentLimiter | None:
    """The limiter ``settings`` ask for (``limits`` and each client token's own), or None."""
    glob = settings.limits

    def limit(rate: float | None, burst: int | None) -> Limit | None:
        return None if rate is None else Limit(rate, burst or glob.burst or math.ceil(rate))

    default = limit(glob.calls_per_second, glob.burst)
    per_agent: dict[str, Limit] = {}
    for client in settings.client_tokens:
        if client.calls_per_second is None and client.burst is None:
            continue
        own = limit(client.calls_per_second or glob.calls_per_second, client.burst)
        if own is None:
            continue
        known = per_agent.get(client.agent_id)
        # Tokens of one agent share its bucket: the strictest of their limits holds.
        if known is None or own.calls_per_second < known.calls_per_second:
            per_agent[client.agent_id] = own
    per_role: dict[str, Limit] | None = None
    if settings.sign_in.enabled:
        per_role = {}
        for role, entry in settings.sign_in.role_access.items():
            own = limit(entry.calls_per_second or glob.calls_per_second, entry.burst)
            if own is not None and (entry.calls_per_second is not None or entry.burst is not None):
                per_role[role] = own
    if default is None and not per_agent and not per_role:
        return None
    return AgentLimiter(
        default,
        per_agent,
        passthrough=settings.gitlab.credential_mode == "passthrough",
        on_limited=on_limited,
        per_role=per_role,
    )
