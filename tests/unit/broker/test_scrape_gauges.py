"""The broker's gauges as a ``/metrics`` scrape reads them from the database, and a scrape that
the database cannot answer (it still succeeds, with ``gateway_broker_database_up 0``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from gateway.broker import housekeeping
from gateway.broker.database import DatabaseUnavailable
from tests.unit.broker.conftest import Env, EnvFactory


async def _scrape(env: Env) -> None:
    env.broker.housekeeping._scraped_at = -housekeeping.SCRAPE_MIN_INTERVAL  # a scrape a while later
    await env.broker.housekeeping.refresh_for_scrape()


async def test_a_scrape_reads_state_time_in_state_queues_and_last_calls(env: Env) -> None:
    reg = env.metrics.registry
    before = time.time()
    await env.ok("pm", "start_phase", {"phase": 1, "issues": ["A"]})
    await env.ok("pm", "send_message", {"to": "dev", "subject": "s", "body": {}})
    await env.ok("dev", "request_human", {"reason": "which API?"})
    await _scrape(env)
    assert reg.get_sample_value("gateway_broker_database_up") == 1
    assert reg.get_sample_value("gateway_broker_state", {"state": "HUMAN_NEEDED"}) == 1
    since = reg.get_sample_value("gateway_broker_state_since_timestamp_seconds")
    assert since is not None and before - 1 <= since <= time.time()
    queues = (await env.status())["queues"]
    for agent, depth in queues.items():  # as get_pipeline_status says
        assert reg.get_sample_value("gateway_broker_queue_depth", {"agent": agent}) == depth
    assert queues["dev"] >= 1
    assert reg.get_sample_value("gateway_broker_agent_waiting", {"agent": "dev"}) == 0
    pm_seen = reg.get_sample_value("gateway_broker_agent_last_seen_timestamp_seconds", {"agent": "pm"})
    assert pm_seen is not None and before - 1 <= pm_seen <= time.time()
    # An agent that never called has no last-seen sample (not a misleading 0, i.e. 1970).
    assert (
        reg.get_sample_value("gateway_broker_agent_last_seen_timestamp_seconds", {"agent": "reviewer"})
        is None
    )

    waiting = asyncio.create_task(env.wait("reviewer", timeout=5))
    for _ in range(100):
        if env.broker.wakeups.waiting("reviewer"):
            break
        await asyncio.sleep(0.01)
    await _scrape(env)
    assert reg.get_sample_value("gateway_broker_agent_waiting", {"agent": "reviewer"}) == 1
    await env.ok("pm", "send_message", {"to": "reviewer", "subject": "s", "body": {}})
    await waiting


async def test_a_scrape_counts_the_confirmations_waiting_for_an_operator(make_env: EnvFactory) -> None:
    env = await make_env(confirm_by="operator")
    reg = env.metrics.registry
    await _scrape(env)
    assert reg.get_sample_value("gateway_confirmations_pending") == 0
    asked = await env.broker.confirmations.request(
        "approval:1", agent="pm", tool="save_pipeline", what="Cancel 1?", why=None, ttl_seconds=600
    )
    await _scrape(env)
    assert reg.get_sample_value("gateway_confirmations_pending") == 1
    await env.broker.confirmations.decide(asked.ticket, approve=False, operator="operator:alice", note=None)
    await _scrape(env)
    assert reg.get_sample_value("gateway_confirmations_pending") == 0


async def test_a_failing_database_makes_the_gauge_zero_not_the_scrape_fail(
    env: Env, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    reg = env.metrics.registry

    @asynccontextmanager
    async def unavailable() -> AsyncIterator[Any]:
        raise DatabaseUnavailable("connection refused")
        yield  # pragma: no cover

    monkeypatch.setattr(env.broker.store, "read", unavailable)
    await _scrape(env)
    await _scrape(env)
    assert reg.get_sample_value("gateway_broker_database_up") == 0
    # Logged once per outage, not at every scrape.
    assert len([r for r in caplog.records if "did not answer" in r.getMessage()]) == 1
    monkeypatch.undo()
    await _scrape(env)
    assert reg.get_sample_value("gateway_broker_database_up") == 1


async def test_a_slow_database_is_given_up_within_the_time_limit(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def slow() -> None:
        await asyncio.sleep(30)

    monkeypatch.setattr(housekeeping, "SCRAPE_READ_TIMEOUT", 0.05)
    monkeypatch.setattr(env.broker.housekeeping, "refresh_depths", slow)
    started = time.monotonic()
    await _scrape(env)
    assert time.monotonic() - started < 2
    assert env.metrics.registry.get_sample_value("gateway_broker_database_up") == 0


async def test_scrapes_close_together_share_one_read(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = 0
    real = env.broker.housekeeping.refresh_depths

    async def counted() -> None:
        nonlocal reads
        reads += 1
        await real()

    monkeypatch.setattr(env.broker.housekeeping, "refresh_depths", counted)
    await _scrape(env)
    await asyncio.gather(*(env.broker.housekeeping.refresh_for_scrape() for _ in range(5)))
    assert reads == 1
