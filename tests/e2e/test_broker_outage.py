"""PostgreSQL goes away and comes back under two gateway replicas: a wait open on one replica
through the outage gets a message sent through the other within a second of the database being
back, without waiting for its LISTEN connection's reconnection backoff.

The server is this test's own (it is stopped and started again: the session's is shared).
``broker.recheck_seconds`` is set long, so only what the broker does about an outage counts,
not the periodic safety net.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import pg_server
from tests.e2e.broker_agent import BrokerAgent as Agent
from tests.e2e.harness import GatewayProcess

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(
        not pg_server.available(), reason="PostgreSQL 15 (Debian's postgresql-15) is not installed"
    ),
]

ENV = {
    "GITLAB_URL": "http://127.0.0.1:9",
    "GATEWAY_BROKER__RECHECK_SECONDS": "30",
    "GATEWAY_LOGGING__FORMAT": "json",
}
#: Long enough for the LISTEN connection's backoff to have grown to several seconds, were it not capped.
OUTAGE_SECONDS = 7.0


@pytest.fixture
def server() -> Iterator[pg_server.PostgresServer]:
    own = pg_server.PostgresServer.start()
    try:
        yield own
    finally:
        own.stop()


@pytest.fixture
def replicas(server: pg_server.PostgresServer, tmp_path: Path) -> Iterator[list[GatewayProcess]]:
    from gateway.broker import migrate
    from gateway.broker.database import engine_url

    url = server.url(server.create_database())
    migrate.upgrade(engine_url(url, Path()))
    env = {**ENV, "GATEWAY_BROKER__DATABASE_URL": url}
    procs = [GatewayProcess(env=env, state_dir=tmp_path / f"state{i}") for i in range(2)]
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda p: p.start(60.0), procs))
    yield procs
    for p in procs:
        p.stop()


async def until_sent(pm: Agent, http: httpx.AsyncClient, seconds: float) -> tuple[str, float]:
    """Send to dev until the database takes it: its messageId, and when it was queued."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            out = await pm.call(http, "send_message", {"to": "dev", "subject": "after", "body": {}})
            return str(out["messageId"]), time.monotonic()
        except RuntimeError:  # upstream_error: the replica's pool has not reconnected yet
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def test_a_wait_through_an_outage_gets_a_message_within_a_second_of_the_database_coming_back(
    server: pg_server.PostgresServer, replicas: list[GatewayProcess]
) -> None:
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=60.0), trust_env=False) as http:
        dev = await Agent(replicas[0].mcp_url, "dev").open(http)
        pm = await Agent(replicas[1].mcp_url, "pm").open(http)
        got: dict[str, Any] = {}
        waiting = asyncio.create_task(
            dev.call(http, "wait_for_message", {"timeout_sec": 60}, on_result=lambda r: got.update(r))
        )
        # The wait must have read its (empty) queue before the outage: a wait whose first read
        # fails answers at once. Open is visible in the metrics; the first read follows within
        # milliseconds, a second's margin for a loaded machine.
        metrics = f"{replicas[0].url}/metrics"
        for _ in range(200):
            if "gateway_broker_waits_open 1.0" in (await http.get(metrics)).text:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)
        await asyncio.to_thread(server.halt)
        await asyncio.sleep(OUTAGE_SECONDS)
        assert not waiting.done()
        await asyncio.to_thread(server.resume)
        back = time.monotonic()
        message_id, queued = await until_sent(pm, http, 20)
        await asyncio.wait_for(waiting, 20)
        late = time.monotonic() - queued

    print(f"sent {queued - back:.2f} s after the database was back; received {late:.2f} s after that")
    assert got["message"]["messageId"] == message_id
    assert late < 1.0, f"the wait got the message {late:.2f} s after it was queued"
    # Each replica's LISTEN connection is back too, within about a second (its retries are capped).
    for replica in replicas:
        for _ in range(60):
            if " is back after " in replica.log():
                break
            await asyncio.sleep(0.05)
    for replica in replicas:
        replica.stop()
        lines = [json.loads(line) for line in replica.log().splitlines() if line.startswith("{")]
        said = [line["message"] for line in lines]
        assert any(m.startswith("broker LISTEN connection") and " is back after " in m for m in said), [
            m for m in said if "broker" in m
        ]
        assert not [line for line in lines if line["level"] in ("ERROR", "CRITICAL")]
