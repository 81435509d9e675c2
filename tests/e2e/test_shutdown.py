"""SIGTERM while calls are open: the gateway stops accepting, answers what is in flight, wakes
broker waiters with a clear result, closes its database and exits 0.

The in-flight call is ``get_pipeline`` held by the GitLab stand-in for a few seconds (a
``delay`` fault, well inside ``server.shutdown_timeout_seconds``); the open call is a
``wait_for_message`` that would otherwise wait a minute.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.e2e.harness import GatewayProcess, mcp_client, text_of
from tests.standin import dataset as ds
from tests.standin.fixtures import Standin

pytestmark = pytest.mark.e2e

GITLAB_DELAY_SECONDS = 2.0


async def _until(check: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await asyncio.to_thread(check)
        if value:
            return value
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _waits_open(gateway: GatewayProcess) -> bool:
    text = httpx.get(f"{gateway.url}/metrics", timeout=2).text
    return "gateway_broker_waits_open 1.0" in text


async def test_sigterm_answers_open_calls_and_exits_zero(
    fresh_standin: Standin, start_gateway: Callable[..., GatewayProcess]
) -> None:
    gateway = start_gateway(env=fresh_standin.env(GATEWAY_SERVER__SHUTDOWN_TIMEOUT_SECONDS="10"))
    # The tool's own request (the gateway's first call also reads GitLab's version; that is not held).
    fresh_standin.control.delay(
        GITLAB_DELAY_SECONDS, match={"path": "/api/graphql", "operation": "getPipeline"}
    )

    async with (
        mcp_client(gateway.mcp_url, headers={"X-Agent-Id": "dev"}) as waiter,
        mcp_client(gateway.mcp_url, headers={"X-Agent-Id": "pm"}) as reader,
    ):
        # The SDK checks results against the tools' output schemas, fetching tools/list on first
        # use: fetch it now, while the gateway still accepts connections.
        for client in (waiter, reader):
            await client.list_tools()
        wait = asyncio.create_task(waiter.call_tool("wait_for_message", {"timeout_sec": 60}))
        pipeline = asyncio.create_task(
            reader.call_tool("get_pipeline", {"id": ds.PROJECT_PATH, "pipeline_id": ds.PIPELINE_ID})
        )
        # Both are open: the wait is registered with the broker, the GitLab request is held.
        await _until(lambda: _waits_open(gateway), "the wait to open")
        await _until(lambda: fresh_standin.control.faults()[0]["hits"] == 1, "the GitLab request to arrive")
        assert not wait.done() and not pipeline.done()

        signalled = time.monotonic()
        assert gateway.proc is not None
        gateway.proc.send_signal(signal.SIGTERM)

        waited = await asyncio.wait_for(wait, 5)
        assert time.monotonic() - signalled < GITLAB_DELAY_SECONDS  # woken at once, not at the deadline
        assert not waited.is_error, waited.content
        assert waited.structured_content == {
            **waited.structured_content,
            "message": None,
            "timedOut": False,
            "shutdown": True,
        }
        assert "shutting down" in text_of(waited.content[0])
        assert "No message was taken from your queue" in text_of(waited.content[0])

        # No new connections while the in-flight call finishes.
        with pytest.raises(httpx.ConnectError):
            await asyncio.to_thread(httpx.get, f"{gateway.url}/healthz", timeout=1)
        assert not pipeline.done()

        answered = await asyncio.wait_for(pipeline, 15)
        assert not answered.is_error, answered.content
        out = answered.structured_content
        status = json.loads(text_of(answered.content[-1]))["status"]
        assert (out["id"], out["status"]) == (ds.PIPELINE_ID, status)
        assert time.monotonic() - signalled >= GITLAB_DELAY_SECONDS - 0.5  # it really was in flight

        exit_code = await asyncio.to_thread(gateway.proc.wait, 15)
    assert exit_code == 0, gateway.log()

    log = gateway.log()
    assert "Traceback" not in log
    assert "shutting down" in log and "stopped" in log

    # The broker's database was closed cleanly: intact, and its write-ahead log folded back in.
    database = gateway.state_dir / "broker.db"
    with sqlite3.connect(database) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    wal = database.with_name("broker.db-wal")
    assert not wal.exists() or wal.stat().st_size == 0
