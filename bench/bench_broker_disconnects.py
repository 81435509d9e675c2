"""Messages lost when receivers abandon their waits 5 to 80 ms in: lost/total per pattern.

    .venv/bin/python bench/bench_broker_disconnects.py                  # SQLite, every case
    .venv/bin/python bench/bench_broker_disconnects.py --postgres       # PostgreSQL (tests/pg_server.py)
    .venv/bin/python bench/bench_broker_disconnects.py --messages 300 --cases flow-fresh-noack

Each case runs on a fresh gateway (no GitLab needed). Connections:

- ``same``: each receiver keeps one HTTP client for all its waits (an abandoned request closes
  its connection; the next wait opens one in the same pool);
- ``fresh``: a new HTTP client, so a new connection, for every wait.

Scenarios:

- ``flow``: pm sends ``--messages`` messages 10 ms apart to dev while two dev receivers wait and
  abandon each wait after 5-80 ms (random);
- ``left``: one dev receiver waits on an empty queue and abandons the wait after 5-80 ms; only
  then is one message sent; ``--messages`` times. No message existed when the receiver left, so
  none may be lost.

``ack``: the receivers acknowledge (``wait_for_message``'s ``ack``) every message they got on
their next call; ``noack``: they never do. After the traffic a steady receiver drains the queue
until nothing arrived for a few lease/ack periods. Lost: answered ``queued: true`` and never
seen by any receiver. Targets: flow under 2 % without ack, 0 with ack; left 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import ssl
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.e2e.broker_agent import BrokerAgent as Agent  # noqa: E402
from tests.e2e.harness import GatewayProcess  # noqa: E402

LEASE_SECONDS = 2.0
ACK_TIMEOUT_SECONDS = 1.0
#: One TLS context for all clients: building one per client (httpx's default) blocks this
#: process's event loop 30-80 ms, long enough for the other receivers' answers to sit unread
#: until their waits are abandoned (``--stalling-clients`` keeps that default, to show it).
_TLS: ssl.SSLContext | bool = ssl.create_default_context()
CASES = [
    f"{scenario}-{connection}-{mode}"
    for scenario in ("flow", "left")
    for mode in ("noack", "ack")
    for connection in ("same", "fresh")
]


@dataclass
class Ledger:
    queued: set[str] = field(default_factory=set)
    received: set[str] = field(default_factory=set)
    #: Messages a receiver got again after one had already got them.
    again: int = 0
    abandoned: int = 0


class Receiver:
    """A dev session that abandons its waits; ``ack``: acknowledges what it got on its next call."""

    def __init__(self, agent: Agent, ledger: Ledger, *, ack: bool, fresh: bool) -> None:
        self.agent = agent
        self.ledger = ledger
        self.ack = ack
        self.fresh = fresh
        self.pending: set[str] = set()
        self._http = httpx.AsyncClient(timeout=10, trust_env=False)

    @contextlib.asynccontextmanager
    async def _client(self) -> AsyncIterator[httpx.AsyncClient]:
        if not self.fresh:
            yield self._http
            return
        async with httpx.AsyncClient(timeout=10, trust_env=False, verify=_TLS) as http:
            yield http

    async def wait(self, timeout: float, abandon_after: float | None) -> bool:
        """One wait; True when it got a message. ``abandon_after``: seconds, then the client leaves."""
        sent = sorted(self.pending)
        arguments: dict[str, Any] = {"timeout_sec": timeout}
        if self.ack:
            arguments["ack"] = sent
        got: list[str] = []

        def arrived(out: dict[str, Any]) -> None:
            if message := out.get("message"):
                got.append(str(message["messageId"]))
                if got[-1] in self.ledger.received:
                    self.ledger.again += 1
                self.ledger.received.add(got[-1])
                self.pending.add(got[-1])

        async with self._client() as http:
            try:
                await asyncio.wait_for(
                    self.agent.call(http, "wait_for_message", arguments, arrived), timeout=abandon_after
                )
            except TimeoutError:
                self.ledger.abandoned += 1  # its connection closes; acks not known applied are re-sent
                return bool(got)
        self.pending.difference_update(sent)
        return bool(got)

    async def close(self) -> None:
        await self._http.aclose()


async def send(pm: Agent, http: httpx.AsyncClient, ledger: Ledger, n: int) -> None:
    out = await pm.call(http, "send_message", {"to": "dev", "subject": "work", "body": {"n": n}})
    if out.get("queued") is True:
        ledger.queued.add(str(out["messageId"]))


async def drain(url: str, ledger: Ledger, pending: set[str], ack: bool) -> None:
    """A steady receiver until nothing arrived for a few lease and ack periods."""
    quiet_for = 3 * max(LEASE_SECONDS, ACK_TIMEOUT_SECONDS) + 1
    async with httpx.AsyncClient(timeout=30, trust_env=False) as http:
        steady = Receiver(await Agent(url, "dev").open(http), ledger, ack=ack, fresh=False)
        steady.pending = set(pending)
        loop = asyncio.get_running_loop()
        last = loop.time()
        while loop.time() - last < quiet_for and ledger.queued - ledger.received:
            if await steady.wait(0.5, None):
                last = loop.time()
        if ack and steady.pending:
            await steady.wait(0, None)
        await steady.close()


async def flow(
    url: str, ledger: Ledger, messages: int, *, ack: bool, fresh: bool, rng: random.Random
) -> set[str]:
    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
        receivers = [
            Receiver(await Agent(url, "dev").open(http), ledger, ack=ack, fresh=fresh) for _ in range(2)
        ]
    done = asyncio.Event()

    async def sender() -> None:
        async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
            pm = await Agent(url, "pm").open(http)
            for n in range(messages):
                await send(pm, http, ledger, n)
                await asyncio.sleep(0.01)
        done.set()

    async def dropping(receiver: Receiver) -> None:
        while not done.is_set():
            await receiver.wait(5, rng.uniform(0.005, 0.08))

    await asyncio.gather(sender(), *(dropping(r) for r in receivers))
    for r in receivers:
        await r.close()
    return set().union(*(r.pending for r in receivers))


async def left(
    url: str, ledger: Ledger, messages: int, *, ack: bool, fresh: bool, rng: random.Random
) -> set[str]:
    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
        receiver = Receiver(await Agent(url, "dev").open(http), ledger, ack=ack, fresh=fresh)
        steady = Receiver(await Agent(url, "dev").open(http), ledger, ack=ack, fresh=False)
        pm = await Agent(url, "pm").open(http)
        for n in range(messages):
            await receiver.wait(5, rng.uniform(0.005, 0.08))  # the queue is empty: it leaves
            await send(pm, http, ledger, n)
            # Picked up by a receiver that stays, unless the one that left took it; waits past a
            # lease so the queue is empty again for the next round.
            await steady.wait(LEASE_SECONDS + 1, None)
    await receiver.close()
    await steady.close()
    return receiver.pending | steady.pending


async def run_case(case: str, url: str, messages: int, seed: int) -> Ledger:
    scenario, connection, mode = case.split("-")
    ledger = Ledger()
    rng = random.Random(seed)
    play = flow if scenario == "flow" else left
    pending = await play(url, ledger, messages, ack=mode == "ack", fresh=connection == "fresh", rng=rng)
    await drain(url, ledger, pending, mode == "ack")
    return ledger


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=200, help="messages per case")
    parser.add_argument("--cases", nargs="*", default=CASES, choices=CASES)
    parser.add_argument("--postgres", action="store_true", help="broker on PostgreSQL (tests/pg_server.py)")
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument(
        "--stalling-clients",
        action="store_true",
        help="a new TLS context per fresh client (httpx's default): receivers stall 30-80 ms",
    )
    args = parser.parse_args()
    if args.stalling_clients:
        global _TLS
        _TLS = True
    server = None
    if args.postgres:
        from tests.pg_server import PostgresServer

        server = PostgresServer.start()
    work = Path(tempfile.mkdtemp(prefix="disconnects-"))
    try:
        for i, case in enumerate(args.cases):
            env = {
                "GITLAB_URL": "http://127.0.0.1:9",
                "GATEWAY_LOGGING__LEVEL": "WARNING",
                "GATEWAY_BROKER__LEASE_SECONDS": str(LEASE_SECONDS),
                "GATEWAY_BROKER__ACK_TIMEOUT_SECONDS": str(ACK_TIMEOUT_SECONDS),
                "GATEWAY_BROKER__RECHECK_SECONDS": "0.2",
            }
            if server is not None:
                env["GATEWAY_BROKER__DATABASE_URL"] = server.url(server.create_database())
            gateway = GatewayProcess(env=env, state_dir=work / f"state-{i}")
            try:
                gateway.start()
                started = time.perf_counter()
                ledger = asyncio.run(run_case(case, gateway.mcp_url, args.messages, args.seed + i))
            finally:
                gateway.stop()
            lost = len(ledger.queued - ledger.received)
            total = len(ledger.queued)
            print(
                f"{case:18s} lost {lost}/{total} ({100 * lost / max(total, 1):.1f} %), "
                f"{ledger.again} received again, {ledger.abandoned} waits abandoned, "
                f"{time.perf_counter() - started:.0f} s",
                flush=True,
            )
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
