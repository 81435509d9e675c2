"""What OpenTelemetry's SDK costs per traced ``tools/call``, apart from everything else the gateway does.

    .venv/bin/python -m bench tracing-sdk                    # 20,000 calls per sampler
    .venv/bin/python -m bench tracing-sdk --gateway-ms 1.85  # and the share of a call of 1.85 ms

A traced call makes the spans the gateway makes for one ``get_pipeline``: the server span of the
MCP request and the client span of its GitLab request (``traceparent`` put into the request's
headers), with their attributes, through the gateway's own ``gateway.observability.tracing`` and
the exporter it configures (OTLP/HTTP with protobuf, the SDK's batch span processor). Nothing else
runs: no HTTP server, no GitLab, no tool. Each sampler is measured in a process of its own, pinned
to CPU 0, exporting to an OTLP sink (``bench/otlp_sink.py``) pinned to CPU 1; the figure is that
process's CPU (all threads: the batch processor encodes and sends on its own thread) over the
calls and the final flush, divided by the calls.

Columns: ``caller thread``: what the request's own thread spends making and ending the spans;
``all threads``: that plus encoding and exporting them. With ``--gateway-ms`` (the gateway's CPU
per call with tracing off: the ``server CPU ms/call`` of ``python -m bench``'s ``gateway``,
``get_pipeline + 20 jobs``, c=32 row), the share of that call that is the SDK's alone, all
threads. The 1.10x target of tracing on against off at c=32 needs that share at 10% or
less.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.rig import load_average  # noqa: E402
from tests.e2e.harness import free_port  # noqa: E402

#: The samplers measured: OpenTelemetry's default (every call without a caller's context) and the
#: ratio docs/operations.md recommends.
SAMPLERS = {"parentbased_always_on": "", "traceidratio": "0.1"}


def child(calls: int) -> dict[str, float]:
    """Make ``calls`` traced calls in this process; CPU seconds of this thread and of all."""
    from gateway.observability import tracing

    assert tracing.configure(), "OTEL_EXPORTER_OTLP_ENDPOINT is not set"
    session = "0" * 32

    def one(i: int) -> None:
        span = tracing.mcp_span("tools/call", i, {}, {})
        headers: dict[str, str] = {}
        client = tracing.gitlab_span("POST", "getPipeline", 0, headers)
        tracing.end_gitlab_span(client, 200, None)
        span.finish(
            tool="get_pipeline", outcome="ok", tool_error=False, session=session, version="2025-11-25"
        )

    for i in range(min(calls, 1000)):  # warm-up: imports, first exports
        one(i)
    assert tracing.force_flush()
    thread0, all0 = time.thread_time(), time.process_time()
    for i in range(calls):
        one(i)
    thread1 = time.thread_time()
    assert tracing.force_flush()
    all1 = time.process_time()
    tracing.shutdown()
    return {"thread": thread1 - thread0, "all": all1 - all0}


def measure(sampler: str, ratio: str, calls: int, sink: str) -> dict[str, float]:
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": sink,
        "OTEL_TRACES_SAMPLER": sampler,
        "OTEL_TRACES_SAMPLER_ARG": ratio,
    }
    done = subprocess.run(
        ["taskset", "-c", "0", sys.executable, "-m", "bench.bench_tracing_sdk", "--child", str(calls)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the {sampler} run failed:\n{done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _wait_listening(port: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"the OTLP sink (bench/otlp_sink.py) did not listen on port {port}")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench tracing-sdk",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,  # the docstring as written
    )
    ap.add_argument(
        "--calls", type=int, default=20_000, help="traced calls per sampler (default: %(default)s)"
    )
    ap.add_argument(
        "--gateway-ms",
        type=float,
        help="the gateway's CPU ms per call with tracing off, to print the SDK's share of it: the "
        "'server CPU ms/call' of python -m bench's 'gateway, get_pipeline + 20 jobs, c=32' row",
    )
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.calls < 1 or (args.gateway_ms is not None and args.gateway_ms <= 0):
        ap.error("--calls and --gateway-ms must be positive")
    if args.child is not None:
        print(json.dumps(child(args.child)))
        return 0
    port = free_port()
    sink = subprocess.Popen(
        ["taskset", "-c", "1", sys.executable, "-m", "bench.otlp_sink", "--port", str(port)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_listening(port, sink)
        print(f"python: {sys.executable} ({sys.version.split()[0]})")
        print(f"load average before: {load_average()}")
        share = "  share of --gateway-ms (all threads)" if args.gateway_ms else ""
        print(f"{'sampler':32} {'caller thread':>16} {'all threads':>16}{share}")
        for sampler, ratio in SAMPLERS.items():
            got = measure(sampler, ratio, args.calls, f"http://127.0.0.1:{port}")
            per_call = {k: v / args.calls * 1e6 for k, v in got.items()}
            name = f"{sampler} {ratio}".strip()
            line = f"{name:32} {per_call['thread']:>8.1f} us/call {per_call['all']:>8.1f} us/call"
            if args.gateway_ms:
                line += f"  {per_call['all'] / (args.gateway_ms * 1000):.1%}"
            print(line, flush=True)
        print(f"load average after: {load_average()}")
    finally:
        sink.terminate()
        sink.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
