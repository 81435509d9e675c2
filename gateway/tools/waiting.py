"""Server-side waits (``wait_seconds``): the gateway polls GitLab for the caller until a resource
settles or the caller's time is up, and callers waiting on the same thing share every poll.

Used by ``get_duo_session`` and ``get_pipeline``. Rules:

- One watch per key (the caller's credential partition, a kind, an id: see
  :func:`gateway.cache.credential_key`): two callers with the same credential waiting on the same
  pipeline cause one GitLab read per interval, never two; two credentials never share a read, so
  nobody sees what their own token could not read.
- The watch reads at once, then every ``interval`` seconds, multiplied by ``backoff`` after each
  read that did not settle, up to ``max_interval``. A caller joining a watch whose last read is
  older than ``interval`` wakes it for an immediate read, so nobody starts from a stale state.
- A read refused with ``rate_limited`` past the client's own retries does not end the wait: the
  watch sleeps at least the ``retry_after_seconds`` GitLab asked for, then reads again. Any other
  failure ends the watch and reaches every waiter.
- The watch stops as soon as the last caller waiting on it goes (its call cancelled, its stream
  closed, its time up): no request is sent for nobody.
- Each waiter gets every new state as it is read (for its progress notifications) and answers
  with the first settled state, or with the last state read when its own time runs out.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from gateway.gitlab.errors import GitLabRateLimited

T = TypeVar("T")

#: ``await on_state(state, elapsed_seconds)`` for each state a waiter sees before it answers.
OnState = Callable[[T, float], Awaitable[None]]


@dataclass(frozen=True)
class Waited(Generic[T]):
    """How a wait ended.

    Attributes:
        state: the last state read.
        settled: True when ``state`` is final (the wait ended early); False when time ran out.
        elapsed: seconds the caller waited.
    """

    state: T
    settled: bool
    elapsed: float


@dataclass
class _Watch:
    """One resource being polled, and the callers waiting on it."""

    read: Callable[[], Awaitable[Any]]
    settled: Callable[[Any], bool]
    interval: float
    max_interval: float
    backoff: float
    waiters: int = 0
    version: int = 0
    state: Any = None
    read_at: float = 0.0
    error: BaseException | None = None
    rate_limited: GitLabRateLimited | None = None
    task: asyncio.Task[None] | None = None
    updated: asyncio.Event = field(default_factory=asyncio.Event)
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def publish(self) -> None:
        self.version += 1
        updated, self.updated = self.updated, asyncio.Event()
        updated.set()


class SharedPolls:
    """The app's watches (one instance in :class:`~gateway.tools.context.Services`).

    All access happens on the event loop's thread.
    """

    def __init__(self) -> None:
        self._watches: dict[Hashable, _Watch] = {}

    def __len__(self) -> int:
        """Watches polling now."""
        return len(self._watches)

    async def wait(
        self,
        key: Hashable,
        read: Callable[[], Awaitable[T]],
        settled: Callable[[T], bool],
        *,
        wait_seconds: float,
        interval: float,
        max_interval: float | None = None,
        backoff: float = 1.5,
        on_state: OnState[T] | None = None,
    ) -> Waited[T]:
        """Wait up to ``wait_seconds`` for ``settled(state)``, sharing polls by ``key``.

        Args:
            key: what is polled, starting with the caller's credential partition.
            read: one GitLab read of the resource (the first caller's ``read`` serves everyone
                on the same key; it must not depend on anything but the key).
            settled: True for a final state (no need to poll on).
            wait_seconds: the caller's budget; 0 reads once.
            interval, max_interval, backoff: the polling schedule (see the module docstring).
            on_state: called with each unsettled state this caller sees, and the seconds elapsed.

        Raises:
            what ``read`` raised (other than a rate limit, unless no state could be read before
            the time ran out); asyncio.CancelledError when the caller is cancelled.
        """
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + wait_seconds
        watch = self._watches.get(key)
        if watch is None or (watch.task is not None and watch.task.done()):
            watch = _Watch(read, settled, interval, max(interval, max_interval or interval), backoff)
            self._watches[key] = watch
            watch.task = loop.create_task(self._poll(key, watch))
        elif watch.version and loop.time() - watch.read_at > interval:
            watch.wake.set()  # its last read is older than this caller wants: read now
        watch.waiters += 1
        # The versions this caller has seen: a state read within ``interval`` counts as its
        # first read; an older one does not (the watch was woken to read again).
        seen = watch.version
        if watch.version and loop.time() - watch.read_at <= interval:
            seen -= 1
        try:
            while True:
                updated = watch.updated
                if watch.version > seen:
                    seen = watch.version
                    if watch.error is not None:
                        raise watch.error
                    state: T = watch.state
                    elapsed = loop.time() - started
                    if settled(state):
                        return Waited(state, True, elapsed)
                    if loop.time() >= deadline:
                        return Waited(state, False, elapsed)
                    if on_state is not None:
                        await on_state(state, elapsed)
                remaining: float | None = deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    if seen:
                        return Waited(watch.state, False, loop.time() - started)
                    if watch.rate_limited is not None:
                        raise watch.rate_limited
                    remaining = None  # nothing read yet: the first read is always awaited
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await updated.wait()
        finally:
            watch.waiters -= 1
            if watch.waiters == 0:
                if self._watches.get(key) is watch:
                    del self._watches[key]
                if watch.task is not None and not watch.task.done():
                    watch.task.cancel()

    async def _poll(self, key: Hashable, watch: _Watch) -> None:
        interval = watch.interval
        try:
            while True:
                try:
                    watch.state = await watch.read()
                except GitLabRateLimited as exc:
                    watch.rate_limited = exc
                    # Not cut short by a caller joining: GitLab asked for this pause.
                    await asyncio.sleep(max(interval, float(exc.retry_after_seconds)))
                    continue
                else:
                    watch.rate_limited = None
                    watch.read_at = asyncio.get_running_loop().time()
                    watch.publish()
                    if watch.settled(watch.state):
                        return
                pause, interval = interval, min(interval * watch.backoff, watch.max_interval)
                watch.wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(pause):
                        await watch.wake.wait()
                if watch.wake.is_set():
                    interval = watch.interval  # a new caller: start the schedule again
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # reaches every waiter, typed (ToolError, GitLabError...)
            watch.error = exc
            watch.publish()
        finally:
            if self._watches.get(key) is watch and (watch.error is not None or watch.waiters == 0):
                del self._watches[key]
