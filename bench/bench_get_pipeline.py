"""Latency of ``get_pipeline`` through the gateway vs the same GraphQL request sent straight to
GitLab (the stand-in), in one run, at several concurrencies.

    .venv/bin/python bench/bench_get_pipeline.py                      # MCP over HTTP, c=1 and c=32
    .venv/bin/python bench/bench_get_pipeline.py --calls 2000 --concurrency 1 8 32
    .venv/bin/python bench/bench_get_pipeline.py --layer tool         # in-process tool path only

Layers:

- ``mcp`` (default): the gateway as a process (``python -m gateway``), called with JSON-RPC
  ``tools/call`` over Streamable HTTP on ``/mcp``, in both protocol eras (``gateway``: one
  2025-11-25 session; ``modern``: stateless 2026-07-28 requests); versus the identical
  ``POST /api/graphql`` (same document, operation name, variables and token) straight to the
  stand-in. Both use the same ``httpx.AsyncClient`` settings, so client costs cancel out.
- ``tool``: the gateway's tool path in this process (registry validation, the handler, the GitLab
  client, result shaping) over a real HTTP connection to the stand-in, versus the bare GraphQL
  request; isolates ``gateway/tools/ci/`` + ``gateway/gitlab/`` from the MCP transport.

The ``mcp`` layer also runs a third path, ``floor``: the thinnest possible proxy (aiohttp receives
a POST, httpx forwards the fixed GraphQL body, no MCP, no validation) as its own process. What it
adds is the cost of any extra process hop on this machine, so ``gateway - floor`` is what the
gateway's own code adds (``--no-floor`` skips it). On Linux the CPU seconds the gateway (and the
forwarder) process spent per call are read from ``/proc``; unlike latency they do not depend on
how busy the other processes keep the CPUs.

Rounds alternate the paths' blocks so drift (CPU frequency, other load) hits all alike. Printed
per concurrency: p50 and p99 of each path, the p50 and p99 overhead ratio, the per-call overhead
in ms at p50 (and p99), and throughput. Target: the gateway adds < 1 ms per call at p50.
``--profile FILE`` (``tool`` layer) writes a cProfile of the gateway side for ``snakeviz``/``pstats``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.mcp_caller import McpCaller  # noqa: E402
from gateway.gitlab.operation_loader import load_operation, operation_name  # noqa: E402
from gateway.tools.ci.pipeline_read import pipeline_variables  # noqa: E402
from tests.e2e.harness import GatewayProcess, free_port  # noqa: E402
from tests.standin import dataset as ds  # noqa: E402
from tests.standin.fixtures import StandinProcess  # noqa: E402

PROTOCOL = "2025-11-25"
Call = Callable[[], Awaitable[None]]


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


async def run_block(call: Call, calls: int, concurrency: int) -> tuple[list[float], float]:
    """``calls`` calls, ``concurrency`` at a time; per-call latencies (s) and the wall time (s)."""
    latencies: list[float] = []
    remaining = calls

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            started = time.perf_counter()
            await call()
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, time.perf_counter() - started


def direct_body(arguments: dict[str, Any]) -> bytes:
    """The exact GraphQL request body the gateway sends for ``arguments``."""
    facet = arguments["include"][0] if arguments.get("include") else None
    variables = pipeline_variables(
        arguments["id"], arguments["pipeline_id"], facet, first=arguments.get("first", 20)
    )
    body = {
        "query": load_operation("get_pipeline"),
        "variables": {k: v for k, v in variables.items() if v is not None},
        "operationName": operation_name("get_pipeline"),
    }
    return json.dumps(body).encode()


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (Linux ``/proc``; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Path_:
    """One measured path: its calls, latencies, wall time and (optionally) a process's CPU."""

    def __init__(self, name: str, call: Call, pid: int | None = None) -> None:
        self.name, self.call, self.pid = name, call, pid
        self.latencies: list[float] = []
        self.wall = 0.0
        self.cpu = 0.0

    async def block(self, calls: int, concurrency: int) -> None:
        before = process_cpu_seconds(self.pid) if self.pid else None
        latencies, wall = await run_block(self.call, calls, concurrency)
        after = process_cpu_seconds(self.pid) if self.pid else None
        self.latencies += latencies
        self.wall += wall
        if before is not None and after is not None:
            self.cpu += after - before

    def figures(self) -> dict[str, float]:
        n = len(self.latencies)
        out = {
            "p50_ms": percentile(self.latencies, 0.5) * 1e3,
            "p99_ms": percentile(self.latencies, 0.99) * 1e3,
            "calls_per_s": n / self.wall,
        }
        if self.pid:
            out["process_cpu_ms_per_call"] = self.cpu / n * 1e3
        return out


def report(label: str, concurrency: int, paths: list[Path_]) -> dict[str, Any]:
    figures = {p.name: p.figures() for p in paths}
    direct = figures["direct"]
    print(f"{label} c={concurrency} n={len(paths[0].latencies)} per path", flush=True)
    for name, f in figures.items():
        line = f"  {name:8s} p50 {f['p50_ms']:8.3f} ms  p99 {f['p99_ms']:8.3f} ms  "
        line += f"{f['calls_per_s']:7.1f} calls/s"
        if name != "direct":
            f["overhead_p50_ms"] = f["p50_ms"] - direct["p50_ms"]
            f["overhead_p99_ms"] = f["p99_ms"] - direct["p99_ms"]
            f["ratio_p50"] = f["p50_ms"] / direct["p50_ms"]
            f["ratio_p99"] = f["p99_ms"] / direct["p99_ms"]
            line += (
                f" | overhead/call p50 {f['overhead_p50_ms']:+8.3f} ms  p99 {f['overhead_p99_ms']:+8.3f} ms"
                f" | ratio p50 {f['ratio_p50']:5.2f}  p99 {f['ratio_p99']:5.2f}"
            )
        if "process_cpu_ms_per_call" in f:
            line += f" | its CPU {f['process_cpu_ms_per_call']:.3f} ms/call"
        print(line, flush=True)
    if "modern" in figures:
        legacy, modern = figures["gateway"], figures["modern"]
        print(
            "  modern (2026-07-28) vs legacy (2025-11-25) era: "
            f"p50 x{modern['p50_ms'] / legacy['p50_ms']:.3f}"
            f"  p99 x{modern['p99_ms'] / legacy['p99_ms']:.3f}"
            + (
                f"  CPU/call x{modern['process_cpu_ms_per_call'] / legacy['process_cpu_ms_per_call']:.3f}"
                if "process_cpu_ms_per_call" in legacy
                else ""
            ),
            flush=True,
        )
    if "floor" in figures:
        beyond = figures["gateway"]["p50_ms"] - figures["floor"]["p50_ms"]
        print(f"  gateway beyond the bare forwarder at p50: {beyond:+.3f} ms", flush=True)
    return {"layer": label, "concurrency": concurrency, **figures}


async def measure(label: str, paths: list[Path_], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Warm every path, then alternate blocks of each path ``args.rounds`` times per concurrency."""
    out = []
    for concurrency in args.concurrency:
        for path in paths:
            await run_block(path.call, max(args.warmup, concurrency * 4), concurrency)
            path.latencies, path.wall, path.cpu = [], 0.0, 0.0
        per_round = max(concurrency, args.calls // args.rounds)
        for _ in range(args.rounds):
            for path in paths:
                await path.block(per_round, concurrency)
        out.append(report(label, concurrency, paths))
    return out


#: The thinnest possible gateway: aiohttp receives a POST and forwards a fixed GraphQL body to
#: GitLab with httpx. What it adds is the floor of any separate-process proxy on this machine.
FORWARDER = """
import sys, httpx
from aiohttp import web
upstream, token, body = sys.argv[2], sys.argv[3], open(sys.argv[4], "rb").read()
async def client(app):
    app["http"] = httpx.AsyncClient(trust_env=False, limits=httpx.Limits(max_connections=256,
                                                                         max_keepalive_connections=256))
    yield
    await app["http"].aclose()
async def forward(request):
    await request.read()
    r = await request.app["http"].post(upstream, content=body, headers={"PRIVATE-TOKEN": token,
                                       "Content-Type": "application/json"})
    return web.Response(body=r.content, content_type="application/json")
app = web.Application()
app.cleanup_ctx.append(client)
app.router.add_post("/", forward)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
"""


def http_client() -> httpx.AsyncClient:
    return httpx.AsyncClient(
        trust_env=False, timeout=60.0, limits=httpx.Limits(max_connections=256, max_keepalive_connections=256)
    )


async def bench_mcp(
    standin_url: str, token: str, arguments: dict[str, Any], args: argparse.Namespace, workdir: Path
) -> list[dict[str, Any]]:
    env = {
        "GITLAB_URL": standin_url,
        "GITLAB_TOKEN": token,
        **dict(kv.split("=", 1) for kv in args.gateway_env),
    }
    gateway = GatewayProcess(env=env, state_dir=workdir / "state").start()
    assert gateway.proc is not None
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        # The server on one core of its own, as the comparisons between paths assume.
        os.sched_setaffinity(gateway.proc.pid, {(os.cpu_count() or 1) - 1})
    body = direct_body(arguments)
    (workdir / "body.json").write_bytes(body)
    forwarder: subprocess.Popen[bytes] | None = None
    try:
        async with http_client() as http:
            mcp = McpCaller(http, gateway.mcp_url, "bench_get_pipeline")
            await mcp.initialize()
            result = await mcp.call_tool("get_pipeline", arguments)
            print(
                f"gateway answer: {len(json.dumps(result))} bytes, "
                f"{len(result['structuredContent'].get('jobs', []))} jobs",
                flush=True,
            )

            async def via_gateway() -> None:
                await mcp.call_tool("get_pipeline", arguments)

            modern = McpCaller(http, gateway.mcp_url, "bench_get_pipeline", era="modern")
            await modern.call_tool("get_pipeline", arguments)

            async def via_modern() -> None:
                await modern.call_tool("get_pipeline", arguments)

            async def direct() -> None:
                response = await http.post(
                    f"{standin_url}/api/graphql", content=body, headers=_headers(token)
                )
                response.raise_for_status()
                response.json()

            assert gateway.proc is not None
            paths = [
                Path_("gateway", via_gateway, gateway.proc.pid),
                Path_("modern", via_modern, gateway.proc.pid),
                Path_("direct", direct),
            ]
            if args.floor:
                port = free_port()
                forwarder = subprocess.Popen(
                    [
                        sys.executable,
                        "-c",
                        FORWARDER,
                        str(port),
                        f"{standin_url}/api/graphql",
                        token,
                        str(workdir / "body.json"),
                    ]
                )
                await _wait_listening(http, f"http://127.0.0.1:{port}/")

                async def via_forwarder() -> None:
                    response = await http.post(
                        f"http://127.0.0.1:{port}/", content=b"{}", headers=_headers(None)
                    )
                    response.raise_for_status()
                    response.json()

                paths.append(Path_("floor", via_forwarder, forwarder.pid))
            return await measure("mcp", paths, args)
    finally:
        if forwarder is not None:
            forwarder.terminate()
            forwarder.wait(10)
        gateway.stop()


def _headers(token: str | None) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if token:
        headers["PRIVATE-TOKEN"] = token
    return headers


async def _wait_listening(http: httpx.AsyncClient, url: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            await http.get(url)
            return
        except httpx.HTTPError:
            await asyncio.sleep(0.05)
    raise RuntimeError(f"{url} did not start listening")


async def bench_tool(
    standin_url: str, token: str, arguments: dict[str, Any], args: argparse.Namespace, workdir: Path
) -> list[dict[str, Any]]:
    from gateway.cache import CacheRegistry
    from gateway.config import load_settings
    from gateway.gitlab.client import GitLabClient
    from gateway.gitlab.credentials import service_credential
    from gateway.observability.metrics import Metrics
    from gateway.server.services import Services
    from gateway.tools import all_tools
    from gateway.tools.caller import Caller
    from gateway.tools.context import CallInfo, ToolContext
    from gateway.tools.registry import Registry

    settings = load_settings(gitlab={"url": standin_url, "token": token}, state_dir=str(workdir / "state"))
    metrics = Metrics()
    gitlab = GitLabClient(settings.gitlab, metrics=metrics)
    services = Services(
        settings=settings,
        gitlab=gitlab,
        metrics=metrics,
        caches=CacheRegistry(enabled=True, max_entries=64, metrics=metrics),
    )
    registry = Registry(all_tools())
    tool = registry.resolve("get_pipeline")
    assert tool is not None
    caller = Caller(agent_id=None, credential=service_credential(token))
    body = direct_body(arguments)
    profiler = cProfile.Profile() if args.profile else None
    try:
        async with http_client() as http:

            async def via_gateway() -> None:
                if profiler:
                    profiler.enable()
                ctx = ToolContext(services, CallInfo(request_id="bench", caller=caller))
                result = await registry.call(tool, ctx, dict(arguments))
                result.to_mcp()  # the JSON text block is part of the cost
                if profiler:
                    profiler.disable()
                assert not result.is_error, result.structured

            async def direct() -> None:
                response = await http.post(
                    f"{standin_url}/api/graphql", content=body, headers=_headers(token)
                )
                response.raise_for_status()
                response.json()

            return await measure("tool", [Path_("gateway", via_gateway), Path_("direct", direct)], args)
    finally:
        await gitlab.aclose()
        if profiler and args.profile:
            profiler.dump_stats(args.profile)
            print(f"profile written to {args.profile}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layer", choices=["mcp", "tool"], default="mcp")
    ap.add_argument("--calls", type=int, default=1000, help="measured calls per path and concurrency")
    ap.add_argument("--rounds", type=int, default=5, help="alternating gateway/direct blocks")
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    ap.add_argument(
        "--include", choices=["none", "jobs", "downstream_pipelines", "bridge_jobs"], default="jobs"
    )
    ap.add_argument("--first", type=int, default=20)
    ap.add_argument(
        "--gateway-env",
        nargs="*",
        default=[],
        metavar="NAME=VALUE",
        help="extra environment for the gateway process",
    )
    ap.add_argument(
        "--no-floor",
        dest="floor",
        action="store_false",
        help="skip the bare aiohttp+httpx forwarder used as the floor of any proxy (mcp layer)",
    )
    ap.add_argument("--profile", help="cProfile output file (tool layer)")
    ap.add_argument("--json", help="also write the figures here as JSON")
    args = ap.parse_args()

    arguments: dict[str, Any] = {"id": ds.PROJECT_PATH, "pipeline_id": ds.PIPELINE_ID}
    if args.include != "none":
        arguments |= {"include": [args.include], "first": args.first}
    with tempfile.TemporaryDirectory(prefix="bench-get-pipeline-") as tmp:
        workdir = Path(tmp)
        standin = StandinProcess(workdir / "standin").start()
        try:
            print(
                f"stand-in {standin.url}; get_pipeline {json.dumps(arguments)}; "
                f"{args.calls} calls per path in {args.rounds} alternating rounds",
                flush=True,
            )
            runner = bench_mcp if args.layer == "mcp" else bench_tool
            figures = asyncio.run(runner(standin.url, ds.ALICE_TOKEN, arguments, args, workdir))
        finally:
            standin.stop()
    target = next((f for f in figures if f["concurrency"] == 1), figures[0])
    added = target["gateway"]["overhead_p50_ms"]
    print(
        f"target: < 1 ms added per call at p50 (c=1): {added:.3f} ms, "
        f"{'meets' if added < 1.0 else 'misses'} it"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
