"""Cost of the log lines of one ``tools/call``, with redaction, against stdlib logging without it.

    .venv/bin/python bench/bench_logging.py

Prints microseconds per call for:

- one record through the stdlib formatter, no redaction (the floor);
- ``before``: what a call wrote until the access line carried the GitLab requests, two INFO
  lines (the MCP request line and one ``gitlab request`` line);
- ``after``: one INFO access line with its GitLab fields, and the ``gitlab request`` line at
  DEBUG (filtered out at the default INFO level);

each in the plain and JSON formats, and again with 4096 passthrough tokens registered for
redaction. Compare the ratios within one run; absolute figures depend on the machine.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Callable

from gateway.config import LoggingSettings
from gateway.observability.logging import configure_logging, register_secret, unconfigure_logging

CALLS = 20_000
REQUEST_ID = "fbf54736914e40afa92bc312e2ff828d"
MCP_FIELDS = {
    "method": "tools/call",
    "tool": "get_pipeline",
    "outcome": "ok",
    "duration_ms": 10.9,
    "session": "hPKvv51G",
    "request_id": REQUEST_ID,
    "status": 200,
}
GITLAB_FIELDS = {
    "operation": "get_pipeline",
    "method": "POST",
    "status": 200,
    "error": None,
    "duration_ms": 4.2,
    "request_id": REQUEST_ID,
}
ACCESS_FIELDS = {**MCP_FIELDS, "gitlab_requests": 1, "gitlab": "get_pipeline:200"}

mcp_log = logging.getLogger("gateway.mcp")
gitlab_log = logging.getLogger("gateway.gitlab")


def before() -> None:
    gitlab_log.info("gitlab request", extra=GITLAB_FIELDS)
    mcp_log.info("mcp request", extra=MCP_FIELDS)


def after() -> None:
    gitlab_log.debug("gitlab request", extra=GITLAB_FIELDS)
    mcp_log.info("mcp request", extra=ACCESS_FIELDS)


def per_call(write: Callable[[], None]) -> float:
    started = time.perf_counter()
    for _ in range(CALLS):
        write()
    return (time.perf_counter() - started) / CALLS * 1e6


def main() -> None:
    root = logging.getLogger()
    stdlib = logging.StreamHandler(io.StringIO())
    stdlib.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(stdlib)
    root.setLevel(logging.INFO)
    floor = per_call(lambda: mcp_log.info("mcp request", extra=MCP_FIELDS))
    root.removeHandler(stdlib)
    print(f"{'stdlib formatter, one line, no redaction':<52} {floor:7.1f} us/call  1.00x")
    for runtime in (0, 4096):
        for fmt in ("plain", "json"):
            for label, write in (("before (2 INFO lines)", before), ("after (1 access line)", after)):
                configure_logging(
                    LoggingSettings(format=fmt), secrets=["svc-0f3c9a7d2b1e4c5a"], stream=io.StringIO()
                )
                for i in range(runtime):
                    register_secret(f"passthrough-token-{i:08d}")
                cost = per_call(write)
                name = f"{fmt}, {runtime} runtime secrets, {label}"
                print(f"{name:<52} {cost:7.1f} us/call  {cost / floor:.2f}x")
                unconfigure_logging()


if __name__ == "__main__":
    main()
