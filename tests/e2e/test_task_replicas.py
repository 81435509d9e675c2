"""A task outlives its replica: two gateway processes on one PostgreSQL broker database, against
the GitLab stand-in. A ``get_pipeline`` wait started as a task (MCP tasks extension, 2026-07-28)
through one replica, that replica killed (SIGKILL) mid-wait, the pipeline finished: ``tasks/get``
through the other replica takes the task over and answers the finished pipeline."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.e2e.harness import GatewayProcess
from tests.standin import dataset as ds
from tests.standin.fixtures import Standin

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

VERSION = "2026-07-28"
EXTENSION = "io.modelcontextprotocol/tasks"
#: A replica that stops renewing is taken for gone after this long (``broker.lease_seconds``).
LEASE_SECONDS = "1"


def request(http: httpx.Client, g: GatewayProcess, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One 2026-07-28 request of a client that declares the tasks extension; its result."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "agent", "version": "1"},
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": method,
        "Mcp-Name": str(params.get("name") or params.get("taskId")),
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}
    answer = http.post(g.mcp_url, content=json.dumps(body), headers=headers)
    assert answer.status_code == 200, answer.text
    message = answer.json()
    assert "result" in message, message
    return dict(message["result"])


def test_a_wait_started_on_a_killed_replica_is_answered_by_another(
    tmp_path: Any, postgres_url_at_head: str, fresh_standin: Standin
) -> None:
    env = fresh_standin.env(
        GATEWAY_BROKER__DATABASE_URL=postgres_url_at_head, GATEWAY_BROKER__LEASE_SECONDS=LEASE_SECONDS
    )
    a = GatewayProcess(env=env, state_dir=tmp_path / "a")
    b = GatewayProcess(env=env, state_dir=tmp_path / "b")
    try:
        with ThreadPoolExecutor(2) as pool:  # together: the test's time is mostly their start
            list(pool.map(lambda g: g.start(60.0), (a, b)))
        with httpx.Client(timeout=30, trust_env=False) as http:
            arguments = {"id": ds.PROJECT_PATH, "pipeline_id": ds.RUNNING_PIPELINE_ID, "wait_seconds": 300}
            created = request(http, a, "tools/call", {"name": "get_pipeline", "arguments": arguments})
            assert created["resultType"] == "task" and created["status"] == "working"
            task_id = created["taskId"]
            # Committed before the answer: the other replica finds it at once.
            assert request(http, b, "tasks/get", {"taskId": task_id})["status"] == "working"
            a.kill()
            fresh_standin.control.update_pipeline(
                ds.RUNNING_PIPELINE_ID, status="failed", jobs={5202: "failed"}
            )
            killed = time.monotonic()
            deadline = killed + 30
            task = created
            while task["status"] == "working" and time.monotonic() < deadline:
                time.sleep(created["pollIntervalMs"] / 1000 / 5)
                task = request(http, b, "tasks/get", {"taskId": task_id})
            assert task["status"] == "completed", task
            # Taken over once the lease lapsed (1 s), then answered by the poller's first read.
            assert time.monotonic() - killed < 15
            out = task["result"]["structuredContent"]
            assert out["id"] == ds.RUNNING_PIPELINE_ID and out["status"] == "failed"
            assert out["wait"]["timed_out"] is False
            assert "task of get_pipeline resumed" in b.log()
    finally:
        a.stop()
        b.stop()
