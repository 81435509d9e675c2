"""Soak: many MCP sessions calling a mix of tools for a while, against the GitLab stand-in.

    .venv/bin/python bench/soak.py                          # 64 sessions, 60 s, RSS again 30 s after
    .venv/bin/python bench/soak.py --sessions 8 --seconds 5 --settle 0

Each session is its own MCP session and HTTP connection pool, and loops over a weighted mix:
``get_pipeline`` (pipeline with its failed jobs), ``get_repository_file`` (a window of a 5,000-line
file, at ``main`` or at its commit SHA), ``save_pipeline`` (create on ``main``), and the broker: a
``send_message`` to another agent followed by a short ``wait_for_message`` of its own. The gateway
runs as a process (pinned to CPU 0 where the machine has two or more), the stand-in beside it.

Printed: calls per second, errors by kind (tool error reason, JSON-RPC error, HTTP or transport
failure), p50/p99 latency per tool and overall, the gateway's RSS before, at peak (``VmHWM``) and
``--settle`` seconds after the load stopped, and the broker's ledger: messages sent, received,
and still queued after a final drain (must be 0 lost). ``--json`` prints the same as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.e2e.harness import GatewayProcess  # noqa: E402
from tests.e2e.rpc import initialize_request  # noqa: E402
from tests.standin import dataset as ds  # noqa: E402
from tests.standin.fixtures import StandinProcess  # noqa: E402

PROTOCOL = "2025-06-18"
AGENTS = ("pm", "dev", "reviewer")
SHA = ds.REF_SHAS["main"]
#: (weight, name) of each step of the mix.
MIX = ((30, "get_pipeline"), (30, "get_repository_file"), (10, "save_pipeline"), (30, "broker"))


@dataclass
class Ledger:
    """What the soak saw."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: Counter[str] = field(default_factory=Counter)
    calls: int = 0
    sent: set[str] = field(default_factory=set)
    received: set[str] = field(default_factory=set)


class Session:
    """One MCP session over raw HTTP (its own connection pool)."""

    def __init__(self, url: str, agent: str) -> None:
        self.url = url
        self.agent = agent
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(60.0), trust_env=False)
        self.headers = {
            "X-Agent-Id": agent,
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        self.next_id = 0

    async def open(self) -> Session:
        init = initialize_request("soak", PROTOCOL)
        answer = await self.http.post(self.url, json=init, headers=self.headers)
        answer.raise_for_status()
        if "mcp-session-id" in answer.headers:
            self.headers["Mcp-Session-Id"] = answer.headers["mcp-session-id"]
        self.headers["MCP-Protocol-Version"] = PROTOCOL
        await self.http.post(
            self.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.headers
        )
        return self

    async def close(self) -> None:
        await self.http.aclose()

    async def call(self, tool: str, arguments: dict[str, Any], ledger: Ledger) -> dict[str, Any] | None:
        """One tools/call; its structuredContent, or None after recording the error's kind."""
        self.next_id += 1
        message = {
            "jsonrpc": "2.0",
            "id": self.next_id,
            "method": "tools/call",
            "params": {"name": tool, "arguments": arguments},
        }
        started = time.perf_counter()
        try:
            answer = await self.http.post(self.url, json=message, headers=self.headers)
        except httpx.HTTPError as exc:
            ledger.errors[f"{tool}: transport {type(exc).__name__}"] += 1
            return None
        finally:
            ledger.latencies[tool].append(time.perf_counter() - started)
            ledger.calls += 1
        if answer.status_code != 200:
            ledger.errors[f"{tool}: HTTP {answer.status_code}"] += 1
            return None
        body = _decode(answer)
        if body is None or "error" in body:
            code = (body or {}).get("error", {}).get("code")
            ledger.errors[f"{tool}: JSON-RPC {code}"] += 1
            return None
        result = body["result"]
        structured = result.get("structuredContent") or {}
        if result.get("isError"):
            ledger.errors[f"{tool}: {structured.get('error', {}).get('reason', 'error')}"] += 1
            return None
        return dict(structured)


def _decode(answer: httpx.Response) -> dict[str, Any] | None:
    if answer.headers.get("content-type", "").startswith("text/event-stream"):
        found = None
        for line in answer.text.splitlines():
            if line.startswith("data:") and line[5:].strip().startswith("{"):
                message = json.loads(line[5:])
                if "result" in message or "error" in message:
                    found = message
        return found
    return dict(answer.json())


async def step(session: Session, name: str, ledger: Ledger, rng: random.Random) -> None:
    if name == "get_pipeline":
        await session.call(
            "get_pipeline",
            {
                "id": ds.PROJECT_PATH,
                "pipeline_id": ds.PIPELINE_ID,
                "include": ["jobs"],
                "job_status": "failed",
            },
            ledger,
        )
    elif name == "get_repository_file":
        ref = rng.choice(("main", SHA))
        offset = rng.randrange(0, 5000, 500)
        arguments = {
            "project_id": ds.PROJECT_PATH,
            "file_path": ds.FILES["mixed"],
            "ref": ref,
            "offset": offset,
        }
        await session.call("get_repository_file", {**arguments, "limit": 200}, ledger)
    elif name == "save_pipeline":
        await session.call("save_pipeline", {"project_id": ds.PROJECT_PATH, "ref": "main"}, ledger)
    else:
        to = rng.choice([a for a in AGENTS if a != session.agent])
        sent = await session.call(
            "send_message", {"to": to, "subject": "soak", "body": {"n": rng.random()}}, ledger
        )
        if sent is not None and sent.get("messageId"):
            ledger.sent.add(str(sent["messageId"]))
        got = await session.call("wait_for_message", {"timeout_sec": 0.2}, ledger)
        if got is not None and got.get("message"):
            ledger.received.add(str(got["message"]["messageId"]))


async def worker(session: Session, ledger: Ledger, stop_at: float, seed: int) -> None:
    rng = random.Random(seed)
    names = [name for weight, name in MIX for _ in range(weight)]
    while time.monotonic() < stop_at:
        await step(session, rng.choice(names), ledger, rng)


async def drain(url: str, ledger: Ledger) -> None:
    """Receive what is still queued for each agent (so lost = sent - received)."""
    for agent in AGENTS:
        session = await Session(url, agent).open()
        try:
            while True:
                got = await session.call("wait_for_message", {"timeout_sec": 0}, ledger)
                if not got or not got.get("message"):
                    break
                ledger.received.add(str(got["message"]["messageId"]))
        finally:
            await session.close()


def rss_kib(pid: int) -> dict[str, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    return {
        line.split(":")[0]: int(line.split()[1])
        for line in status.splitlines()
        if line.startswith(("VmRSS", "VmHWM"))
    }


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def soak(url: str, pid: int, *, sessions: int, seconds: float, settle: float) -> dict[str, Any]:
    """Run the soak against the gateway at ``url`` (process ``pid``); the figures as a dict."""
    ledger = Ledger()
    before = rss_kib(pid)["VmRSS"]
    opened = await asyncio.gather(*(Session(url, AGENTS[i % len(AGENTS)]).open() for i in range(sessions)))
    started = time.monotonic()
    try:
        await asyncio.gather(*(worker(s, ledger, started + seconds, i) for i, s in enumerate(opened)))
    finally:
        elapsed = time.monotonic() - started
        await asyncio.gather(*(s.close() for s in opened))
    peak = rss_kib(pid)["VmHWM"]
    await drain(url, ledger)
    if settle:
        await asyncio.sleep(settle)
    after = rss_kib(pid)["VmRSS"]
    every = [v for values in ledger.latencies.values() for v in values]
    return {
        "sessions": sessions,
        "seconds": round(elapsed, 1),
        "calls": ledger.calls,
        "calls_per_second": round(ledger.calls / elapsed, 1) if elapsed else 0.0,
        "errors": dict(ledger.errors.most_common()),
        "latency_ms": {
            tool: {
                "p50": round(statistics.median(v) * 1e3, 1),
                "p99": round(percentile(v, 0.99) * 1e3, 1),
                "n": len(v),
            }
            for tool, v in sorted(ledger.latencies.items())
        }
        | {
            "all": {
                "p50": round(percentile(every, 0.5) * 1e3, 1),
                "p99": round(percentile(every, 0.99) * 1e3, 1),
            }
        },
        "rss_mib": {
            "before": round(before / 1024, 1),
            "peak": round(peak / 1024, 1),
            f"{settle:g}s_after": round(after / 1024, 1),
        },
        "messages": {
            "sent": len(ledger.sent),
            "received": len(ledger.received & ledger.sent),
            "lost": len(ledger.sent - ledger.received),
        },
    }


def pin(pid: int, cpu: int) -> None:
    with contextlib.suppress(AttributeError, OSError):
        if len(os.sched_getaffinity(0)) > 1:
            os.sched_setaffinity(pid, {cpu})


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument(
        "--settle", type=float, default=30.0, help="seconds to wait before the last RSS reading"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="soak-"))
    standin = StandinProcess(work / "standin").start()
    gateway = GatewayProcess(
        env={"GITLAB_URL": standin.url, "GITLAB_TOKEN": ds.ALICE_TOKEN, "GATEWAY_LOGGING__LEVEL": "WARNING"},
        state_dir=work / "state",
    )
    try:
        gateway.start()
        assert gateway.proc is not None and standin.proc is not None
        pin(gateway.proc.pid, 0)
        pin(standin.proc.pid, 1)
        figures = asyncio.run(
            soak(
                gateway.mcp_url,
                gateway.proc.pid,
                sessions=args.sessions,
                seconds=args.seconds,
                settle=args.settle,
            )
        )
    finally:
        gateway.stop()
        standin.stop()
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(
        f"{figures['sessions']} sessions for {figures['seconds']} s: {figures['calls']} calls, "
        f"{figures['calls_per_second']} calls/s"
    )
    print(f"errors: {figures['errors'] or 'none'}")
    for tool, lat in figures["latency_ms"].items():
        print(f"  {tool:22} p50 {lat['p50']:8.1f} ms   p99 {lat['p99']:8.1f} ms   {lat.get('n', '')}")
    print("RSS MiB: " + ", ".join(f"{k} {v}" for k, v in figures["rss_mib"].items()))
    print("broker messages: " + ", ".join(f"{k} {v}" for k, v in figures["messages"].items()))


if __name__ == "__main__":
    main()
