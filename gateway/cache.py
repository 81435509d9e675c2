"""Async caches of GitLab data: cachetools ``TTLCache`` as storage, single-flight on top.

Rules (``shared/spec/design.md``, standing rules; ``shared/spec/stack_notes.md`` §cachetools):

- Keys start with the credential's keyed hash (:attr:`Credential.cache_key`), so two callers
  never see each other's data.
- Bounded size and a TTL per cache; only immutable or short-lived data is cached.
- Concurrent identical misses share one upstream call; errors are never cached.
- ``cache.enabled = false`` turns every cache into a pass-through (single-flight stays on).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Generic, TypeVar

from cachetools import TTLCache

from gateway.observability.metrics import Metrics

T = TypeVar("T")


class _CountingTTLCache(TTLCache[Hashable, Any]):
    """A ``TTLCache`` that counts evictions (room or age) on a callback."""

    def __init__(self, maxsize: int, ttl: float, on_evict: Callable[[], None]) -> None:
        super().__init__(maxsize=maxsize, ttl=ttl)
        self._on_evict = on_evict

    def popitem(self) -> tuple[Hashable, Any]:
        item = super().popitem()
        self._on_evict()
        return item

    def expire(self, time: float | None = None) -> Any:
        expired = super().expire(time)
        for _ in expired or ():
            self._on_evict()
        return expired


class AsyncTTLCache(Generic[T]):
    """A bounded TTL cache for one kind of data, safe for concurrent coroutines.

    Args:
        name: label for metrics (``blobs``, ``refs``...).
        maxsize: entries at most.
        ttl: seconds an entry lives.
        enabled: False makes :meth:`get_or_load` always load (still single-flight).
        metrics: where hits, misses and evictions are counted.
    """

    def __init__(
        self, name: str, *, maxsize: int, ttl: float, enabled: bool = True, metrics: Metrics | None = None
    ) -> None:
        self.name = name
        self.enabled = enabled and ttl > 0
        self._metrics = metrics
        self._store: _CountingTTLCache = _CountingTTLCache(maxsize, ttl if ttl > 0 else 1, self._evicted)
        self._inflight: dict[Hashable, asyncio.Future[T]] = {}

    def _evicted(self) -> None:
        if self._metrics is not None:
            self._metrics.cache_evictions.labels(self.name).inc()

    def _count(self, hit: bool) -> None:
        if self._metrics is not None:
            (self._metrics.cache_hits if hit else self._metrics.cache_misses).labels(self.name).inc()

    def peek(self, key: Hashable) -> T | None:
        """The cached value, or None (counts nothing)."""
        if not self.enabled:
            return None
        value: T | None = self._store.get(key)
        return value

    async def get_or_load(self, key: Hashable, load: Callable[[], Awaitable[T]]) -> T:
        """Return the cached value for ``key``, or await ``load()`` once and cache its result.

        Concurrent callers with the same ``key`` share one ``load()``. An exception from ``load``
        reaches every waiting caller and nothing is cached.
        """
        if self.enabled:
            try:
                value: T = self._store[key]
            except KeyError:
                pass
            else:
                self._count(True)
                return value
        pending = self._inflight.get(key)
        if pending is not None:
            self._count(True)
            return await asyncio.shield(pending)
        self._count(False)
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            value = await load()
        except BaseException as exc:
            if not future.done():
                future.set_exception(exc)
                future.exception()  # mark retrieved when nobody else waits
            raise
        else:
            if self.enabled:
                self._store[key] = value
            future.set_result(value)
            return value
        finally:
            self._inflight.pop(key, None)

    def put(self, key: Hashable, value: T) -> None:
        """Store ``value`` (no-op when disabled)."""
        if self.enabled:
            self._store[key] = value

    def clear(self) -> None:
        self._store.clear()

    def __len__(self) -> int:
        return len(self._store)


class CacheRegistry:
    """The app's named caches, created on first use with the configured TTLs.

    Args:
        enabled: the ``cache.enabled`` switch.
        max_entries: default bound per cache.
        metrics: shared metrics.
    """

    def __init__(self, *, enabled: bool, max_entries: int, metrics: Metrics | None = None) -> None:
        self.enabled = enabled
        self.max_entries = max_entries
        self.metrics = metrics
        self._caches: dict[str, AsyncTTLCache[Any]] = {}

    def get(self, name: str, *, ttl: float, maxsize: int | None = None) -> AsyncTTLCache[Any]:
        """The cache called ``name`` (created with ``ttl`` seconds on first use)."""
        cache = self._caches.get(name)
        if cache is None:
            cache = AsyncTTLCache(
                name,
                maxsize=maxsize or self.max_entries,
                ttl=ttl,
                enabled=self.enabled,
                metrics=self.metrics,
            )
            self._caches[name] = cache
        return cache
