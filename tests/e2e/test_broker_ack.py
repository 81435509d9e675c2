"""Receivers that abandon their waits 5 to 80 ms in, a fresh connection per wait, while messages
flow: an agent that acknowledges (``wait_for_message``'s ``ack``) loses none of them.

An answer can be written to a connection the client is already closing: the gateway cannot tell,
so only the agent's acknowledgement closes that window: such a message goes out again when its
acknowledgement hold (``broker.ack_timeout_seconds``) ends, as does one the agent received and
lost (it restarted before processing it). ``broker.recheck_seconds`` keeps its
default (5 s), longer than every wait here: a message whose hold ends reaches the waits open then
and later ones without a periodic re-check. Black-box over HTTP, one gateway.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.e2e.broker_agent import BrokerAgent as Agent
from tests.e2e.harness import GatewayProcess
from tests.local_http import TLS

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

MESSAGES = 60
RECEIVERS = 4
ACK_TIMEOUT = 1.0


class Receiver:
    """dev, acknowledging: every id it got is acknowledged on a later call that returned."""

    def __init__(self, agent: Agent, received: set[str]) -> None:
        self.agent = agent
        self.received = received
        self.pending: set[str] = set()

    async def wait(self, http: httpx.AsyncClient, timeout: float) -> dict[str, Any] | None:
        sent = sorted(self.pending)
        out = await self.agent.call(http, "wait_for_message", {"timeout_sec": timeout, "ack": sent})
        self.pending.difference_update(sent)  # the call returned: its ack was applied
        message: dict[str, Any] | None = out.get("message")
        if message:
            self.received.add(str(message["messageId"]))
            self.pending.add(str(message["messageId"]))
        return message


async def drain(steady: Receiver, http: httpx.AsyncClient) -> None:
    """Wait and acknowledge until a wait longer than an ack timeout came back empty: every hold
    still running when it began has ended into it by then."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while loop.time() < deadline:
        if await steady.wait(http, 2 * ACK_TIMEOUT) is None:
            return


async def test_receivers_that_abandon_waits_lose_nothing_when_they_acknowledge(
    broker_env: dict[str, str], start_gateway: Callable[..., GatewayProcess]
) -> None:
    env = {
        "GITLAB_URL": "http://127.0.0.1:9",
        "GATEWAY_LOGGING__FORMAT": "json",
        "GATEWAY_BROKER__ACK_TIMEOUT_SECONDS": str(ACK_TIMEOUT),
        **broker_env,
    }
    gateway = start_gateway(env=env)
    rng = random.Random(14)
    queued: set[str] = set()
    received: set[str] = set()
    abandoned = 0
    sending_done = asyncio.Event()

    async def send_all() -> None:
        async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
            pm = await Agent(gateway.mcp_url, "pm").open(http)
            for n in range(MESSAGES):
                out = await pm.call(http, "send_message", {"to": "dev", "subject": "work", "body": {"n": n}})
                assert out["queued"] is True
                queued.add(str(out["messageId"]))
                await asyncio.sleep(0.01)
        sending_done.set()

    async def dropping(receiver: Receiver) -> None:
        nonlocal abandoned
        while not sending_done.is_set():
            async with httpx.AsyncClient(timeout=10, trust_env=False, verify=TLS) as fresh:  # one per wait
                try:
                    await asyncio.wait_for(receiver.wait(fresh, 5), timeout=rng.uniform(0.005, 0.08))
                except TimeoutError:
                    abandoned += 1  # the connection closes with the client

    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
        receivers = [
            Receiver(await Agent(gateway.mcp_url, "dev").open(http), received) for _ in range(RECEIVERS)
        ]
    await asyncio.wait_for(asyncio.gather(send_all(), *(dropping(r) for r in receivers)), 120)

    async with httpx.AsyncClient(timeout=30, trust_env=False) as http:
        steady = Receiver(await Agent(gateway.mcp_url, "dev").open(http), received)
        steady.pending = set().union(*(r.pending for r in receivers))
        pm = await Agent(gateway.mcp_url, "pm").open(http)
        await drain(steady, http)

        # One more message reaches an agent that loses it (it restarts before processing it):
        # never acknowledged, it goes out again when its hold ends, into the next wait open then.
        last = await pm.call(http, "send_message", {"to": "dev", "subject": "last", "body": {}})
        queued.add(str(last["messageId"]))
        forgetful = await Agent(gateway.mcp_url, "dev").open(http)
        out = await forgetful.call(http, "wait_for_message", {"timeout_sec": 5, "ack": []})
        assert out["message"]["messageId"] == last["messageId"]
        await drain(steady, http)
        await steady.wait(http, 0)  # the last acknowledgements
        queues = (await pm.call(http, "get_pipeline_status", {}))["queues"]

    lost = queued - received
    print(f"queued {len(queued)}, received {len(received)}, abandoned waits {abandoned}, lost {len(lost)}")
    assert abandoned > 10, "too few abandoned waits to prove anything"
    assert not lost
    assert queues["dev"] == 0, "a message is still queued: it was never delivered, or never acknowledged"
    gateway.stop()
    lines = [json.loads(line) for line in gateway.log().splitlines() if line.startswith("{")]
    errors = [line for line in lines if line.get("level") in ("ERROR", "CRITICAL")]
    assert not errors, json.dumps(errors[:3], indent=1)
