"""CPU per call of the gateway on uvloop's event loop against asyncio's own, paired in one run.

    .venv/bin/python bench/bench_event_loop.py                    # get_pipeline + 20 jobs, c=32
    .venv/bin/python bench/bench_event_loop.py --concurrency 1 32 --rounds 9

Two gateway processes differ only in ``server.event_loop`` (``uvloop``, ``asyncio``); both are
pinned to CPU 0, the load generator and the GitLab stub (``bench/stub.py``) to CPU 1, as in
``python -m bench``. Each round measures both, one after the other, in alternating order, so
that other load on a shared machine lands on both alike; each process serves the same calls
and nothing else. Printed per concurrency: each round's CPU milliseconds per call (``/proc``)
of both, the medians, and the median of the rounds' ratios (uvloop / asyncio).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.load import Row, mcp_session, measure, pin, tool_call  # noqa: E402
from bench.rig import (  # noqa: E402
    PIPELINE_ARGS,
    SERVER_CPU,
    load_average,
    rig,
)
from tests.e2e.harness import GatewayProcess  # noqa: E402
from tests.standin import dataset as ds  # noqa: E402

LOOPS = ("uvloop", "asyncio")


async def run(args: argparse.Namespace, workdir: Path) -> None:
    async with rig(workdir) as running:
        calls = {}
        for loop in LOOPS:
            gateway = GatewayProcess(
                env={
                    "GITLAB_URL": running.stub_url,
                    "GITLAB_TOKEN": ds.ALICE_TOKEN,
                    "GATEWAY_SERVER__EVENT_LOOP": loop,
                },
                state_dir=workdir / f"state-{loop}",
            )
            gateway.start()
            assert gateway.proc is not None
            assert f"event_loop={loop}" in gateway.log()
            running.procs.append(gateway.proc)
            pin(gateway.proc.pid, SERVER_CPU)
            session = await mcp_session(running.clients.sessions[0], gateway.mcp_url)
            call = tool_call(gateway.mcp_url, session, "get_pipeline", PIPELINE_ARGS)
            calls[loop] = (gateway.proc.pid, call)
            await call(running.clients.sessions[0])
        print(f"load average before: {load_average()}", flush=True)
        for concurrency in args.concurrency:
            cpu: dict[str, list[float]] = {loop: [] for loop in LOOPS}
            for turn in range(args.rounds):
                for loop in LOOPS if turn % 2 == 0 else LOOPS[::-1]:
                    pid, call = calls[loop]
                    row = await measure(
                        running.clients,
                        call,
                        calls=args.calls,
                        concurrency=concurrency,
                        pid=pid,
                        upstream_count=running.upstream_count,
                        row=Row(loop, "get_pipeline", concurrency),
                    )
                    if row.errors:
                        raise RuntimeError(f"{row.errors} calls failed on {loop}")
                    cpu[loop].append(row.cpu_ms_per_call)
            ratios = [u / a for u, a in zip(cpu["uvloop"], cpu["asyncio"], strict=True)]
            print(f"c={concurrency}, get_pipeline + 20 jobs, CPU ms per call, {args.rounds} rounds:")
            for loop in LOOPS:
                rounds = " ".join(f"{x:.2f}" for x in cpu[loop])
                print(f"  {loop:8} median {statistics.median(cpu[loop]):.2f}  (rounds: {rounds})")
            ratio = statistics.median(ratios)
            print(
                f"  uvloop / asyncio: median of the rounds' ratios {ratio:.3f} "
                f"({1 - ratio:+.1%} CPU per call saved by uvloop; "
                f"rounds: {min(ratios):.2f}..{max(ratios):.2f})",
                flush=True,
            )
        print(f"load average after: {load_average()}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=1000, help="measured calls per round and loop")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[32])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-loop-") as tmp:
        asyncio.run(run(args, Path(tmp)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
