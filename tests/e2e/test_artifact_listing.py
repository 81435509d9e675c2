"""Finding a file in a job's artifacts archive, end to end: the gateway as a process, the official
MCP SDK client (both eras), the GitLab stand-in serving a real zip (``tests/standin/job_artifacts.py``).

What a user relies on: an agent that knows only a job id finds ``logs/integration.log`` with
``get_job`` (``include: ["artifacts"]``) and reads it with ``get_artifact_file``: two calls, on a
GitLab with the artifacts tree API (18.8+) and on one without it, where the archive's zip directory
is read with HTTP Range and never the archive (the bytes GitLab sent are counted); a GitLab that
ignores Range or redirects to object storage is said so; a wrong guess names the right path.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from mcp import Client

from gateway.gitlab.zip_directory import TAIL_BYTES
from tests.e2e.harness import GatewayProcess, mcp_client, text_of
from tests.standin import dataset as ds
from tests.standin import job_artifacts, job_logs
from tests.standin.fixtures import Standin, fresh_standin, standin  # noqa: F401  (fixtures)

pytestmark = pytest.mark.e2e

P = ds.PROJECT_PATH
JOB = job_logs.ARTIFACTS_JOB_ID
DOWNLOAD = "GET /projects/:id/jobs/:job_id/artifacts"
TREE = "GET /projects/:id/jobs/:job_id/artifacts/tree"


async def call(client: Client, tool: str, **arguments: Any) -> tuple[bool, dict[str, Any]]:
    """``(is_error, structuredContent)``; the JSON text block must say the same."""
    result = await client.call_tool(tool, arguments)
    structured = result.structured_content or {}
    assert json.loads(text_of(result.content[-1])) == structured
    return bool(result.is_error), structured


async def find_and_read_in_two_calls(client: Client) -> dict[str, Any]:
    """The agent's two calls; returns the listing."""
    is_error, job = await call(
        client, "get_job", id=P, job_id=JOB, include=["artifacts"], artifact_filter="*.log"
    )
    assert not is_error, job
    files: dict[str, Any] = job["artifact_files"]
    paths = [e["path"] for e in files["entries"]]
    assert paths == ["log/test.log", "logs/integration.log"], files
    assert files["entries"][1] == {
        "path": "logs/integration.log",
        "type": "file",
        "size": len(job_logs.ARTIFACT_FILES["logs/integration.log"]),
    }
    is_error, out = await call(client, "get_artifact_file", project_id=P, job_id=JOB, artifact_path=paths[1])
    assert not is_error, out
    assert out["content"].encode() == job_logs.ARTIFACT_FILES["logs/integration.log"]
    return files


def archive_reads(standin: Standin) -> list[dict[str, Any]]:  # noqa: F811
    return [r for r in standin.control.requests() if r["route"] == DOWNLOAD]


@pytest.mark.slow  # one gateway for every GitLab below (a start costs more than the checks)
async def test_a_job_id_is_enough_to_find_and_read_a_file(
    fresh_standin: Standin,  # noqa: F811
    start_gateway: Callable[..., GatewayProcess],
) -> None:
    gateway = start_gateway(env=fresh_standin.env())
    control = fresh_standin.control
    archive = job_artifacts.archive()

    # GitLab 18.8+: the tree API, and the archive is never touched; whether its recursive=true
    # lists every entry (as documented) or one level (as GitLab's code does), the listing is whole.
    for mode, recursive in (("auto", "all"), ("legacy", "children")):  # both MCP eras
        control.settings(artifacts_tree_recursive=recursive)
        control.clear_requests()
        async with mcp_client(gateway.mcp_url, mode=mode) as client:
            files = await find_and_read_in_two_calls(client)
            is_error, job = await call(client, "get_job", id=P, job_id=JOB, include=["artifacts"], first=100)
        assert files["source"] == "tree"
        assert not is_error and [e["path"] for e in job["artifact_files"]["entries"]] == list(
            job_artifacts.entries()
        )
        assert archive_reads(fresh_standin) == [] and control.rest_requests(TREE)

    # An older GitLab: the tree path is the single-file route's 404; the zip directory is read
    # with Range: the archive's end, once (its directory is in it), never the archive.
    control.settings(artifacts_tree=False)
    control.clear_requests()
    async with mcp_client(gateway.mcp_url) as client:
        files = await find_and_read_in_two_calls(client)
        assert files["source"] == "archive_directory" and files["total"] == 2
        reads = archive_reads(fresh_standin)
        assert [r["range"] for r in reads] == [f"bytes=-{TAIL_BYTES}"]
        assert [r["status"] for r in reads] == [206]
        assert sum(r["body_bytes"] for r in reads) == TAIL_BYTES < len(archive) // 30
        # Learnt once: the next listing does not ask for the tree again.
        control.clear_requests()
        is_error, job = await call(client, "get_job", id=P, job_id=JOB, include=["artifacts"], first=100)
        assert not is_error and len(job["artifact_files"]["entries"]) == len(job_artifacts.entries())
        assert control.rest_requests(TREE) == [] and len(archive_reads(fresh_standin)) == 1

        # A proxy that drops Range: an archive this small (2 MiB, under the 20 MiB bound) is read whole.
        control.settings(artifacts_download="whole")
        control.clear_requests()
        is_error, job = await call(
            client, "get_job", id=P, job_id=JOB, include=["artifacts"], artifact_filter="logs/"
        )
        # As the tree answers it: what is under the folder, not the folder itself.
        assert [e["path"] for e in job["artifact_files"]["entries"]] == ["logs/integration.log"]
        assert [(r["status"], r["body_bytes"]) for r in archive_reads(fresh_standin)] == [(200, len(archive))]

        # Object storage's direct download: a redirect the gateway does not follow, and says so.
        control.settings(artifacts_download="redirect")
        is_error, job = await call(client, "get_job", id=P, job_id=JOB, include=["artifacts"])
        assert not is_error and job["artifact_files"]["entries"] == []
        assert "redirect (302) to its object storage" in job["artifact_files"]["unavailable"]
        assert "X-Amz-Signature" not in json.dumps(job)

    # A wrong guess names the nearest paths (from the zip directory: the gateway remembers that
    # this GitLab had no tree until it restarts).
    control.settings(artifacts_tree=True, artifacts_download="range")
    async with mcp_client(gateway.mcp_url) as client:
        is_error, out = await call(
            client, "get_artifact_file", project_id=P, job_id=JOB, artifact_path="integration.log"
        )
    assert is_error and out["error"]["kind"] == "file_not_found"
    assert out["error"]["nearest_paths"][0] == "logs/integration.log"
