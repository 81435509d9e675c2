"""Cost of one structured log line with redaction, against stdlib logging without it.

    .venv/bin/python bench/bench_logging.py

Prints microseconds per record for: the stdlib formatter (no redaction, the floor), the
gateway's plain and JSON formatters, and both again with 4096 passthrough tokens registered.
Compare the ratios within one run; absolute figures depend on the machine.
"""

from __future__ import annotations

import io
import logging
import time

from gateway.config import LoggingSettings
from gateway.observability.logging import configure_logging, register_secret, unconfigure_logging

RECORDS = 20_000
FIELDS = {
    "method": "tools/call",
    "tool": "get_pipeline",
    "outcome": "ok",
    "duration_ms": 10.9,
    "session": "hPKvv51G",
    "request_id": "fbf54736914e40afa92bc312e2ff828d",
    "status": 200,
}


def per_record(log: logging.Logger) -> float:
    started = time.perf_counter()
    for _ in range(RECORDS):
        log.info("mcp request", extra=FIELDS)
    return (time.perf_counter() - started) / RECORDS * 1e6


def main() -> None:
    log = logging.getLogger("gateway.mcp")
    root = logging.getLogger()
    stdlib = logging.StreamHandler(io.StringIO())
    stdlib.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(stdlib)
    root.setLevel(logging.INFO)
    floor = per_record(log)
    root.removeHandler(stdlib)
    print(f"stdlib formatter, no redaction     {floor:7.1f} us/record  1.00x")
    for runtime in (0, 4096):
        for fmt in ("plain", "json"):
            configure_logging(
                LoggingSettings(format=fmt), secrets=["svc-0f3c9a7d2b1e4c5a"], stream=io.StringIO()
            )  # type: ignore[arg-type]
            for i in range(runtime):
                register_secret(f"passthrough-token-{i:08d}")
            cost = per_record(log)
            label = f"{fmt}, {runtime} runtime secrets"
            print(f"{label:<34} {cost:7.1f} us/record  {cost / floor:.2f}x")
            unconfigure_logging()


if __name__ == "__main__":
    main()
