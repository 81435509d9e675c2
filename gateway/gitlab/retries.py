"""The request loop: attempts of one GitLab call, with retries (tenacity), inside one deadline.

- Reads (GraphQL queries, GET/HEAD) are retried on connection errors, timeouts, 429, 502, 503,
  504 and GraphQL answers that say GitLab failed, with jittered exponential backoff that honours
  ``Retry-After``, sleeping with ``asyncio.sleep`` (never blocking the loop).
- A mutation is retried only when the request provably never reached GitLab (connect error,
  connect or pool timeout, a 429 from the rate limiter); see :mod:`gateway.gitlab.client`.
- A failure to connect at all (refused, host name not resolved, connect timeout) is retried
  only briefly: :data:`CONNECT_ATTEMPTS` attempts, short waits, none started past
  :data:`CONNECT_RETRY_SECONDS`. It rides over a GitLab restarting or a resolver hiccup; a GitLab
  that is down or a wrong ``gitlab.url`` stays so for longer than a caller should wait, and the
  error then says how many attempts failed over how long. A certificate that does not verify,
  or a port that does not speak TLS, is not retried: another try meets the same answer.
- ``gitlab.retry_deadline_seconds`` bounds the whole call: each attempt gets what is left of it
  (at most ``gitlab.timeout_seconds``), the response body included, and no wait is started that
  would cross it, so a long ``Retry-After`` fails fast with ``rate_limited``.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
)
from tenacity.stop import stop_base
from tenacity.wait import wait_exponential_jitter

from gateway.config import GitLabSettings
from gateway.gitlab.call import GitLabCall, Transient
from gateway.observability.metrics import Metrics

log = logging.getLogger("gateway.gitlab")

T = TypeVar("T")
SleepFn = Callable[[float], Awaitable[None]]
#: One attempt, given the loop time (``loop.time()``) by which it must be over.
Attempt = Callable[[float], Awaitable[T]]

_BACKOFF = wait_exponential_jitter(multiplier=0.5, max=8, jitter=0.5)
#: Attempts in all when no connection can be made (fewer if ``gitlab.retry_attempts`` says so).
CONNECT_ATTEMPTS = 3
#: No retry after a connect failure is started once this long has passed since the first attempt
#: (waits included): a connect timeout (``gitlab.connect_timeout_seconds``) is not retried.
CONNECT_RETRY_SECONDS = 1.5
#: 0.2 s, then 0.4 s, each plus up to 0.1 s: a GitLab that refused has a moment to come back.
_CONNECT_BACKOFF = wait_exponential_jitter(multiplier=0.2, max=0.8, jitter=0.1)


def _worth_retrying(exc: BaseException) -> bool:
    return isinstance(exc, Transient) and exc.retry


def _unreached(state: RetryCallState) -> bool:
    exc = state.outcome.exception() if state.outcome else None
    return isinstance(exc, Transient) and exc.unreached is not None


class _StopReaching(stop_base):
    """Stop retrying a GitLab that could not be connected to (see the module). ``started``: the
    loop time of the first attempt, made before tenacity's clock starts."""

    def __init__(self, loop: asyncio.AbstractEventLoop, started: float) -> None:
        self.loop = loop
        self.started = started

    def __call__(self, retry_state: RetryCallState) -> bool:
        if not _unreached(retry_state):
            return False
        spent = self.loop.time() - self.started + retry_state.upcoming_sleep
        return retry_state.attempt_number >= CONNECT_ATTEMPTS or spent > CONNECT_RETRY_SECONDS


#: Built once: it holds a bound method of itself, a reference cycle per instance.
_RETRY_TRANSIENT = retry_if_exception(_worth_retrying)
#: Extra wait on top of ``Retry-After`` (seconds, up to), so callers rate limited together do
#: not all come back in the same instant.
RETRY_AFTER_JITTER = 0.25


async def with_retries(
    call: GitLabCall,
    attempt: Attempt[T],
    settings: GitLabSettings,
    *,
    sleep: SleepFn = asyncio.sleep,
    metrics: Metrics | None = None,
) -> T:
    """Run ``attempt`` until it returns, raises something other than :class:`Transient`, or the
    tries or the deadline run out (then the transient's final error is raised)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = started + settings.retry_deadline_seconds
    attempts = 0

    async def one_attempt() -> T:
        nonlocal attempts
        attempts += 1
        return await attempt(min(deadline, loop.time() + settings.timeout_seconds))

    # Nearly every call succeeds at its first attempt, made here: tenacity takes over from the
    # first transient failure (its state and strategies, set up for every call, were ~5% of a
    # tool call's CPU).
    try:
        return await one_attempt()
    except Transient as exc:
        failed: Transient | None = exc

    async def again() -> T:
        # tenacity's first attempt is the one that just failed: its tries, waits and log lines
        # count from there, as if it had made it.
        nonlocal failed
        if failed is not None:
            first, failed = failed, None
            raise first
        return await one_attempt()

    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, Transient) and exc.retry_after is not None:
            # Never earlier than GitLab asked; a little later so throttled callers spread out.
            return exc.retry_after + random.uniform(0, RETRY_AFTER_JITTER)  # noqa: S311 - not security
        if _unreached(state):
            return float(_CONNECT_BACKOFF(state))
        return float(_BACKOFF(state))

    async def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        if metrics is not None:
            metrics.gitlab_retries.labels(call.operation).inc()
            if isinstance(exc, Transient) and exc.retry_after is not None:
                metrics.gitlab_rate_limit_wait.inc(exc.retry_after)
        log.info(
            "retrying GitLab request",
            extra={
                "operation": call.operation,
                "attempt": state.attempt_number,
                "request_id": call.request_id,
                "reason": exc.final.message if isinstance(exc, Transient) else None,
                "wait_seconds": round(state.upcoming_sleep, 3),
            },
        )

    retrying = AsyncRetrying(
        sleep=sleep,
        # stop_before_delay gives up *before* a wait that would cross the deadline (what is left
        # of it: tenacity's clock starts now, after the first attempt).
        stop=stop_after_attempt(settings.retry_attempts)
        | stop_before_delay(deadline - loop.time())
        | _StopReaching(loop, started),
        wait=wait,
        retry=_RETRY_TRANSIENT,
        before_sleep=before_sleep,
        reraise=True,
    )

    try:
        return await retrying(again)
    except Transient as exc:
        if exc.unreached is not None:
            raise exc.unreached(attempts, loop.time() - started) from None
        raise exc.final from None
    finally:
        # tenacity keeps its last steps (bound methods of ``retrying``) in ``iter_state``: a
        # reference cycle that would leave every call's retry objects to the cyclic garbage
        # collector, after they had lived through the GitLab request and been promoted to an
        # older generation. Clearing the steps lets reference counting free them at once.
        retrying.iter_state.reset()
