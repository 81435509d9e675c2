"""Memory of ``get_message_history`` over big messages: the gateway's peak RSS while serving it.

    .venv/bin/python bench/bench_history_memory.py                 # 100 messages of 1 MB
    .venv/bin/python bench/bench_history_memory.py --messages 25 --size 1000000

A fresh gateway (no GitLab needed) receives ``--messages`` messages of ``--size`` bytes each
(pm → dev), dev receives them all, then pm reads the history: once with the largest ``limit`` the
tool accepts (what an agent asking for "everything" gets) and, when the tool pages, page after
page until the cursor ends. Printed: the answers' sizes, the time they took, and the gateway's RSS
before, its peak (``VmHWM``) and after. The target: peak under 150 MiB.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.soak import Ledger, Session, rss_kib  # noqa: E402
from tests.e2e.harness import GatewayProcess  # noqa: E402


async def history_pages(pm: Session, ledger: Ledger, limit: int) -> tuple[int, int, float]:
    """Read the whole history; ``(pages, bytes received, seconds)``."""
    pages, size, cursor = 0, 0, None
    started = time.perf_counter()
    while True:
        arguments: dict[str, Any] = {"limit": limit}
        if cursor:
            arguments["after"] = cursor
        pm.next_id += 1
        message = {
            "jsonrpc": "2.0",
            "id": pm.next_id,
            "method": "tools/call",
            "params": {"name": "get_message_history", "arguments": arguments},
        }
        answer = await pm.http.post(pm.url, json=message, headers=pm.headers)
        size += len(answer.content)
        pages += 1
        result = answer.json().get("result", {})
        if result.get("isError"):
            raise RuntimeError(str(result)[:300])
        cursor = ((result.get("structuredContent") or {}).get("page_info") or {}).get("end_cursor")
        if not cursor:
            return pages, size, time.perf_counter() - started


async def run(url: str, pid: int, messages: int, size: int, limit: int) -> None:
    ledger = Ledger()
    pm = await Session(url, "pm").open()
    dev = await Session(url, "dev").open()
    pm.http.timeout = dev.http.timeout = httpx.Timeout(300.0)
    payload = "x" * (size - 20)
    idle = rss_kib(pid)
    print(f"idle gateway RSS {idle['VmRSS'] / 1024:.1f} MiB, peak {idle['VmHWM'] / 1024:.1f} MiB")
    for i in range(messages):
        out = await pm.call(
            "send_message", {"to": "dev", "subject": "big", "body": {"i": i, "blob": payload}}, ledger
        )
        if out is None:
            raise RuntimeError(f"send {i} failed: {dict(ledger.errors)}")
    sent = rss_kib(pid)
    print(f"after the sends: RSS {sent['VmRSS'] / 1024:.1f} MiB, peak {sent['VmHWM'] / 1024:.1f} MiB")
    for _ in range(messages):
        await dev.call("wait_for_message", {"timeout_sec": 5}, ledger)
    before = rss_kib(pid)
    print(
        f"{messages} messages of {size} bytes sent and delivered; "
        f"gateway RSS {before['VmRSS'] / 1024:.1f} MiB, "
        f"peak so far {before['VmHWM'] / 1024:.1f} MiB"
    )
    # Reset VmHWM (proc(5), clear_refs "5") so the history's own peak shows apart from the run's.
    run_peak = before["VmHWM"]
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    pages, received, seconds = await history_pages(pm, ledger, limit)
    after = rss_kib(pid)
    print(
        f"get_message_history limit={limit}: {pages} page(s), "
        f"{received / 2**20:.1f} MiB received in {seconds:.2f} s"
    )
    print(
        f"gateway RSS after {after['VmRSS'] / 1024:.1f} MiB; peak while serving the history "
        f"{after['VmHWM'] / 1024:.1f} MiB, over the whole run {max(run_peak, after['VmHWM']) / 1024:.1f} MiB "
        "(target < 150 MiB)"
    )
    await pm.close()
    await dev.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--limit", type=int, default=1000, help="limit per history call (the tool caps it)")
    parser.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="extra environment of the gateway"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="history-"))
    gateway = GatewayProcess(
        env={
            "GITLAB_URL": "http://127.0.0.1:9",
            "GATEWAY_LOGGING__LEVEL": "WARNING",
            # The default body cap is far below the sizes measured here.
            "GATEWAY_BROKER__MAX_MESSAGE_BYTES": str(2 * args.size),
            **dict(kv.split("=", 1) for kv in args.env),
        },
        state_dir=work / "state",
    )
    try:
        gateway.start()
        assert gateway.proc is not None
        asyncio.run(run(gateway.mcp_url, gateway.proc.pid, args.messages, args.size, args.limit))
    finally:
        gateway.stop()


if __name__ == "__main__":
    main()
