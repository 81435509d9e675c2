"""The phase broker through the MCP endpoint: send → answer latency, throughput, cost of open waits,
on SQLite and on PostgreSQL, in one gateway and across two replicas.

    .venv/bin/python bench/bench_broker.py                       # 1, 10, 100 waiting agents, both backends
    .venv/bin/python bench/bench_broker.py --backend sqlite --agents 1 10 --pings 300 --messages 3000
    .venv/bin/python bench/bench_broker.py --backend postgresql --agents 10 100 --profile /tmp/prof

The gateway runs as a process (``python -m gateway``, no GitLab); every call is JSON-RPC
``tools/call`` over Streamable HTTP on ``/mcp`` with ``httpx`` (one MCP session per agent,
``X-Agent-Id`` on loopback), so the figures are the broker plus the transport, not an SDK client.

Printed per number of waiting agents (each agent has one ``wait_for_message`` open at all times):

- latency: ``send_message`` issued → the waiting agent holds the answer, one message in flight at a
  time (p50, p99, ms);
- throughput: 4 concurrent senders push ``--messages`` messages round-robin to the agents;
  messages per second from the first send to the last answer received;
- CPU per message in that run, of the gateway processes (user + system time, all threads, from
  ``/proc``) and of this client (its HTTP calls): the figures other load on a shared machine
  disturbs least, and they tell the gateway's cost from the client's.

Then the memory cost of ``--open-waits`` concurrent ``wait_for_message`` calls: the gateway's RSS
with them open minus its RSS before (``/proc/<pid>/status``), per wait.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests import pg_server  # noqa: E402
from tests.e2e.harness import GatewayProcess  # noqa: E402
from tests.e2e.rpc import initialize_request  # noqa: E402

PROTOCOL = "2025-11-25"


class Session:
    """One MCP session over raw HTTP, as agent ``agent``."""

    def __init__(self, http: httpx.AsyncClient, url: str, agent: str) -> None:
        self.http = http
        self.url = url
        self.agent = agent
        self.headers = {
            "X-Agent-Id": agent,
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        self._id = 0

    async def open(self) -> Session:
        r = await self.http.post(
            self.url,
            headers=self.headers,
            json=initialize_request("bench", PROTOCOL),
        )
        r.raise_for_status()
        self.headers["Mcp-Session-Id"] = r.headers["Mcp-Session-Id"]
        self.headers["MCP-Protocol-Version"] = PROTOCOL
        await self.http.post(
            self.url, headers=self.headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
        )
        return self

    async def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        self._id += 1
        rid = self._id
        r = await self.http.post(
            self.url,
            headers=self.headers,
            json={
                "jsonrpc": "2.0",
                "id": rid,
                "method": "tools/call",
                "params": {"name": tool, "arguments": arguments},
            },
        )
        if r.headers.get("content-type", "").startswith("text/event-stream"):
            for line in r.text.splitlines():
                if line.startswith("data:") and line[5:].strip():  # the priming event has no data
                    msg = json.loads(line[5:])
                    if msg.get("id") == rid:
                        return dict(msg["result"]["structuredContent"])
            raise RuntimeError(f"no response in the SSE stream: {r.text[:300]}")
        return dict(r.json()["result"]["structuredContent"])


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far, all threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def pin(gw: GatewayProcess, cpu: int) -> None:
    """Pin every thread of the gateway to one core (figures compared within one run)."""
    assert gw.proc is not None
    for task in Path(f"/proc/{gw.proc.pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that just ended
            os.sched_setaffinity(int(task.name), {cpu % (os.cpu_count() or 1)})


async def run_agents(
    gw: GatewayProcess,
    http: httpx.AsyncClient,
    n: int,
    pings: int,
    messages: int,
    label: str,
    send_gw: GatewayProcess | None = None,
) -> None:
    """``n`` agents wait on ``gw``; senders call ``send_gw`` (another replica) or ``gw``."""
    names = [f"w{i:03d}" for i in range(n)]
    waiters = [await Session(http, gw.mcp_url, name).open() for name in names]
    senders = [await Session(http, (send_gw or gw).mcp_url, "pm").open() for _ in range(4)]
    arrived: dict[str, asyncio.Future[float]] = {}
    received = 0
    all_done = asyncio.Event()
    expected = pings + messages

    async def wait_loop(s: Session) -> None:
        nonlocal received
        while received < expected:
            out = await s.call("wait_for_message", {"timeout_sec": 30})
            m = out["message"]
            if m is None:
                continue
            now = time.perf_counter()
            received += 1
            fut = arrived.get(m["body"]["key"])
            if fut is not None and not fut.done():
                fut.set_result(now)
            if received >= expected:
                all_done.set()

    loops = [asyncio.create_task(wait_loop(s)) for s in waiters]
    await asyncio.sleep(0.2)

    latencies = []
    for i in range(pings):
        key = f"p{i}"
        fut: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        arrived[key] = fut
        t0 = time.perf_counter()
        await senders[0].call("send_message", {"to": names[i % n], "subject": "ping", "body": {"key": key}})
        latencies.append((await asyncio.wait_for(fut, 30)) - t0)

    counter = iter(range(messages))

    async def blast(s: Session) -> None:
        for i in counter:
            await s.call("send_message", {"to": names[i % n], "subject": "load", "body": {"key": f"m{i}"}})

    pids = [g.proc.pid for g in (gw, send_gw) if g is not None and g.proc is not None]
    cpu0 = sum(cpu_seconds(pid) for pid in pids)
    client0 = time.process_time()
    t0 = time.perf_counter()
    await asyncio.gather(*(blast(s) for s in senders))
    await asyncio.wait_for(all_done.wait(), 300)
    elapsed = time.perf_counter() - t0
    cpu = sum(cpu_seconds(pid) for pid in pids) - cpu0
    client = time.process_time() - client0
    for task in loops:
        task.cancel()
    await asyncio.gather(*loops, return_exceptions=True)
    ms = [x * 1000 for x in latencies]
    print(
        f"{label:<22} {n:>4} waiting agents: latency p50 {statistics.median(ms):6.2f} ms  "
        f"p99 {pct(ms, 99):6.2f} ms  | throughput {messages / elapsed:7.0f} msg/s "
        f"({messages} messages, 4 senders, {elapsed:.2f} s)"
        f" | CPU per message: gateway {cpu * 1000 / messages:.2f} ms,"
        f" this client {client * 1000 / messages:.2f} ms",
        flush=True,
    )


async def open_waits(gw: GatewayProcess, http: httpx.AsyncClient, count: int) -> None:
    assert gw.proc is not None
    session = await Session(http, gw.mcp_url, "dev").open()
    await session.call("get_pipeline_status", {})
    await asyncio.sleep(0.5)
    before = rss_kib(gw.proc.pid)
    tasks = [
        asyncio.create_task(session.call("wait_for_message", {"timeout_sec": 120})) for _ in range(count)
    ]
    deadline = time.monotonic() + 60
    opened = 0.0
    while time.monotonic() < deadline:
        text = (await http.get(f"{gw.url}/metrics")).text
        line = next((x for x in text.splitlines() if x.startswith("gateway_broker_waits_open ")), "x 0")
        opened = float(line.split()[1])
        if opened >= count:
            break
        await asyncio.sleep(0.2)
    await asyncio.sleep(0.5)
    during = rss_kib(gw.proc.pid)
    print(
        f"{int(opened)} open waits: gateway RSS {before / 1024:.1f} MiB → {during / 1024:.1f} MiB, "
        f"{(during - before) / max(1, opened):.1f} KiB per open wait (HTTP request, SSE stream, task, wait)"
    )
    gw.stop()  # SIGTERM: the broker answers every wait with shutdown: true
    results = await asyncio.gather(*tasks, return_exceptions=True)
    woken = sum(1 for r in results if isinstance(r, dict) and r.get("shutdown"))
    print(f"    on SIGTERM {woken}/{count} waits answered with shutdown: true")


def gateway(env: dict[str, str], state_dir: Path, profile: Path | None, name: str) -> GatewayProcess:
    python_args = ["-m", "cProfile", "-o", str(profile / f"{name}.prof")] if profile else None
    return GatewayProcess(env=env, state_dir=state_dir, python_args=python_args)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument(
        "--backend", nargs="+", choices=["sqlite", "postgresql"], default=["sqlite", "postgresql"]
    )
    parser.add_argument("--pings", type=int, default=200, help="latency samples per run")
    parser.add_argument("--messages", type=int, default=2000, help="messages of the throughput run")
    parser.add_argument("--open-waits", type=int, default=1000, help="0: skip the open-waits run")
    parser.add_argument("--profile", type=Path, help="write each gateway's cProfile stats to this folder")
    args = parser.parse_args()
    names = ["pm", "dev", "reviewer", *(f"w{i:03d}" for i in range(max(args.agents)))]
    server = pg_server.PostgresServer.start() if "postgresql" in args.backend else None
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            limits = httpx.Limits(
                max_connections=args.open_waits + 400, max_keepalive_connections=args.open_waits + 400
            )
            async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=None), limits=limits) as http:
                for backend in args.backend:
                    for n in args.agents:
                        env = {
                            "GITLAB_URL": "http://127.0.0.1:9",
                            "GATEWAY_BROKER__AGENTS": json.dumps(names),
                            "GATEWAY_LOGGING__LEVEL": "WARNING",
                        }
                        if backend == "postgresql":
                            assert server is not None
                            env["GATEWAY_BROKER__DATABASE_URL"] = server.url(server.create_database())
                        gw = gateway(
                            env, Path(tmp) / f"{backend}-{n}", args.profile, f"{backend}-{n}"
                        ).start()
                        pin(gw, 0)
                        try:
                            await run_agents(gw, http, n, args.pings, args.messages, f"{backend} one gateway")
                        finally:
                            gw.stop()
                        if backend != "postgresql":
                            continue
                        # Cross-replica: the agents wait on one gateway, the senders use another.
                        env["GATEWAY_BROKER__DATABASE_URL"] = server.url(server.create_database())  # type: ignore[union-attr]
                        a = gateway(env, Path(tmp) / f"x{n}-a", args.profile, f"cross-{n}-waits").start()
                        b = gateway(env, Path(tmp) / f"x{n}-b", args.profile, f"cross-{n}-sends").start()
                        pin(a, 0)
                        pin(b, 1)
                        try:
                            await run_agents(
                                a, http, n, args.pings, args.messages, "postgresql 2 replicas", send_gw=b
                            )
                        finally:
                            a.stop()
                            b.stop()
                if args.open_waits:
                    gw = GatewayProcess(
                        env={
                            "GITLAB_URL": "http://127.0.0.1:9",
                            "GATEWAY_LOGGING__LEVEL": "WARNING",
                            "GATEWAY_SERVER__MAX_SESSIONS": "100000",
                        },
                        state_dir=Path(tmp) / "state-waits",
                    ).start()
                    try:
                        await open_waits(gw, http, args.open_waits)
                    finally:
                        gw.stop()
    finally:
        if server is not None:
            server.stop()
    if args.profile:
        import pstats

        for prof in sorted(args.profile.glob("*.prof")):
            print(f"\n== {prof.name}: top 12 by cumulative time of the gateway's own code ==")
            pstats.Stats(str(prof)).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    asyncio.run(main())
