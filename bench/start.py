"""What a start costs: CPU from exec to the first ``/healthz`` that answers 200, and the resident
memory of the idle gateway after it, with the defaults (SQLite broker, no tracing, no console).

    .venv/bin/python -m bench start                # 5 starts of each kind, the median and the range
    .venv/bin/python -m bench start --runs 9 --cpu 0

The gateway is the installed wheel (``tests.shipped``: built once, or ``GATEWAY_TEST_SHIPPED``'s),
started as users start it (its console script), pinned to one CPU (``taskset``). Two kinds of
start:

- ``first start``: a new state folder; the CPU includes the migration process the gateway runs
  to create the database (its children's CPU, from ``/proc``);
- ``restart``: the same folder again, its database at the newest schema (every start but the
  first).

``GITLAB_URL`` is a loopback port that refuses connections (no test reaches the internet), so the
start-up check costs what a failed one costs. CPU is the process's own (``/proc/PID/stat``: user +
system, children included), which other load on the machine skews less than wall time; the load
average is printed beside the figures all the same. Idle RSS is ``VmRSS`` two seconds after the
first healthy answer, before any MCP request: the first request of each MCP era loads what only
that era uses, the first that lists or calls a tool imports the tool modules, and the first
``tools/list`` builds the tools' schemas.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.rig import Help, load_average
from tests.e2e.harness import free_port, gateway_command
from tests.local_http import TLS

#: Seconds between two ``/healthz`` polls: each answered poll costs the gateway a little CPU.
POLL_SECONDS = 0.02
#: Seconds the gateway idles after its first healthy answer before its RSS is read.
IDLE_SECONDS = 2.0
#: The targets of a start with the defaults.
TARGET_CPU_SECONDS = 1.0
TARGET_RSS_MIB = 64.0


@dataclass(frozen=True)
class Start:
    cpu_seconds: float
    wall_seconds: float
    idle_rss_mib: float


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` and of the children it waited for (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def measure_start(state: Path, *, cpu: int, timeout: float = 60.0) -> Start:
    """One start of the installed gateway in the state folder ``state``, stopped once measured."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITLAB_", "GATEWAY_", "OTEL_"))}
    env |= {"GATEWAY_STATE_DIR": str(state), "GITLAB_URL": "http://127.0.0.1:9"}
    taskset = shutil.which("taskset")
    pinned = [taskset, "-c", str(cpu)] if taskset else []
    started = time.monotonic()
    with (state / "gateway.log").open("wb") as log:
        proc = subprocess.Popen(
            [*pinned, *gateway_command(), "--port", str(port)],
            cwd=state,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        with httpx.Client(timeout=1.0, trust_env=False, verify=TLS) as http:
            while True:
                if proc.poll() is not None or time.monotonic() - started > timeout:
                    raise RuntimeError(f"the gateway did not start:\n{(state / 'gateway.log').read_text()}")
                try:
                    if http.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(POLL_SECONDS)
        wall = time.monotonic() - started
        # taskset execs the gateway in its own process: the pid is the gateway's.
        cpu_seconds = _cpu_seconds(proc.pid)
        time.sleep(IDLE_SECONDS)
        return Start(cpu_seconds, wall, _rss_mib(proc.pid))
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _line(kind: str, starts: list[Start]) -> str:
    cpu = [s.cpu_seconds for s in starts]
    rss = [s.idle_rss_mib for s in starts]
    wall = [s.wall_seconds for s in starts]
    return (
        f"{kind:<12} CPU to healthy {statistics.median(cpu):5.2f} s ({min(cpu):.2f}-{max(cpu):.2f})   "
        f"idle RSS {statistics.median(rss):5.1f} MiB ({min(rss):.1f}-{max(rss):.1f})   "
        f"wall {statistics.median(wall):5.2f} s"
    )


def table(runs: int, cpu: int) -> list[str]:
    """The figures, one line per kind of start, with the load average before and after."""
    before = load_average()
    firsts: list[Start] = []
    restarts: list[Start] = []
    with tempfile.TemporaryDirectory(prefix="bench-start-") as tmp:
        for _ in range(runs):
            # The first start makes the database with the build's own migrations; the restart
            # finds it at the build's newest schema (so any build can be measured, an older one
            # included).
            state = Path(tempfile.mkdtemp(prefix="start-", dir=tmp))
            firsts.append(measure_start(state, cpu=cpu))
            restarts.append(measure_start(state, cpu=cpu))
    restart_cpu = statistics.median(s.cpu_seconds for s in restarts)
    restart_rss = statistics.median(s.idle_rss_mib for s in restarts)
    return [
        f"start of the installed gateway, defaults, pinned to CPU {cpu}, {runs} starts each "
        f"(median, range); load average {before} before, {load_average()} after",
        _line("restart", restarts),
        _line("first start", firsts),
        f"targets (restart): CPU to healthy <= {TARGET_CPU_SECONDS:g} s "
        f"{'met' if restart_cpu <= TARGET_CPU_SECONDS else 'NOT met'}; idle RSS <= {TARGET_RSS_MIB:g} MiB "
        f"{'met' if restart_rss <= TARGET_RSS_MIB else 'NOT met'}",
    ]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench start", description=__doc__, formatter_class=Help)
    ap.add_argument("--runs", type=int, default=5, help="starts of each kind")
    ap.add_argument("--cpu", type=int, default=1, help="the CPU the gateway is pinned to")
    args = ap.parse_args(argv)
    for line in table(args.runs, args.cpu):
        print(line, flush=True)
    return 0
