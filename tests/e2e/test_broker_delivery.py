"""Delivery through the running gateway: cancelled waits, messages from concurrent senders, and a
SIGKILL in the middle of a run (at-least-once, stable ``messageId``).

The volumes are what it takes to interleave four senders and to kill a process with calls in
flight; the broker's own tests (tests/unit/broker/test_delivery.py) send 1,000 messages from
concurrent senders on both backends.

The cancelled waits and the concurrent senders share one gateway per backend (a start is seconds of
CPU); each test begins with dev's queue empty. The kills and the stop start their own."""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest
from mcp import Client

from tests import pg_server
from tests.e2e.harness import GatewayProcess, mcp_client

pytestmark = pytest.mark.e2e

ENV = {"GITLAB_URL": "http://127.0.0.1:9"}
RANK = {"high": 0, "normal": 1, "low": 2}
#: Messages each of four senders sends at once.
SENT_EACH = 100
#: Messages received before the gateway is killed (SIGKILL) with sends and a wait in flight.
RECEIVED_BEFORE_KILL = 150


async def ok(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content
    return dict(result.structured_content)


async def drain(client: Client, into: list[dict[str, Any]], *, timeout: float = 0) -> None:
    """Wait for messages until one wait of ``timeout`` seconds comes back empty."""
    while True:
        message = (await ok(client, "wait_for_message", {"timeout_sec": timeout}))["message"]
        if message is None:
            return
        into.append(message)


async def queued(client: Client, agent: str) -> int:
    """``agent``'s queue depth once delivered messages left it: a message to an agent that does
    not acknowledge leaves when its read check ends (broker.read_check_seconds after the answer)."""
    for _ in range(50):
        depth = int((await ok(client, "get_pipeline_status", {}))["queues"][agent])
        if depth == 0:
            break
        await asyncio.sleep(0.05)
    return depth


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def shared(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    """One gateway per backend for the tests that leave it running, its schema already migrated."""
    env = dict(ENV)
    database = None
    if request.param == "postgresql":
        postgres: pg_server.PostgresServer = request.getfixturevalue("postgres")
        database = postgres.create_database(template=request.getfixturevalue("broker_at_head_postgres"))
        env["GATEWAY_BROKER__DATABASE_URL"] = postgres.url(database)
    gateway = GatewayProcess(env=env, state_dir=tmp_path_factory.mktemp("delivery") / "state").start()
    try:
        yield gateway
    finally:
        gateway.stop()
        if database is not None:
            postgres.drop_database(database)


@pytest.fixture
async def gateway(shared: GatewayProcess) -> GatewayProcess:
    """The backend's shared gateway, dev's queue empty (an earlier test's last message is gone
    once its read check ended)."""
    async with mcp_client(shared.mcp_url, headers={"X-Agent-Id": "pm"}) as pm:
        assert await queued(pm, "dev") == 0
    return shared


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_cancelled_wait_leaves_the_message_queued(gateway: GatewayProcess, mode: str) -> None:
    since = len(gateway.log())  # this test's lines: the gateway served other tests before
    async with (
        mcp_client(gateway.mcp_url, headers={"X-Agent-Id": "dev"}, mode=mode) as dev,
        mcp_client(gateway.mcp_url, headers={"X-Agent-Id": "pm"}, mode=mode) as pm,
    ):
        wait = asyncio.create_task(dev.call_tool("wait_for_message", {"timeout_sec": 30}))
        await asyncio.sleep(0.3)
        # Legacy: the SDK sends notifications/cancelled; 2026-07-28: it closes the stream.
        wait.cancel()
        await asyncio.gather(wait, return_exceptions=True)
        await asyncio.sleep(0.5)  # the gateway notices the closed stream within 0.1 s
        sent = await ok(pm, "send_message", {"to": "dev", "subject": "develop", "body": {"issue": "A"}})
        await asyncio.sleep(0.2)
        status = await ok(pm, "get_pipeline_status", {})
        assert status["queues"]["dev"] == 1
        message = (await ok(dev, "wait_for_message", {"timeout_sec": 5}))["message"]
        assert message["messageId"] == sent["messageId"]
        assert await queued(pm, "dev") == 0
    if mode == "legacy":
        assert "notifications/cancelled" in gateway.log()[since:]
    else:
        assert "tool=wait_for_message outcome=cancelled era=modern" in gateway.log()[since:]

    # a client that goes away mid-wait: the message sent afterwards is not lost either
    async with mcp_client(gateway.mcp_url, headers={"X-Agent-Id": "dev"}) as dev:
        wait = asyncio.create_task(dev.call_tool("wait_for_message", {"timeout_sec": 30}))
        await asyncio.sleep(0.3)
    wait.cancel()
    await asyncio.gather(wait, return_exceptions=True)
    async with (
        mcp_client(gateway.mcp_url, headers={"X-Agent-Id": "pm"}) as pm,
        mcp_client(gateway.mcp_url, headers={"X-Agent-Id": "dev"}) as dev,
    ):
        sent = await ok(pm, "send_message", {"to": "dev", "subject": "develop", "body": {"issue": "B"}})
        message = (await ok(dev, "wait_for_message", {"timeout_sec": 5}))["message"]
        assert message["messageId"] == sent["messageId"]


async def test_messages_of_four_concurrent_senders_arrive_exactly_once_in_priority_then_time_order(
    gateway: GatewayProcess,
) -> None:
    rng = random.Random(7)
    senders = ("pm", "reviewer", "pm", "reviewer")
    async with AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(mcp_client(gateway.mcp_url, headers={"X-Agent-Id": s}))
            for s in senders
        ]
        dev = await stack.enter_async_context(mcp_client(gateway.mcp_url, headers={"X-Agent-Id": "dev"}))

        async def send_all(k: int) -> list[str]:
            ids = []
            for i in range(SENT_EACH):
                out = await ok(
                    clients[k],
                    "send_message",
                    {
                        "to": "dev",
                        "subject": "work",
                        "body": {"k": k, "i": i},
                        "priority": rng.choice(list(RANK)),
                    },
                )
                assert out["queued"] is True
                ids.append(out["messageId"])
            return ids

        sent = [m for ids in await asyncio.gather(*(send_all(k) for k in range(4))) for m in ids]
        received: list[dict[str, Any]] = []
        await drain(dev, received)
    assert len(sent) == 4 * SENT_EACH
    assert sorted(m["messageId"] for m in received) == sorted(sent)  # each exactly once
    assert [RANK[m["priority"]] for m in received] == sorted(RANK[m["priority"]] for m in received)
    for k in range(4):
        for priority in RANK:
            order = [m["body"]["i"] for m in received if m["body"]["k"] == k and m["priority"] == priority]
            assert order == sorted(order)


async def test_sigkill_mid_run_loses_no_acknowledged_message(
    start_gateway: Callable[..., GatewayProcess],
    broker_env: dict[str, str],
) -> None:
    # A lease the killed process held runs out after 1 s; then the message goes out again.
    env = {**ENV, **broker_env, "GATEWAY_BROKER__LEASE_SECONDS": "1"}
    gateway = start_gateway(env=env)
    state_dir = gateway.state_dir
    acknowledged: set[str] = set()
    received: list[dict[str, Any]] = []
    killed = asyncio.Event()

    async def run_until_killed() -> None:
        async with AsyncExitStack() as stack:
            senders = [
                await stack.enter_async_context(
                    mcp_client(gateway.mcp_url, headers={"X-Agent-Id": s}, read_timeout=10)
                )
                for s in ("pm", "reviewer")
            ]
            dev = await stack.enter_async_context(
                mcp_client(gateway.mcp_url, headers={"X-Agent-Id": "dev"}, read_timeout=10)
            )

            async def send(k: int) -> None:
                for i in range(400):
                    try:
                        out = await ok(
                            senders[k],
                            "send_message",
                            {"to": "dev", "subject": "work", "body": {"k": k, "i": i}},
                        )
                    except Exception:
                        return  # the gateway died under this call: no answer, no promise
                    acknowledged.add(out["messageId"])

            async def receive() -> None:
                while not killed.is_set():
                    try:
                        out = await ok(dev, "wait_for_message", {"timeout_sec": 1})
                    except Exception:
                        return
                    if out["message"] is not None:
                        received.append(out["message"])
                    if len(received) >= RECEIVED_BEFORE_KILL and not killed.is_set():
                        gateway.kill()  # SIGKILL, as a crash would
                        killed.set()

            tasks = [asyncio.create_task(c) for c in (send(0), send(1), receive())]
            await asyncio.wait(tasks, timeout=60)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # The clients of the killed gateway fail as they close; keep that inside their own task.
    await asyncio.gather(asyncio.create_task(run_until_killed()), return_exceptions=True)
    assert killed.is_set()
    before_restart = len(received)

    gateway = start_gateway(env=env, state_dir=state_dir)
    async with mcp_client(gateway.mcp_url, headers={"X-Agent-Id": "dev"}) as dev:
        await drain(dev, received, timeout=2)

    ids = [m["messageId"] for m in received]
    assert acknowledged <= set(ids), f"{len(acknowledged - set(ids))} acknowledged messages were lost"
    assert RECEIVED_BEFORE_KILL <= before_restart < len(received)
    # a message that reached the receiver twice is the same message: same id, same body
    by_body: dict[tuple[int, int], set[str]] = defaultdict(set)
    for m in received:
        by_body[(m["body"]["k"], m["body"]["i"])].add(m["messageId"])
    assert all(len(v) == 1 for v in by_body.values())
    duplicates = [i for i in set(ids) if ids.count(i) > 1]
    for m in received:
        if m["messageId"] in duplicates and m is not next(
            x for x in received if x["messageId"] == m["messageId"]
        ):
            assert m["deliveryAttempt"] >= 2


async def test_sigterm_answers_open_waits_with_shutdown(
    start_gateway: Callable[..., GatewayProcess], broker_env: dict[str, str]
) -> None:
    gateway = start_gateway(env={**ENV, **broker_env})
    answers: list[Any] = []

    async def wait_until_shutdown() -> None:
        async with mcp_client(gateway.mcp_url, headers={"X-Agent-Id": "dev"}) as dev:
            await dev.list_tools()  # the SDK checks results against outputSchema: fetch it while it can
            answers.append(await dev.call_tool("wait_for_message", {"timeout_sec": 60}))

    task = asyncio.create_task(wait_until_shutdown())
    async with httpx.AsyncClient() as http:  # the wait is open (a loaded machine may take a while)
        for _ in range(200):
            if "gateway_broker_waits_open 1.0" in (await http.get(f"{gateway.url}/metrics")).text:
                break
            await asyncio.sleep(0.05)
    await asyncio.to_thread(gateway.stop)
    # closing the session fails once the gateway is gone; only the answer matters here
    await asyncio.gather(task, return_exceptions=True)
    assert len(answers) == 1
    result = answers[0]
    assert result.structured_content["shutdown"] is True
    assert result.structured_content["message"] is None
    assert "reconnect" in result.content[0].text
