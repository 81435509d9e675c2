"""``get_pipeline``'s ``failures`` facet and ``wait_seconds`` end to end: the gateway process against
the GitLab stand-in, through the official ``mcp`` SDK client, in both MCP eras.

The stand-in's pipeline 1001 has 3 failed build jobs (``lint`` allowed to fail); the JUnit reports
of ``rspec 7/30`` and ``rspec 21/30`` hold a failed and an errored test case (suite ``rspec``).
Pipeline 1003 is running; the control API makes it fail while a caller waits on it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.harness import GatewayProcess, mcp_client
from tests.standin import dataset as ds
from tests.standin.fixtures import Standin

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def gateway(standin: Standin, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """One gateway for the module (service mode, alice's token), against the session's stand-in."""
    proc = GatewayProcess(env=standin.env(), state_dir=tmp_path_factory.mktemp("gateway") / "state").start()
    yield proc
    proc.stop()


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert json.loads(result.content[-1].text) == result.structured_content
    return dict(result.structured_content)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_one_call_finds_the_failing_test_and_its_stack_trace(
    gateway: GatewayProcess, fresh_standin: Standin, mode: str
) -> None:
    async with mcp_client(gateway.mcp_url, mode=mode) as client:
        out = structured(
            await client.call_tool(
                "get_pipeline",
                {"id": ds.PROJECT_PATH, "pipeline_id": ds.PIPELINE_ID, "include": ["failures"]},
            )
        )
    assert out["status"] == "failed"
    assert [(f["id"], f["allow_failure"]) for f in out["failures"]] == [
        (ds.FAILED_JOB_IDS[0], False),
        (ds.FAILED_JOB_IDS[1], False),
        (ds.FAILED_JOB_IDS[2], True),
    ]
    assert all(f["failure_message"] for f in out["failures"])
    assert [f["test_suite"] for f in out["failures"]] == ["rspec", "rspec", None]
    failing = next(t for t in out["failed_tests"] if t["status"] == "failed")
    assert failing["name"] == ds.FAILING_TEST["name"]
    assert failing["file"] == ds.FAILING_TEST["file"]
    assert failing["stack_trace"] == ds.FAILING_TEST["stack_trace"]
    assert failing["job_ids"] == ds.FAILED_JOB_IDS[:2]
    assert out["test_summary"]["failed"] == 1 and out["test_summary"]["error"] == 1
    log = out["failures"][0]["log"]
    assert log["section"] == "step_script" and not log["truncated"]
    assert '     Failure/Error: expect(user.display_name).to eq("Zoë 🙂")\n' in log["text"]
    assert "\x1b" not in log["text"] and "section_" not in log["text"]
    assert all(f["log"] is not None and f["log_error"] is None for f in out["failures"])
    # two GraphQL queries (jobs and summary, then test cases) and one log read per failed job; the
    # gateway's first call also reads GitLab's version once (the harness turns the start-up check
    # off), which is not this tool's work
    requests = fresh_standin.control.requests()
    operations = [op["operation_name"] for r in requests for op in r.get("graphql") or []]
    assert [name for name in operations if name != "InstanceMetadata"] == [
        "getPipeline",
        "getPipelineTestCases",
    ]
    assert sorted(r["path"].rsplit("/", 2)[-2] for r in requests if r["path"].endswith("/trace")) == sorted(
        str(j) for j in ds.FAILED_JOB_IDS
    )


async def test_wait_answers_when_the_pipeline_fails(gateway: GatewayProcess, fresh_standin: Standin) -> None:
    fresh_standin.control.update_pipeline(
        ds.RUNNING_PIPELINE_ID, status="failed", jobs={5202: "failed"}, after_seconds=1.0
    )
    updates: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append((progress, total, message))

    started = time.monotonic()
    async with mcp_client(gateway.mcp_url) as client:
        result = await client.call_tool(
            "get_pipeline",
            {"id": ds.PROJECT_PATH, "pipeline_id": ds.RUNNING_PIPELINE_ID, "wait_seconds": 60},
            progress_callback=on_progress,
        )
    elapsed = time.monotonic() - started
    out = structured(result)
    assert out["status"] == "failed"
    assert out["wait"]["timed_out"] is False
    assert elapsed < 15, f"waited {elapsed:.1f}s although the pipeline failed after 1s"
    assert updates and updates[0][1] == 60
    assert updates[0][2] is not None and updates[0][2].startswith(
        f"Pipeline {ds.RUNNING_PIPELINE_ID} is running"
    )


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_cancelling_a_wait_stops_polling(
    gateway: GatewayProcess, fresh_standin: Standin, mode: str
) -> None:
    async with mcp_client(gateway.mcp_url, mode=mode) as client:
        wait = asyncio.create_task(
            client.call_tool(
                "get_pipeline",
                {"id": ds.PROJECT_PATH, "pipeline_id": ds.RUNNING_PIPELINE_ID, "wait_seconds": 120},
            )
        )
        await asyncio.sleep(1.0)
        # Legacy: the SDK sends notifications/cancelled; 2026-07-28: it closes the response stream.
        wait.cancel()
        await asyncio.gather(wait, return_exceptions=True)
        polled = fresh_standin.control.graphql_requests(operation="getPipeline")
        await asyncio.sleep(5.5)  # the next poll was due 5 s after the first
        assert fresh_standin.control.graphql_requests(operation="getPipeline") == polled == 1
    if mode == "legacy":
        assert "notifications/cancelled" in gateway.log()
    else:
        assert "tool=get_pipeline outcome=cancelled era=modern" in gateway.log()
