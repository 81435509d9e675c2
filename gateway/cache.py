"""Async caches of GitLab data: cachetools ``TTLCache`` as storage, single-flight on top.

Rules (cachetools, https://cachetools.readthedocs.io/):

- Keys start with the credential's keyed hash (:func:`credential_key`, built on
  :attr:`Credential.cache_key`), so two callers never see each other's data.
- Bounded: at most ``cache.max_entries`` entries and about ``cache.max_bytes`` bytes per cache
  (least recently used first out); a TTL per kind of data; only immutable or short-lived data is
  cached (``docs/operations.md`` lists what and for how long).
- Concurrent identical misses share one upstream call (single-flight). The load runs in its own
  task, so one caller's cancellation does not fail the others; it is cancelled only when every
  caller waiting for it has gone.
- Errors are never cached: a failed load reaches every caller waiting for it, and the next call
  loads again.
- ``cache.enabled = false`` turns every cache into a pass-through (single-flight stays on: it
  only merges requests that are in flight at the same moment, so it can never serve stale data).

All access happens on the event loop's thread (cachetools is not thread-safe); never touch a
cache from ``asyncio.to_thread`` workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from cachetools import TTLCache

from gateway.observability.metrics import Metrics

T = TypeVar("T")

#: Bytes counted for each entry on top of its value (key, links, dict slot): keeps tiny values
#: from making the byte bound meaningless.
ENTRY_OVERHEAD_BYTES = 200

# Tuples, not ``X | Y`` unions: isinstance checks a tuple in a fraction of the time, and the size
# of every value is estimated on each store (a cached file read's walk took ~40 us with unions).
_TEXT_TYPES = (str, bytes, bytearray, memoryview)
_SCALAR_TYPES = (bool, int, float)
_COLLECTION_TYPES = (list, tuple, set, frozenset)


class Partitioned(Protocol):
    """What a cache key is partitioned by: a GitLab credential (``Credential.cache_key``), named
    by shape so the cache, which the GitLab client uses, imports nothing of it."""

    @property
    def cache_key(self) -> str: ...


def credential_key(credential: Partitioned, *parts: Hashable) -> tuple[Hashable, ...]:
    """A cache key partitioned by ``credential``: ``(keyed hash, *parts)``.

    The keyed hash (HMAC with a per-process secret) never reveals the token, and two different
    tokens never share a key. Example: ``credential_key(cred, "blob", project_id, sha, path)``.
    """
    return (credential.cache_key, *parts)


def approximate_size(value: Any, *, _depth: int = 0) -> int:
    """Rough size of ``value`` in bytes, for the cache's byte bound.

    Strings and bytes count their length, containers the sum of their items (six levels deep),
    other objects their ``sys.getsizeof`` plus their attributes. An estimate, not an audit: it
    exists so that a few 10 MiB files cannot take the process's memory.
    """
    if isinstance(value, _TEXT_TYPES):
        return len(value) + 50
    if value is None or isinstance(value, _SCALAR_TYPES):
        return 24
    if _depth >= 6:
        return sys.getsizeof(value)
    if isinstance(value, dict):
        return 64 + sum(
            approximate_size(k, _depth=_depth + 1) + approximate_size(v, _depth=_depth + 1)
            for k, v in value.items()
        )
    if isinstance(value, _COLLECTION_TYPES):
        return 56 + sum(approximate_size(item, _depth=_depth + 1) for item in value)
    attributes = getattr(value, "__dict__", None)
    if isinstance(attributes, dict):
        return sys.getsizeof(value) + approximate_size(attributes, _depth=_depth + 1)
    return sys.getsizeof(value)


class _BoundedTTLCache(TTLCache[Hashable, Any]):
    """A ``TTLCache`` bounded in bytes (``maxsize`` with ``getsizeof``) and in entries, that
    reports each eviction (for room or for age) to a callback."""

    def __init__(
        self,
        *,
        max_bytes: int,
        max_entries: int,
        ttl: float,
        timer: Callable[[], float],
        on_evict: Callable[[], None],
    ) -> None:
        super().__init__(maxsize=max_bytes, ttl=ttl, timer=timer, getsizeof=self._sizeof)
        self._max_entries = max_entries
        self._on_evict = on_evict

    @staticmethod
    def _sizeof(value: Any) -> int:
        return approximate_size(value) + ENTRY_OVERHEAD_BYTES

    def __setitem__(self, key: Hashable, value: Any) -> None:
        super().__setitem__(key, value)
        while len(self) > self._max_entries:
            self.popitem()

    def popitem(self) -> tuple[Hashable, Any]:
        item = super().popitem()
        self._on_evict()
        return item

    def expire(self, time: float | None = None) -> Any:
        expired = super().expire(time)
        for _ in expired or ():
            self._on_evict()
        return expired


@dataclass
class _Flight:
    """One load in progress and how many callers wait for it."""

    task: asyncio.Task[Any]
    waiters: int = 0


class AsyncTTLCache(Generic[T]):
    """A bounded TTL cache for one kind of data, safe for concurrent coroutines of one loop.

    Args:
        name: the ``cache`` label of the metrics (``blobs``, ``refs``...): a fixed name from code.
        maxsize: entries at most.
        ttl: seconds an entry lives; 0 disables storing (single-flight stays).
        enabled: False makes :meth:`get_or_load` always load (still single-flight).
        metrics: where hits, misses, evictions, entries and bytes are counted.
        max_bytes: approximate bytes at most (:func:`approximate_size`); a value bigger than
            this on its own is returned but not stored. None: no byte bound.
        timer: the clock (seconds, monotonic); tests pass a fake one.
    """

    def __init__(
        self,
        name: str,
        *,
        maxsize: int,
        ttl: float,
        enabled: bool = True,
        metrics: Metrics | None = None,
        max_bytes: int | None = None,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.ttl = ttl
        self.enabled = enabled and ttl > 0
        self._metrics = metrics
        self._store = _BoundedTTLCache(
            max_bytes=max_bytes if max_bytes is not None else sys.maxsize,
            max_entries=maxsize,
            ttl=ttl if ttl > 0 else 1,
            timer=timer,
            on_evict=self._evicted,
        )
        self._inflight: dict[Hashable, _Flight] = {}
        if metrics is not None:
            # Counters at 0 from the start: a hit ratio and an eviction rate exist before the first one.
            for counter in (metrics.cache_hits, metrics.cache_misses, metrics.cache_evictions):
                counter.labels(name)
            metrics.cache_entries.labels(name).set_function(lambda: len(self._store))
            metrics.cache_bytes.labels(name).set_function(lambda: self._store.currsize)

    def _evicted(self) -> None:
        if self._metrics is not None:
            self._metrics.cache_evictions.labels(self.name).inc()

    def _count(self, hit: bool) -> None:
        if self._metrics is not None:
            (self._metrics.cache_hits if hit else self._metrics.cache_misses).labels(self.name).inc()

    def peek(self, key: Hashable) -> T | None:
        """The cached value, or None (counts nothing, loads nothing)."""
        if not self.enabled:
            return None
        value: T | None = self._store.get(key)
        return value

    async def get_or_load(self, key: Hashable, load: Callable[[], Awaitable[T]]) -> T:
        """Return the cached value for ``key``, or await ``load()`` once and cache its result.

        ``key`` must start with the caller's credential partition (:func:`credential_key`).
        Concurrent callers with the same ``key`` share one ``load()`` (counted as one miss and
        then hits). An exception from ``load`` reaches every waiting caller and nothing is
        cached. Cancelling one caller does not cancel the load while others wait for it.
        """
        if self.enabled:
            try:
                value: T = self._store[key]
            except KeyError:
                pass
            else:
                self._count(True)
                return value
        flight = self._inflight.get(key)
        if flight is None:
            self._count(False)
            flight = _Flight(asyncio.get_running_loop().create_task(self._load(key, load)))
            flight.task.add_done_callback(_consume_exception)
            self._inflight[key] = flight
        else:
            self._count(True)
        flight.waiters += 1
        try:
            result: T = await asyncio.shield(flight.task)
            return result
        except asyncio.CancelledError:
            if flight.waiters == 1 and not flight.task.done():
                # Nobody else wants it: don't keep GitLab busy for nothing. Forget the flight
                # first, so a caller arriving now starts a fresh load instead of joining one
                # that is being cancelled.
                if self._inflight.get(key) is flight:
                    del self._inflight[key]
                flight.task.cancel()
            raise
        finally:
            flight.waiters -= 1

    async def _load(self, key: Hashable, load: Callable[[], Awaitable[T]]) -> T:
        try:
            value = await load()
            self.put(key, value)
            return value
        finally:
            flight = self._inflight.get(key)
            if flight is not None and flight.task is asyncio.current_task():
                del self._inflight[key]

    def put(self, key: Hashable, value: T) -> None:
        """Store ``value`` (no-op when disabled or when the value alone exceeds the byte bound)."""
        if not self.enabled:
            return
        with contextlib.suppress(ValueError):  # cachetools: "value too large" for max_bytes
            self._store[key] = value

    def clear(self) -> None:
        """Drop every entry (not counted as evictions)."""
        self._store.clear()

    def __len__(self) -> int:
        return len(self._store)

    @property
    def currsize(self) -> int:
        """Approximate bytes held."""
        return int(self._store.currsize)


def _consume_exception(task: asyncio.Task[Any]) -> None:
    # Every waiter may have been cancelled before a failed load finished: retrieve its exception
    # so asyncio does not log "Task exception was never retrieved".
    if not task.cancelled():
        task.exception()


class CacheRegistry:
    """The app's named caches, created on first use with the configured bounds.

    Args:
        enabled: the ``cache.enabled`` switch.
        max_entries: bound per cache (entries).
        metrics: shared metrics.
        max_bytes: bound per cache (approximate bytes), None for none.
    """

    def __init__(
        self,
        *,
        enabled: bool,
        max_entries: int,
        metrics: Metrics | None = None,
        max_bytes: int | None = None,
    ) -> None:
        self.enabled = enabled
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.metrics = metrics
        self._caches: dict[str, AsyncTTLCache[Any]] = {}

    def get(self, name: str, *, ttl: float, maxsize: int | None = None) -> AsyncTTLCache[Any]:
        """The cache called ``name`` (created with ``ttl`` seconds on first use).

        ``name`` is a metrics label: pass a constant from code (``"blobs"``), never caller input.
        """
        cache = self._caches.get(name)
        if cache is None:
            cache = AsyncTTLCache(
                name,
                maxsize=maxsize or self.max_entries,
                ttl=ttl,
                enabled=self.enabled,
                metrics=self.metrics,
                max_bytes=self.max_bytes,
            )
            self._caches[name] = cache
        return cache

    def names(self) -> list[str]:
        """Names of the caches created so far."""
        return sorted(self._caches)
