"""Job-log reads of ``get_job``: what a tail and a window at the end of a big log cost the gateway.

    .venv/bin/python -m bench job-logs                 # 10 MB and 200 MB logs
    .venv/bin/python -m bench job-logs --calls 40 --big-calls 3

The gateway (``python -m gateway`` from the installed wheel, as ``python -m bench`` runs it) is
pinned to CPU 0; the load generator, the GitLab stand-in and the loopback stub (``bench/stub.py``,
which keeps each log in memory after the first read, so the stand-in's cost of making it is paid
once) to CPU 1. Reads, one call at a time:

- ``tail_lines: 50`` of the stand-in's 10 MB log (``build:macos``) and of its 200 MB log
  (``build:linux``);
- a ``byte_limit: 65536`` window at the end of each (``byte_offset`` = size - 65,536): GitLab's
  ``GET /projects/:id/jobs/:job_id/trace`` has no ranged reads, so the gateway reads every byte
  before it;
- the job alone (no log), the floor every row above includes.

Columns: the gateway's CPU per call (``/proc``, user + system, all threads), p50 latency, the
log bytes GitLab sent per call (the answer's ``metadata.bytes_read``), and the growth of the
gateway's peak RSS (``VmHWM``) over the row, measured from the start of its first call. The
targets: a 10 MB tail at most 30 ms of CPU, a 200 MB tail at most 1 s and 64 MiB of peak RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.load import cpu_seconds, mcp_session, peak_rss_mib, pin  # noqa: E402
from bench.rig import SERVER_CPU, load_average, rig  # noqa: E402
from tests.e2e.harness import GatewayProcess  # noqa: E402
from tests.standin import dataset as ds  # noqa: E402
from tests.standin import job_logs  # noqa: E402

WINDOW = 65_536


@dataclass
class Read:
    label: str
    arguments: dict[str, Any]
    calls: int


@dataclass
class Figures:
    label: str
    calls: int
    cpu_ms: float
    p50_ms: float
    bytes_read: int
    rss_growth_mib: float
    lines: int


def reads(calls: int, big_calls: int) -> list[Read]:
    small = job_logs.lazy_log_size(job_logs.BENCH_LOG_BYTES)
    big = job_logs.lazy_log_size(job_logs.HUGE_LOG_BYTES)

    def log(job_id: int, **extra: Any) -> dict[str, Any]:
        return {"id": ds.PROJECT_PATH, "job_id": job_id, "include": ["log"], **extra}

    return [
        Read("job alone (no log)", {"id": ds.PROJECT_PATH, "job_id": job_logs.BENCH_LOG_JOB_ID}, calls),
        Read("10 MB log, tail_lines 50", log(job_logs.BENCH_LOG_JOB_ID, tail_lines=50), calls),
        Read(
            "10 MB log, last 64 KiB window",
            log(job_logs.BENCH_LOG_JOB_ID, byte_offset=small - WINDOW, byte_limit=WINDOW),
            calls,
        ),
        Read("200 MB log, tail_lines 50", log(job_logs.HUGE_LOG_JOB_ID, tail_lines=50), big_calls),
        Read(
            "200 MB log, last 64 KiB window",
            log(job_logs.HUGE_LOG_JOB_ID, byte_offset=big - WINDOW, byte_limit=WINDOW),
            big_calls,
        ),
    ]


async def call(
    http: aiohttp.ClientSession, url: str, headers: dict[str, str], arguments: dict[str, Any]
) -> Any:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "get_job", "arguments": arguments},
    }
    async with http.post(url, data=json.dumps(body), headers=headers) as response:
        answer = await response.json(content_type=None)
    result = answer.get("result") or {}
    if response.status != 200 or result.get("isError") or "error" in answer:
        raise RuntimeError(f"get_job failed ({response.status}): {json.dumps(answer)[:400]}")
    return result["structuredContent"]


async def measure(
    http: aiohttp.ClientSession, gateway: GatewayProcess, headers: dict[str, str], read: Read
) -> Figures:
    assert gateway.proc is not None
    pid = gateway.proc.pid
    rss_before = peak_rss_mib(pid)
    out = await call(http, gateway.mcp_url, headers, read.arguments)  # warm-up (and the stub's copy)
    log = out.get("log") or {}
    latencies = []
    cpu_before = cpu_seconds(pid)
    for _ in range(read.calls):
        started = time.perf_counter()
        await call(http, gateway.mcp_url, headers, read.arguments)
        latencies.append(time.perf_counter() - started)
    cpu = cpu_seconds(pid) - cpu_before
    return Figures(
        label=read.label,
        calls=read.calls,
        cpu_ms=cpu / read.calls * 1e3,
        p50_ms=statistics.median(latencies) * 1e3,
        bytes_read=(log.get("metadata") or {}).get("bytes_read", 0),
        rss_growth_mib=peak_rss_mib(pid) - rss_before,
        lines=(log.get("content") or "").count("\n"),
    )


async def run(args: argparse.Namespace, workdir: Path) -> list[Figures]:
    async with rig(workdir) as running:
        gateway = GatewayProcess(
            env={"GITLAB_URL": running.stub_url, "GITLAB_TOKEN": ds.ALICE_TOKEN},
            state_dir=workdir / "gateway-state",
        )
        gateway.start()
        assert gateway.proc is not None
        running.procs.append(gateway.proc)
        pin(gateway.proc.pid, SERVER_CPU)
        http = running.clients.sessions[0]
        headers = await mcp_session(http, gateway.mcp_url)
        print(f"load average before: {load_average()}", flush=True)
        rows = []
        for read in reads(args.calls, args.big_calls):
            rows.append(await measure(http, gateway, headers, read))
            print(f"  {read.label}: {rows[-1].cpu_ms:.1f} ms CPU per call", flush=True)
        print(f"load average after: {load_average()}", flush=True)
        return rows


def table(rows: list[Figures]) -> str:
    lines = [
        "| read | calls | gateway CPU ms/call | p50 ms | log bytes from GitLab/call | lines returned "
        "| peak RSS growth MiB |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r.label} | {r.calls} | {r.cpu_ms:.1f} | {r.p50_ms:.1f} | {r.bytes_read:,} | {r.lines} "
            f"| {r.rss_growth_mib:.1f} |"
        )
    return "\n".join(lines)


def targets(rows: list[Figures]) -> list[str]:
    by = {r.label: r for r in rows}
    out = []

    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    small, big = by.get("10 MB log, tail_lines 50"), by.get("200 MB log, tail_lines 50")
    if small:
        out.append(f"10 MB tail: {small.cpu_ms:.1f} ms CPU (target <= 30): {verdict(small.cpu_ms <= 30)}")
    if big:
        out.append(f"200 MB tail: {big.cpu_ms:.0f} ms CPU (target <= 1000): {verdict(big.cpu_ms <= 1000)}")
        out.append(
            f"200 MB tail: peak RSS growth {big.rss_growth_mib:.1f} MiB (target <= 64): "
            f"{verdict(big.rss_growth_mib <= 64)}"
        )
    window = by.get("200 MB log, last 64 KiB window")
    if window:
        out.append(
            f"200 MB window at the end: {window.bytes_read:,} bytes read from GitLab for {WINDOW:,} "
            "(GitLab's log API has no ranged reads; see docs/tools/get_job.md)"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench job-logs", description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=40, help="calls per row on the 10 MB log")
    ap.add_argument("--big-calls", type=int, default=3, help="calls per row on the 200 MB log")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-job-log-") as tmp:
        rows = asyncio.run(run(args, Path(tmp)))
    print()
    print(table(rows))
    print()
    for line in targets(rows):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
