"""Crash test: SIGKILL the gateway three times under broker traffic; every message whose
``send_message`` was answered ``queued: true`` reaches its agent.

Two senders (pm, reviewer) send to dev without pause; dev has a steady receiver (one
``wait_for_message`` after another). With ``dropping`` receivers, two more dev receivers open
waits on fresh connections and abandon them 5 to 80 ms in, as agents killed or timed out by their
own runtimes do. The gateway is killed at a random moment of each round and started again on the
same state folder; at the end dev's queue is drained. A message may arrive twice (it was handed out
just before a crash); none may be missing. Black-box over HTTP: no SDK, no broker internals.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.e2e.broker_agent import BrokerAgent as Agent
from tests.e2e.harness import GatewayProcess, free_port
from tests.local_http import TLS

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ENV = {"GITLAB_URL": "http://127.0.0.1:9"}
ROUNDS = 3
MESSAGES_PER_ROUND = 30
ROUND_CAP_SECONDS = 30.0

# Receivers that never acknowledge can still lose a message whose answer was in flight when the
# connection dropped (no transport closes that window; agents that need none lost send ``ack``,
# see test_broker_ack). Whether a run loses one is chance, so the mark is not strict.
OPEN_DISCONNECT_LOSS = pytest.mark.xfail(
    strict=False,
    reason="receivers without ack may lose an answer that was in flight when their connection dropped",
)


class Ledger:
    def __init__(self) -> None:
        self.queued: set[str] = set()
        self.received: list[str] = []
        self.abandoned_waits = 0


async def sender(url: str, name: str, ledger: Ledger, stop: asyncio.Event, counter: list[int]) -> None:
    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
        agent = await Agent(url, name).open(http)
        while not stop.is_set():
            counter[0] += 1
            out = await agent.call(
                http, "send_message", {"to": "dev", "subject": "work", "body": {"n": counter[0]}}
            )
            if out.get("queued") is True:
                ledger.queued.add(str(out["messageId"]))
            await asyncio.sleep(0.01)


async def steady_receiver(url: str, ledger: Ledger, stop: asyncio.Event) -> None:
    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
        agent = await Agent(url, "dev").open(http)
        while not stop.is_set():
            out = await agent.call(http, "wait_for_message", {"timeout_sec": 0.5})
            if out.get("message"):
                ledger.received.append(str(out["message"]["messageId"]))


async def dropping_receiver(url: str, ledger: Ledger, stop: asyncio.Event, rng: random.Random) -> None:
    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
        agent = await Agent(url, "dev").open(http)
    while not stop.is_set():
        async with httpx.AsyncClient(timeout=10, trust_env=False, verify=TLS) as fresh:  # one per wait
            try:
                out = await asyncio.wait_for(
                    agent.call(fresh, "wait_for_message", {"timeout_sec": 5}),
                    timeout=rng.uniform(0.005, 0.08),
                )
            except TimeoutError:
                ledger.abandoned_waits += 1  # the connection closes with the client
                continue
        if out.get("message"):
            ledger.received.append(str(out["message"]["messageId"]))


async def one_round(
    gateway: GatewayProcess, ledger: Ledger, dropping: bool, rng: random.Random, counter: list[int]
) -> None:
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(sender(gateway.mcp_url, "pm", ledger, stop, counter)),
        asyncio.create_task(sender(gateway.mcp_url, "reviewer", ledger, stop, counter)),
        asyncio.create_task(steady_receiver(gateway.mcp_url, ledger, stop)),
    ]
    if dropping:
        tasks += [
            asyncio.create_task(dropping_receiver(gateway.mcp_url, ledger, stop, rng)) for _ in range(2)
        ]
    # Killed after a random number of messages, not a time: the machine's load must not decide
    # how much traffic the round carries.
    target = len(ledger.queued) + rng.randint(MESSAGES_PER_ROUND // 2, MESSAGES_PER_ROUND)
    deadline = asyncio.get_running_loop().time() + ROUND_CAP_SECONDS
    while len(ledger.queued) < target and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.02)
    gateway.kill()  # SIGKILL, mid-traffic
    stop.set()
    # Calls in flight die with the process: no answer, no promise (ignored).
    for outcome in await asyncio.gather(*tasks, return_exceptions=True):
        if outcome is not None and not isinstance(outcome, httpx.TransportError):
            print("task ended with", repr(outcome)[:300])


async def drain(url: str, ledger: Ledger) -> None:
    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
        agent = await Agent(url, "dev").open(http)
        while True:
            out = await agent.call(http, "wait_for_message", {"timeout_sec": 0})
            if not out.get("message"):
                return
            ledger.received.append(str(out["message"]["messageId"]))


@pytest.mark.parametrize(
    "dropping", [False, pytest.param(True, marks=OPEN_DISCONNECT_LOSS)], ids=["steady", "dropping"]
)
async def test_three_sigkills_lose_no_queued_message(
    dropping: bool, tmp_path: Path, start_gateway: Callable[..., GatewayProcess]
) -> None:
    rng = random.Random(14)
    port = free_port()
    state = tmp_path / "state"
    ledger = Ledger()
    counter = [0]
    for _ in range(ROUNDS):
        gateway = start_gateway(env=ENV, state_dir=state, port=port)
        await one_round(gateway, ledger, dropping, rng, counter)
    gateway = start_gateway(env=ENV, state_dir=state, port=port)
    await drain(gateway.mcp_url, ledger)
    assert len(ledger.queued) >= ROUNDS * MESSAGES_PER_ROUND // 2, "too little traffic to prove anything"
    if dropping:
        assert ledger.abandoned_waits > 20
    missing = ledger.queued - set(ledger.received)
    assert not missing, f"{len(missing)} of {len(ledger.queued)} queued messages never reached dev"
