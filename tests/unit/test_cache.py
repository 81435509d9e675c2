"""The GitLab data cache: partitioned per credential, single-flight, bounded, errors never kept.

The upstream here is the real :class:`GitLabClient` against a respx-mocked GitLab, so request
counts are what GitLab would see.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import respx

from gateway.cache import AsyncTTLCache, CacheRegistry, approximate_size, credential_key
from gateway.config import GitLabSettings
from gateway.gitlab.client import GitLabClient
from gateway.gitlab.credentials import Credential
from gateway.gitlab.errors import GitLabUnauthorized, GitLabUpstreamError
from gateway.observability.metrics import Metrics

BASE = "https://gitlab.example.com"
TAGS = "/projects/{id}/repository/tags"
ALICE = Credential(header="PRIVATE-TOKEN", token="glpat-alice-0000000000", source="passthrough")
BOB = Credential(header="PRIVATE-TOKEN", token="glpat-bob-111111111111", source="passthrough")


async def _no_sleep(seconds: float) -> None:
    return None


@pytest.fixture
async def gitlab() -> AsyncIterator[GitLabClient]:
    settings = GitLabSettings(url=BASE, retry_attempts=1)
    async with httpx.AsyncClient() as http:
        yield GitLabClient(settings, http=http, sleep=_no_sleep)


def _sample(metrics: Metrics, name: str, cache: str) -> float:
    value = metrics.registry.get_sample_value(name, {"cache": cache})
    return 0.0 if value is None else value


def _tags_by_token(request: httpx.Request) -> httpx.Response:
    """GitLab answers per caller: each token sees its own tags."""
    who = request.headers["PRIVATE-TOKEN"].split("-")[1]
    return httpx.Response(200, json=[{"name": f"{who}-only-tag"}])


async def test_two_credentials_never_see_each_others_data(gitlab: GitLabClient) -> None:
    metrics = Metrics()
    cache = CacheRegistry(enabled=True, max_entries=16, metrics=metrics).get("refs", ttl=60)

    async def tags(credential: Credential) -> Any:
        return await cache.get_or_load(
            credential_key(credential, "tags", 42),
            lambda: gitlab.rest("GET", TAGS, credential=credential, path_params={"id": "42"}),
        )

    with respx.mock(base_url=BASE, assert_all_called=True) as mock:
        route = mock.get("/api/v4/projects/42/repository/tags").mock(side_effect=_tags_by_token)
        assert await tags(ALICE) == [{"name": "alice-only-tag"}]
        assert await tags(BOB) == [{"name": "bob-only-tag"}]  # not Alice's cached answer
        assert await tags(ALICE) == [{"name": "alice-only-tag"}]  # Alice's own, from the cache
        assert await tags(BOB) == [{"name": "bob-only-tag"}]

    assert route.call_count == 2  # one per credential
    assert _sample(metrics, "gateway_cache_misses_total", "refs") == 2
    assert _sample(metrics, "gateway_cache_hits_total", "refs") == 2


def test_keys_carry_a_keyed_hash_never_the_token() -> None:
    key = credential_key(ALICE, "blob", 42, "a" * 40, "README.md")
    assert key[1:] == ("blob", 42, "a" * 40, "README.md")
    assert key[0] != credential_key(BOB, "x")[0]
    assert ALICE.token not in repr(key)
    assert Credential(header="PRIVATE-TOKEN", token="").cache_key == "anonymous"


async def test_ten_concurrent_identical_reads_make_one_gitlab_request(gitlab: GitLabClient) -> None:
    metrics = Metrics()
    cache = CacheRegistry(enabled=True, max_entries=16, metrics=metrics).get("refs", ttl=60)
    release = asyncio.Event()
    arrived = asyncio.Event()

    async def slow_tags(request: httpx.Request) -> httpx.Response:
        arrived.set()
        await release.wait()  # hold the first request until all ten callers are waiting
        return httpx.Response(200, json=[{"name": "v1.0.0"}])

    async def read() -> Any:
        return await cache.get_or_load(
            credential_key(ALICE, "tags", 42),
            lambda: gitlab.rest("GET", TAGS, credential=ALICE, path_params={"id": "42"}),
        )

    with respx.mock(base_url=BASE) as mock:
        route = mock.get("/api/v4/projects/42/repository/tags").mock(side_effect=slow_tags)
        readers = [asyncio.create_task(read()) for _ in range(10)]
        await asyncio.wait_for(arrived.wait(), 5)  # the one request has reached "GitLab"
        await asyncio.sleep(0.01)  # ...and every reader is waiting for it
        release.set()
        results = await asyncio.gather(*readers)

    assert route.call_count == 1
    assert results == [[{"name": "v1.0.0"}]] * 10
    assert _sample(metrics, "gateway_cache_misses_total", "refs") == 1
    assert _sample(metrics, "gateway_cache_hits_total", "refs") == 9


async def test_an_error_is_not_cached(gitlab: GitLabClient) -> None:
    cache: AsyncTTLCache[Any] = AsyncTTLCache("refs", maxsize=16, ttl=60)
    answers = iter(
        [
            httpx.Response(401, json={"message": "401 Unauthorized"}),
            httpx.Response(500, json={"message": "boom"}),
            httpx.Response(200, json=[{"name": "v1"}]),
        ]
    )

    async def read() -> Any:
        return await cache.get_or_load(
            credential_key(ALICE, "tags", 42),
            lambda: gitlab.rest("GET", TAGS, credential=ALICE, path_params={"id": "42"}),
        )

    with respx.mock(base_url=BASE) as mock:
        route = mock.get("/api/v4/projects/42/repository/tags").mock(side_effect=lambda _: next(answers))
        with pytest.raises(GitLabUnauthorized):
            await read()
        with pytest.raises(GitLabUpstreamError):
            await read()
        assert await read() == [{"name": "v1"}]
        assert await read() == [{"name": "v1"}]  # now cached

    assert route.call_count == 3
    assert len(cache) == 1


async def test_a_failed_shared_load_reaches_every_waiter_and_is_not_kept() -> None:
    cache: AsyncTTLCache[str] = AsyncTTLCache("refs", maxsize=16, ttl=60)
    calls = 0
    gate = asyncio.Event()

    async def failing() -> str:
        nonlocal calls
        calls += 1
        await gate.wait()
        raise GitLabUpstreamError("GitLab failed with status 502; try again later.")

    waiters = [asyncio.create_task(cache.get_or_load(("k",), failing)) for _ in range(3)]
    await asyncio.sleep(0)
    gate.set()
    outcomes = await asyncio.gather(*waiters, return_exceptions=True)
    assert calls == 1
    assert all(isinstance(o, GitLabUpstreamError) for o in outcomes)

    async def ok() -> str:
        return "fresh"

    assert await cache.get_or_load(("k",), ok) == "fresh"


async def test_the_off_switch_loads_every_time() -> None:
    registry = CacheRegistry(enabled=False, max_entries=16)
    cache = registry.get("blobs", ttl=600)
    calls = 0

    async def load() -> str:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0)
        return f"v{calls}"

    assert await cache.get_or_load(("k",), load) == "v1"
    assert await cache.get_or_load(("k",), load) == "v2"  # nothing was kept
    assert len(cache) == 0 and cache.peek(("k",)) is None
    # In-flight identical reads still share a request: that can never serve stale data.
    assert await asyncio.gather(*(cache.get_or_load(("k",), load) for _ in range(3))) == ["v3"] * 3


async def test_entries_expire_after_their_ttl() -> None:
    now = [1000.0]
    metrics = Metrics()
    cache: AsyncTTLCache[str] = AsyncTTLCache(
        "refs", maxsize=16, ttl=30, metrics=metrics, timer=lambda: now[0]
    )
    loads = 0

    async def load() -> str:
        nonlocal loads
        loads += 1
        return f"v{loads}"

    assert await cache.get_or_load(("k",), load) == "v1"
    now[0] += 29.9
    assert await cache.get_or_load(("k",), load) == "v1"
    now[0] += 0.2
    assert await cache.get_or_load(("k",), load) == "v2"  # expired, loaded again
    assert _sample(metrics, "gateway_cache_evictions_total", "refs") == 1


async def test_bounded_by_entries_least_recently_used_first() -> None:
    metrics = Metrics()
    cache: AsyncTTLCache[str] = AsyncTTLCache("blobs", maxsize=2, ttl=60, metrics=metrics)
    for key in ("a", "b"):
        cache.put((key,), key)
    assert cache.peek(("a",)) == "a"  # "a" is now the most recently used
    cache.put(("c",), "c")
    assert len(cache) == 2
    assert cache.peek(("b",)) is None and cache.peek(("a",)) == "a" and cache.peek(("c",)) == "c"
    assert _sample(metrics, "gateway_cache_evictions_total", "blobs") == 1
    assert metrics.registry.get_sample_value("gateway_cache_entries", {"cache": "blobs"}) == 2


async def test_bounded_by_bytes_and_oversized_values_are_served_but_not_kept() -> None:
    metrics = Metrics()
    cache: AsyncTTLCache[str] = AsyncTTLCache("blobs", maxsize=100, ttl=60, max_bytes=4096, metrics=metrics)
    megabyte = "x" * 1_048_576

    async def big() -> str:
        return megabyte

    assert await cache.get_or_load(("big",), big) == megabyte
    assert len(cache) == 0

    for i in range(10):
        cache.put((i,), "y" * 1000)
    assert cache.currsize <= 4096
    assert 2 <= len(cache) < 10
    assert metrics.registry.get_sample_value("gateway_cache_size_bytes", {"cache": "blobs"}) == cache.currsize


async def test_one_cancelled_caller_does_not_fail_the_others() -> None:
    cache: AsyncTTLCache[str] = AsyncTTLCache("refs", maxsize=16, ttl=60)
    gate = asyncio.Event()
    calls = 0

    async def load() -> str:
        nonlocal calls
        calls += 1
        await gate.wait()
        return "value"

    first = asyncio.create_task(cache.get_or_load(("k",), load))
    second = asyncio.create_task(cache.get_or_load(("k",), load))
    await asyncio.sleep(0.01)
    first.cancel()
    await asyncio.sleep(0)
    gate.set()
    assert await second == "value"
    assert first.cancelled()
    assert calls == 1
    assert cache.peek(("k",)) == "value"


async def test_the_load_stops_when_every_caller_has_gone() -> None:
    cache: AsyncTTLCache[str] = AsyncTTLCache("refs", maxsize=16, ttl=60)
    started = asyncio.Event()
    stopped = asyncio.Event()

    async def load() -> str:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            stopped.set()
            raise
        return "never"

    caller = asyncio.create_task(cache.get_or_load(("k",), load))
    await started.wait()
    caller.cancel()
    await asyncio.wait_for(stopped.wait(), 1)

    async def fresh() -> str:
        return "fresh"

    assert await cache.get_or_load(("k",), fresh) == "fresh"  # not stuck on the cancelled load


def test_approximate_size_counts_content() -> None:
    blob = {"path": "a.py", "content": "z" * 10_000, "lines": ["a"] * 10}
    assert 10_000 < approximate_size(blob) < 11_500
    assert approximate_size(None) > 0
