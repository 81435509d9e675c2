"""Latency of ``get_pipeline`` through the gateway vs the same GraphQL request sent straight to
GitLab (the stand-in), in one run, at several concurrencies.

    .venv/bin/python bench/bench_get_pipeline.py                      # MCP over HTTP, c=1 and c=32
    .venv/bin/python bench/bench_get_pipeline.py --calls 2000 --concurrency 1 8 32
    .venv/bin/python bench/bench_get_pipeline.py --layer tool         # in-process tool path only

Layers:

- ``mcp`` (default): the gateway as a process (``python -m gateway``), called with JSON-RPC
  ``tools/call`` over Streamable HTTP on ``/mcp`` in one MCP session; versus the identical
  ``POST /api/graphql`` (same document, operation name, variables and token) straight to the
  stand-in. Both use the same ``httpx.AsyncClient`` settings, so client costs cancel out.
- ``tool``: the gateway's tool path in this process (registry validation, the handler, the GitLab
  client, result shaping) over a real HTTP connection to the stand-in, versus the bare GraphQL
  request; isolates ``gateway/tools/pipelines.py`` + ``gateway/gitlab/`` from the MCP transport.

Rounds alternate gateway and direct blocks so drift (CPU frequency, other load) hits both alike.
Printed per concurrency: p50 and p99 of each path, the p50 and p99 overhead ratio, the per-call
overhead in ms at p50 (and p99), and throughput. Target: the gateway adds < 1 ms per call at p50.
``--profile FILE`` (``tool`` layer) writes a cProfile of the gateway side for ``snakeviz``/``pstats``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gateway.gitlab.client import load_operation, operation_name  # noqa: E402
from gateway.tools.pipelines import pipeline_variables  # noqa: E402
from tests.e2e.harness import GatewayProcess  # noqa: E402
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


class McpCaller:
    """A minimal Streamable HTTP MCP client: one session, ``tools/call`` as JSON-RPC POSTs."""

    def __init__(self, http: httpx.AsyncClient, url: str) -> None:
        self.http = http
        self.url = url
        self.headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        self.next_id = 0

    async def _post(self, message: dict[str, Any]) -> httpx.Response:
        response = await self.http.post(self.url, content=json.dumps(message), headers=self.headers)
        response.raise_for_status()
        return response

    @staticmethod
    def _result(response: httpx.Response) -> dict[str, Any]:
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            for line in response.text.splitlines():
                if line.startswith("data:"):
                    message = json.loads(line[5:])
                    if "result" in message or "error" in message:
                        return message  # type: ignore[no-any-return]
            raise RuntimeError("SSE response without a result")
        return response.json()  # type: ignore[no-any-return]

    async def initialize(self) -> None:
        response = await self._post(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": PROTOCOL,
                    "capabilities": {},
                    "clientInfo": {"name": "bench_get_pipeline", "version": "1"},
                },
            }
        )
        self._result(response)
        session = response.headers.get("mcp-session-id")
        if session:
            self.headers["Mcp-Session-Id"] = session
        self.headers["MCP-Protocol-Version"] = PROTOCOL
        await self.http.post(
            self.url,
            content=json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            headers=self.headers,
        )

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        message = {
            "jsonrpc": "2.0",
            "id": self.next_id,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }
        result = self._result(await self._post(message))
        if "error" in result or result["result"].get("isError"):
            raise RuntimeError(f"tools/call failed: {json.dumps(result)[:500]}")
        return result["result"]  # type: ignore[no-any-return]


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


def report(
    label: str, concurrency: int, gw: list[float], direct: list[float], gw_wall: float, direct_wall: float
) -> dict[str, float]:
    g50, g99 = percentile(gw, 0.5) * 1e3, percentile(gw, 0.99) * 1e3
    d50, d99 = percentile(direct, 0.5) * 1e3, percentile(direct, 0.99) * 1e3
    figures = {
        "concurrency": concurrency,
        "calls": len(gw),
        "gateway_p50_ms": g50,
        "gateway_p99_ms": g99,
        "direct_p50_ms": d50,
        "direct_p99_ms": d99,
        "ratio_p50": g50 / d50,
        "ratio_p99": g99 / d99,
        "overhead_p50_ms": g50 - d50,
        "overhead_p99_ms": g99 - d99,
        "gateway_rps": len(gw) / gw_wall,
        "direct_rps": len(direct) / direct_wall,
    }
    print(
        f"{label:>4} c={concurrency:<3} n={len(gw):<5} "
        f"gateway p50 {g50:7.3f} ms  p99 {g99:7.3f} ms | direct p50 {d50:7.3f} ms  p99 {d99:7.3f} ms | "
        f"ratio p50 {g50 / d50:5.2f}  p99 {g99 / d99:5.2f} | overhead/call p50 {g50 - d50:+7.3f} ms  "
        f"p99 {g99 - d99:+7.3f} ms | {len(gw) / gw_wall:7.1f} vs {len(direct) / direct_wall:7.1f} calls/s",
        flush=True,
    )
    return figures


async def measure(
    label: str, gateway_call: Call, direct_call: Call, args: argparse.Namespace
) -> list[dict[str, float]]:
    out = []
    for concurrency in args.concurrency:
        for call in (gateway_call, direct_call):  # warm connections, caches, code paths
            await run_block(call, max(args.warmup, concurrency * 4), concurrency)
        gw: list[float] = []
        direct: list[float] = []
        gw_wall = direct_wall = 0.0
        per_round = max(concurrency, args.calls // args.rounds)
        for _ in range(args.rounds):
            lat, wall = await run_block(gateway_call, per_round, concurrency)
            gw += lat
            gw_wall += wall
            lat, wall = await run_block(direct_call, per_round, concurrency)
            direct += lat
            direct_wall += wall
        out.append(report(label, concurrency, gw, direct, gw_wall, direct_wall))
    return out


def http_client() -> httpx.AsyncClient:
    return httpx.AsyncClient(
        trust_env=False, timeout=60.0, limits=httpx.Limits(max_connections=256, max_keepalive_connections=256)
    )


async def bench_mcp(
    standin_url: str, token: str, arguments: dict[str, Any], args: argparse.Namespace, workdir: Path
) -> list[dict[str, float]]:
    env = {
        "GITLAB_URL": standin_url,
        "GITLAB_TOKEN": token,
        **dict(kv.split("=", 1) for kv in args.gateway_env),
    }
    gateway = GatewayProcess(env=env, state_dir=workdir / "state").start()
    body = direct_body(arguments)
    try:
        async with http_client() as http:
            mcp = McpCaller(http, gateway.mcp_url)
            await mcp.initialize()
            result = await mcp.call_tool("get_pipeline", arguments)
            print(
                f"gateway answer: {len(json.dumps(result))} bytes, "
                f"{len(result['structuredContent'].get('jobs', []))} jobs",
                flush=True,
            )

            async def via_gateway() -> None:
                await mcp.call_tool("get_pipeline", arguments)

            async def direct() -> None:
                response = await http.post(
                    f"{standin_url}/api/graphql",
                    content=body,
                    headers={
                        "PRIVATE-TOKEN": token,
                        "Content-Type": "application/json",
                        "Accept": "application/json",
                    },
                )
                response.raise_for_status()
                response.json()

            return await measure("mcp", via_gateway, direct, args)
    finally:
        gateway.stop()


async def bench_tool(
    standin_url: str, token: str, arguments: dict[str, Any], args: argparse.Namespace, workdir: Path
) -> list[dict[str, float]]:
    from gateway.cache import CacheRegistry
    from gateway.config import load_settings
    from gateway.gitlab.client import GitLabClient
    from gateway.gitlab.credentials import service_credential
    from gateway.observability.metrics import Metrics
    from gateway.tools import all_tools
    from gateway.tools.context import CallInfo, Principal, Services, ToolContext
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
    principal = Principal(agent_id=None, credential=service_credential(token))
    body = direct_body(arguments)
    profiler = cProfile.Profile() if args.profile else None
    try:
        async with http_client() as http:

            async def via_gateway() -> None:
                if profiler:
                    profiler.enable()
                ctx = ToolContext(services, CallInfo(request_id="bench", principal=principal))
                result = await registry.call(tool, ctx, dict(arguments))
                result.to_mcp()  # the JSON text block is part of the cost
                if profiler:
                    profiler.disable()
                assert not result.is_error, result.structured

            async def direct() -> None:
                response = await http.post(
                    f"{standin_url}/api/graphql",
                    content=body,
                    headers={
                        "PRIVATE-TOKEN": token,
                        "Content-Type": "application/json",
                        "Accept": "application/json",
                    },
                )
                response.raise_for_status()
                response.json()

            return await measure("tool", via_gateway, direct, args)
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
    verdict = "meets" if target["overhead_p50_ms"] < 1.0 else "misses"
    print(f"target: < 1 ms added per call at p50 (c=1): {target['overhead_p50_ms']:.3f} ms, {verdict} it")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    print(f"median of ratios: {statistics.median(f['ratio_p50'] for f in figures):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
