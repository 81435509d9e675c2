"""Where a cross-replica wake-up's time goes, stage by stage, on PostgreSQL.

    .venv/bin/python bench/bench_broker_wakeup.py                 # 300 wake-ups
    .venv/bin/python bench/bench_broker_wakeup.py --wakeups 1000 --waiters 100

Two replicas' worth of the broker's own parts in one process, on a real PostgreSQL 15
(tests/pg_server.py): replica A has ``--waiters`` agents waiting (``Wakeups``) and its LISTEN
connection (``Listener``); replica B has its own engine. One message at a time, B queues it for
one of A's agents (the one-statement send with its ``pg_notify``), and A's woken wait claims it.
Printed, p50 and p99 of each stage (ms):

- send: B's statement, from its start until its commit returned to B;
- heard: B's statement started → A's LISTEN connection hands the payload over (the statement,
  ``pg_notify`` delivery at commit, the connection's read);
- fan-out: payload → the woken wait runs again (``Wakeups.dispatch``, the event, the loop);
- claim: the woken wait's claim statement (``FOR UPDATE SKIP LOCKED``, a lease);
- total: send start → the message is claimed.

No HTTP: bench/bench_broker.py measures the whole call through the gateway (its "2 replicas" row).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import SecretStr

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gateway.broker.formats import iso, new_message_id  # noqa: E402
from gateway.broker.prepared import CHANNEL  # noqa: E402
from gateway.broker.store import Store  # noqa: E402
from gateway.broker.wakeups import Listener, Wakeups  # noqa: E402
from gateway.config import BrokerSettings  # noqa: E402
from tests import pg_server  # noqa: E402


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def run(url: str, wakeups_count: int, waiters: int, state: Path) -> dict[str, list[float]]:
    settings = BrokerSettings(database_url=SecretStr(url))
    a = await Store.open(settings, state / "a")
    b = await Store.open(settings, state / "b")
    agents = [f"w{i:03d}" for i in range(waiters)]
    wakeups = Wakeups(agents)
    heard: dict[str, float] = {}

    def on_payload(payload: str) -> None:
        heard[payload] = time.perf_counter()
        wakeups.dispatch(payload, lambda: None, lambda: None)

    listener = Listener(url, CHANNEL, on_payload, lambda: None, "bench")
    await listener.start()
    stages: dict[str, list[float]] = {k: [] for k in ("send", "heard", "fan-out", "claim", "total")}
    claimed: dict[str, asyncio.Future[tuple[float, float, float]]] = {}

    async def wait_loop(agent: str) -> None:
        while True:
            with wakeups.subscribe(agent) as wake:
                await wake.wait()
                woken = time.perf_counter()
                async with a.write_one() as q:
                    row = await q.claim(agent, time.time(), 30)
                done = time.perf_counter()
                if row is not None:
                    async with a.write_one() as q:
                        await q.acknowledge(row.id, row.lease_token or "", iso(time.time()))
                    fut = claimed.pop(agent, None)
                    if fut is not None:
                        fut.set_result((woken, done, done))

    loops = [asyncio.create_task(wait_loop(agent)) for agent in agents]
    await asyncio.sleep(0.2)
    try:
        for i in range(wakeups_count):
            agent = agents[i % waiters]
            fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            claimed[agent] = fut
            t0 = time.perf_counter()
            async with b.write_one() as q:
                await q.queue_if_running(
                    id=new_message_id(),
                    sender="pm",
                    recipient=agent,
                    subject="ping",
                    body={"n": i},
                    priority=1,
                    created_at=iso(time.time()),
                )
            t1 = time.perf_counter()
            woken, done, _ = await asyncio.wait_for(fut, 10)
            t_heard = heard[agent]
            for name, value in (
                ("send", t1 - t0),
                ("heard", t_heard - t0),
                ("fan-out", woken - t_heard),
                ("claim", done - woken),
                ("total", done - t0),
            ):
                stages[name].append(value * 1000)
    finally:
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        await listener.close()
        await a.close()
        await b.close()
    return stages


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wakeups", type=int, default=300)
    parser.add_argument("--waiters", type=int, default=10)
    args = parser.parse_args()
    server = pg_server.PostgresServer.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            stages = await run(server.url(server.create_database()), args.wakeups, args.waiters, Path(tmp))
    finally:
        server.stop()
    print(f"cross-replica wake-up, {args.wakeups} messages one at a time, {args.waiters} waiting agents:")
    for name, values in stages.items():
        print(f"  {name:<8} p50 {statistics.median(values):6.2f} ms  p99 {pct(values, 99):6.2f} ms")


if __name__ == "__main__":
    asyncio.run(main())
