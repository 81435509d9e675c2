"""``get_job`` and ``get_artifact_file`` end to end: the gateway as a process, the official MCP SDK
client (both eras), and the GitLab stand-in's job logs and artifacts (``tests/standin/job_logs.py``).

What a user relies on: one call shows why a job failed (the last lines, cleaned); windows of a log
join into exactly the cleaned log; a log the token may not read says so; a running job's log is read
as it grows; a 200 MB log's tail costs the gateway a bounded amount of memory; an artifact file is
read as text, and a binary one refused with a link.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from gateway.gitlab.job_log import clean_log
from tests.e2e.harness import GatewayProcess, mcp_client, text_of
from tests.standin import dataset as ds
from tests.standin import job_logs
from tests.standin.fixtures import Standin, fresh_standin, standin  # noqa: F401  (fixtures)

pytestmark = pytest.mark.e2e

P = ds.PROJECT_PATH


@pytest.fixture
def gateway(fresh_standin: Standin, start_gateway: Callable[..., GatewayProcess]) -> GatewayProcess:  # noqa: F811
    return start_gateway(env=fresh_standin.env())


async def call(client: Client, tool: str, **arguments: Any) -> tuple[bool, dict[str, Any]]:
    """``(is_error, structuredContent)``; the JSON text block must say the same."""
    result = await client.call_tool(tool, arguments)
    structured = result.structured_content or {}
    assert json.loads(text_of(result.content[-1])) == structured
    return bool(result.is_error), structured


@pytest.mark.slow  # one gateway for every check below (a start costs more than the checks); 200 MB streamed
async def test_job_logs_and_artifact_files(gateway: GatewayProcess, fresh_standin: Standin) -> None:  # noqa: F811
    for mode in ("auto", "legacy"):  # both MCP eras
        async with mcp_client(gateway.mcp_url, mode=mode) as client:
            await one_call_shows_why_a_job_failed(client, fresh_standin.url)
    async with mcp_client(gateway.mcp_url) as client:
        await windows_join_into_the_cleaned_log_and_a_running_log_grows(client)
        await artifact_files_text_and_binary(client, fresh_standin)
    await the_tail_of_a_200_mb_log_costs_a_bounded_amount_of_memory(gateway)


async def one_call_shows_why_a_job_failed(client: Client, gitlab_url: str) -> None:
    is_error, out = await call(
        client,
        "get_job",
        url=f"{gitlab_url}/{P}/-/jobs/{job_logs.FAILED_LOG_JOB_ID}",
        include=["log"],
        tail_lines=20,
    )
    assert not is_error, out
    assert out["status"] == "failed" and out["failure_reason"] == "script_failure"
    content = out["log"]["content"]
    assert 'expected: "Zoë 🙂"' in content and "ERROR: Job failed: exit code 1" in content
    assert "\x1b" not in content and "section_" not in content
    names = [s["name"] for s in out["log"]["sections"]]
    assert names == [
        "prepare_executor",
        "get_sources",
        "step_script",
        "rspec",
        "upload_artifacts_on_failure",
        "cleanup_file_variables",
    ]


async def windows_join_into_the_cleaned_log_and_a_running_log_grows(client: Client) -> None:
    pieces, offset = [], 0
    while True:
        args = {"id": P, "job_id": job_logs.FAILED_LOG_JOB_ID, "include": ["log"], "byte_limit": 300}
        is_error, out = await call(client, "get_job", **args, byte_offset=offset)
        assert not is_error, out
        pieces.append(out["log"]["content"])
        if "next" not in out["log"]:
            break
        offset = out["log"]["next"]["byte_offset"]
    assert len(pieces) > 5
    assert "".join(pieces) == clean_log(job_logs.FAILED_LOG).text

    running = {"id": P, "job_id": job_logs.RUNNING_LOG_JOB_ID, "include": ["log"]}
    _, first = await call(client, "get_job", **running)
    assert first["status"] == "running"
    assert first["log"]["content"].endswith("spec 000 passed ✓\n")  # the unfinished line waits
    _, second = await call(client, "get_job", **running, byte_offset=first["log"]["next"]["byte_offset"])
    assert second["log"]["content"] == "spec 001 passed ✓\n"


async def test_a_log_the_token_may_not_read_is_told_apart(
    fresh_standin: Standin,  # noqa: F811
    start_gateway: Callable[..., GatewayProcess],
) -> None:
    gateway = start_gateway(env=fresh_standin.env(token=ds.CAROL_TOKEN))
    async with mcp_client(gateway.mcp_url) as client:
        job = {"id": P, "job_id": job_logs.RESTRICTED_LOG_JOB_ID}
        is_error, out = await call(client, "get_job", **job)
        assert not is_error and out["name"] == "rspec 22/30"
        is_error, out = await call(client, "get_job", **job, include=["log"])
        assert is_error and out["error"]["kind"] == "log_forbidden"
        is_error, out = await call(client, "get_job", id=P, job_id=987654321, include=["log"])
        assert is_error and out["error"]["reason"] == "not_found"


async def artifact_files_text_and_binary(client: Client, fresh_standin: Standin) -> None:  # noqa: F811
    job = {"project_id": P, "job_id": job_logs.ARTIFACTS_JOB_ID}
    is_error, out = await call(client, "get_artifact_file", **job, artifact_path="log/test.log")
    assert not is_error, out
    assert (
        out["content"].encode()
        == job_logs.ARTIFACT_FILES["log/test.log"][: out["metadata"]["returned"]["end"]]
    )
    is_error, out = await call(client, "get_artifact_file", **job, artifact_path="screenshots/failure.png")
    assert is_error and "binary (image/png)" in out["error"]["message"]
    fresh_standin.control.clear_requests()
    is_error, out = await call(client, "get_artifact_file", **job, artifact_path="../../etc/passwd")
    assert is_error and out["error"]["kind"] == "path_traversal"
    assert fresh_standin.control.request_count() == 0


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


async def the_tail_of_a_200_mb_log_costs_a_bounded_amount_of_memory(gateway: GatewayProcess) -> None:
    assert gateway.proc is not None
    async with mcp_client(gateway.mcp_url, read_timeout=300) as client:
        await call(client, "get_job", id=P, job_id=job_logs.FAILED_LOG_JOB_ID, include=["log"], tail_lines=5)
        before = _peak_rss_kib(gateway.proc.pid)
        is_error, out = await call(
            client, "get_job", id=P, job_id=job_logs.HUGE_LOG_JOB_ID, include=["log"], tail_lines=50
        )
        after = _peak_rss_kib(gateway.proc.pid)
    assert not is_error, out
    meta = out["log"]["metadata"]
    assert meta["total_bytes"] == job_logs.lazy_log_size(job_logs.HUGE_LOG_BYTES)
    assert meta["returned"]["end"] == meta["total_bytes"]
    last = job_logs.lazy_log_last_block(job_logs.HUGE_LOG_BYTES)
    assert out["log"]["content"].endswith("Job succeeded\n")
    assert out["log"]["content"].count("\n") == 50
    assert meta["total_lines"] == (last + 1) * 1000 + 3  # the blocks, the first and last lines, the header
    assert meta["bytes_read"] == meta["total_bytes"]
    assert (after - before) / 1024 <= 64, f"peak RSS rose by {(after - before) / 1024:.1f} MiB"
