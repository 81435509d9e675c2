"""``get_repository_file`` on a 10 MiB text file: lines 1,000,000 to 1,000,500, cold and cached.

    .venv/bin/python bench/bench_repository_file.py                 # both layers
    .venv/bin/python bench/bench_repository_file.py --layer mcp     # the gateway process only
    .venv/bin/python bench/bench_repository_file.py --layer tool --rounds 5

The file is the stand-in's ``big/10mib.txt`` (exactly 10 MiB, 1,165,085 lines; GitLab's
``MAX_DATA_DISPLAY_SIZE``, so it arrives whole). The read is ``offset=1_000_000, limit=500`` at
the commit SHA of ``main`` (a full SHA, so the content may be cached), then the same call again.
For contrast, the same window by branch name (``ref=main``) twice: a branch is never cached as
immutable, so both cost a GitLab request.

Layers:

- ``mcp``: the gateway as a process (``python -m gateway``), ``tools/call`` over Streamable HTTP in
  one MCP session. Peak memory is the gateway process's peak RSS (``VmHWM`` in
  ``/proc/<pid>/status``) before and after the reads.
- ``tool``: the gateway's tool path in this process (registry, handler, GitLab client, windowing)
  over real HTTP to the stand-in, with a fresh cache per round. Peak memory is the peak of Python
  allocations during the call (``tracemalloc``), which isolates what the read itself holds.

Every figure comes with the GitLab requests the stand-in logged for it, and with the same GraphQL
request sent straight to the stand-in ("direct": what GitLab itself costs here), so ratios are
taken inside one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.mcp_caller import McpCaller  # noqa: E402
from gateway.gitlab.operation_loader import load_operation, operation_name  # noqa: E402
from tests.e2e.harness import GatewayProcess  # noqa: E402
from tests.standin import content  # noqa: E402
from tests.standin import dataset as ds  # noqa: E402
from tests.standin.control import StandinControl  # noqa: E402
from tests.standin.fixtures import StandinProcess  # noqa: E402

PROTOCOL = "2025-11-25"
OFFSET, LIMIT = 1_000_000, 500
SHA = ds.COMMITS["main"]
ARGS_SHA = {
    "project_id": ds.PROJECT_PATH,
    "file_path": ds.FILES["ten_mib"],
    "ref": SHA,
    "offset": OFFSET,
    "limit": LIMIT,
}
ARGS_BRANCH = {**ARGS_SHA, "ref": "main"}
EXPECTED = "".join(f"L{i:07d}\n" for i in range(OFFSET + 1, OFFSET + LIMIT + 1))


def check(structured: dict[str, Any]) -> None:
    """The window is lines 1,000,001..1,000,500 (1-based) of the file, exactly."""
    assert structured["content"] == EXPECTED, structured.get("content", "")[:80]
    assert structured["metadata"]["returned_lines"] == {"start": OFFSET + 1, "end": OFFSET + LIMIT}
    assert structured["metadata"]["total_lines"] == content.TEN_MIB_LINES
    assert structured["metadata"]["size_bytes"] == content.TEN_MIB


def proc_status(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` (peak RSS) of ``pid`` in KiB (Linux)."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def mib(kib: float) -> str:
    return f"{kib / 1024:7.1f} MiB"


def direct_body(ref: str) -> bytes:
    """The GraphQL request the gateway sends for the read (same document, name and variables)."""
    variables = {
        "byId": False,
        "fullPath": ds.PROJECT_PATH,
        "projectIds": [],
        "ref": ref,
        "commitRef": ref,
        "paths": [ds.FILES["ten_mib"]],
    }
    return json.dumps(
        {
            "query": load_operation("get_repository_file"),
            "variables": variables,
            "operationName": operation_name("get_repository_file"),
        }
    ).encode()


async def direct_read(http: httpx.AsyncClient, standin_url: str) -> float:
    """Seconds for the bare GraphQL request (10 MiB answer, decoded), straight to the stand-in."""
    started = time.perf_counter()
    response = await http.post(
        f"{standin_url}/api/graphql",
        content=direct_body(SHA),
        headers={"PRIVATE-TOKEN": ds.ALICE_TOKEN, "Content-Type": "application/json"},
    )
    response.raise_for_status()
    assert response.json()["data"]["project"]["repository"]["blobs"]["nodes"]
    return time.perf_counter() - started


def row(label: str, seconds: float, requests: int, memory: str, ratio_to: float | None = None) -> None:
    ratio = f"  ({seconds / ratio_to:8.4f}x direct)" if ratio_to else ""
    print(f"  {label:<38} {seconds * 1e3:10.2f} ms  GitLab requests {requests}  {memory}{ratio}", flush=True)


async def bench_mcp(standin_url: str, control: StandinControl, workdir: Path) -> dict[str, Any]:
    gateway = GatewayProcess(
        env={"GITLAB_URL": standin_url, "GITLAB_TOKEN": ds.ALICE_TOKEN}, state_dir=workdir / "state"
    ).start()
    assert gateway.proc is not None
    pid = gateway.proc.pid
    figures: dict[str, Any] = {}
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=120.0) as http:
            probe = await http.post(gateway.mcp_url, json={}, headers={"Accept": "application/json"})
            if probe.status_code == 404:
                print("mcp layer skipped: this gateway serves no /mcp yet (the transport is not in).")
                return {}
            mcp = McpCaller(http, gateway.mcp_url, "bench_repository_file")
            await mcp.initialize()
            direct = await direct_read(http, standin_url)
            before = proc_status(pid)
            print(
                f"mcp layer: gateway pid {pid}, RSS {mib(before['VmRSS'])}, "
                f"peak RSS so far {mib(before['VmHWM'])}"
            )
            row("direct GraphQL request (GitLab's cost)", direct, 1, "", None)
            for label, arguments in (
                ("1st read at the commit SHA (cold)", ARGS_SHA),
                ("2nd identical read (cache)", ARGS_SHA),
                ("read by branch name ref=main", ARGS_BRANCH),
                ("same read by branch name again", ARGS_BRANCH),
            ):
                control.clear_requests()
                started = time.perf_counter()
                structured = (await mcp.call_tool("get_repository_file", arguments))["structuredContent"]
                seconds = time.perf_counter() - started
                check(structured)
                status = proc_status(pid)
                requests = control.request_count()
                row(
                    label,
                    seconds,
                    requests,
                    f"RSS {mib(status['VmRSS'])}  peak RSS {mib(status['VmHWM'])}",
                    direct,
                )
                figures[label] = {"ms": seconds * 1e3, "gitlab_requests": requests, **status}
            figures["direct_ms"] = direct * 1e3
            figures["rss_before_kib"] = before
    finally:
        gateway.stop()
    return figures


async def bench_tool(standin_url: str, control: StandinControl, rounds: int) -> dict[str, Any]:
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

    settings = load_settings(
        gitlab={"url": standin_url, "token": ds.ALICE_TOKEN}, state_dir=tempfile.mkdtemp()
    )
    registry = Registry(all_tools())
    tool = registry.resolve("get_repository_file")
    assert tool is not None
    caller = Caller(agent_id=None, credential=service_credential(ds.ALICE_TOKEN))
    cold: list[float] = []
    warm: list[float] = []
    cold_peak: list[int] = []
    warm_peak: list[int] = []
    direct_times: list[float] = []
    cold_requests = warm_requests = 0
    async with httpx.AsyncClient(trust_env=False, timeout=120.0) as http:
        for _ in range(rounds):
            direct_times.append(await direct_read(http, standin_url))
            metrics = Metrics()
            caches = CacheRegistry(
                enabled=True,
                max_entries=settings.cache.max_entries,
                max_bytes=settings.cache.max_bytes,
                metrics=metrics,
            )
            gitlab = GitLabClient(settings.gitlab, metrics=metrics, http=http)
            services = Services(settings=settings, gitlab=gitlab, caches=caches, metrics=metrics)
            # Timed without tracemalloc (it slows allocation-heavy code many times over); then the
            # same two calls again on a fresh cache, traced, for their peak allocations.
            for traced in (False, True):
                services.caches = CacheRegistry(
                    enabled=True,
                    max_entries=settings.cache.max_entries,
                    max_bytes=settings.cache.max_bytes,
                    metrics=metrics,
                )
                for n, (times, peaks) in enumerate(((cold, cold_peak), (warm, warm_peak))):
                    control.clear_requests()
                    ctx = ToolContext(services, CallInfo(request_id="bench", caller=caller))
                    if traced:
                        tracemalloc.start()
                    started = time.perf_counter()
                    result = await registry.call(tool, ctx, dict(ARGS_SHA))
                    elapsed = time.perf_counter() - started
                    if traced:
                        peaks.append(tracemalloc.get_traced_memory()[1])
                        tracemalloc.stop()
                    else:
                        times.append(elapsed)
                    check(result.structured)
                    if n == 0:
                        cold_requests = control.request_count()
                    else:
                        warm_requests = control.request_count()
    direct = statistics.median(direct_times)
    print(f"tool layer (in-process, median of {rounds} rounds, fresh cache each round):")
    row("direct GraphQL request (GitLab's cost)", direct, 1, "")
    row(
        "1st read at the commit SHA (cold)",
        statistics.median(cold),
        cold_requests,
        f"peak Python allocations {max(cold_peak) / 2**20:6.1f} MiB",
        direct,
    )
    row(
        "2nd identical read (cache)",
        statistics.median(warm),
        warm_requests,
        f"peak Python allocations {max(warm_peak) / 2**10:6.1f} KiB",
        direct,
    )
    return {
        "direct_ms": direct * 1e3,
        "cold_ms": statistics.median(cold) * 1e3,
        "warm_ms": statistics.median(warm) * 1e3,
        "cold_peak_bytes": max(cold_peak),
        "warm_peak_bytes": max(warm_peak),
        "cold_requests": cold_requests,
        "warm_requests": warm_requests,
    }


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layer", choices=["mcp", "tool", "both"], default="both")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the tool layer (default 3)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-repository-file-"))
    standin = StandinProcess(workdir / "standin").start()
    control = StandinControl(standin.root)
    print(
        f"stand-in at {standin.url}; file {ds.FILES['ten_mib']} ({content.TEN_MIB} bytes, "
        f"{content.TEN_MIB_LINES} lines); window offset={OFFSET} limit={LIMIT}",
        flush=True,
    )
    figures: dict[str, Any] = {}
    try:
        if args.layer in ("tool", "both"):
            figures["tool"] = await bench_tool(standin.url, control, args.rounds)
        if args.layer in ("mcp", "both"):
            figures["mcp"] = await bench_mcp(standin.url, control, workdir)
    finally:
        control.close()
        standin.stop()
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
