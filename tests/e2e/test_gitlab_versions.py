"""Every GitLab tool against every GitLab band: 16.11 to the newest, EE and CE.

One stand-in and one gateway per band (``gitlab_band``, :mod:`tests.e2e.gitlab_bands`), shared by
the module's tests. What a user of each band should get: the same data as on the newest GitLab
wherever that version has it (null where it lacks a value, such as a job's exit code before 17.9);
``save_pipeline`` creating, retrying and cancelling with each request sent once; ``get_duo_session``
either working or answering plainly which GitLab version or edition it needs; and no GitLab
validation message ("doesn't exist on type") in anything an agent reads.

A test runs on the bands that can tell apart the schema coordinates and REST routes its tool
reads (``on_telling_bands``, from :data:`tests.gitlab.versions.ARRIVALS`): of bands that have the
same of them, the oldest and the newest; a tool that reads none of them, on the oldest and the
newest band. The start-up line runs on every band.

Where today's gateway falls short on a band, the test is marked ``xfail(strict=False)`` with the
reason, decided from the band's declared schema (:data:`tests.gitlab.versions.ARRIVALS`): once the
gateway serves that band the test passes (XPASS) and the mark can go.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import pytest
from mcp.types import CallToolResult

from tests.e2e.gitlab_bands import RAW_VALIDATION, Band, agent_text, on_telling_bands
from tests.gitlab import versions
from tests.standin import dataset as ds
from tests.standin import job_logs

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

P = ds.PROJECT_PATH


def gap(request: pytest.FixtureRequest, missing: bool, reason: str) -> None:
    """Mark the running test an expected failure on this band when today's gateway cannot serve it."""
    if missing:
        request.applymarker(pytest.mark.xfail(strict=False, reason=reason))


ARTIFACTS_TREE = "GET /projects/:id/jobs/:job_id/artifacts/tree"
#: What save_pipeline reads that some band lacks: a pipeline by ID (retry, cancel), pipelineCreate and
#: its input's fields, the cancel's answer.
SAVE_PIPELINE_READS = (
    "Project.pipeline(id:)",
    "Mutation.pipelineCreate",
    "PipelineCreateInput.async",
    "PipelineCreateInput.inputs",
    "PipelineCancelPayload.pipeline",
)
#: What get_duo_session reads that some band lacks (its listing depends on all of them).
DUO_SESSION_READS = (
    "Query.duoWorkflowWorkflows",
    "Query.duoWorkflowWorkflows(workflowId:)",
    "DuoWorkflow.statusGroup",
    "DuoWorkflow.latestCheckpoint",
    "DuoWorkflow.webUrl",
    "DuoWorkflowEvent.lastDuoMessage",
)


def no_raw_validation(result: CallToolResult) -> None:
    text = agent_text(result)
    assert not RAW_VALIDATION.search(text), f"GitLab's validation wording reached the agent: {text}"


def ok(result: CallToolResult) -> dict[str, Any]:
    no_raw_validation(result)
    assert not result.is_error, agent_text(result)
    return dict(result.structured_content or {})


def sent(band: Band, field: str, rest_route: str | None = None) -> int:
    """Requests that could have run ``field`` (GraphQL documents GitLab accepted, plus ``rest_route``)."""
    log = band.standin.control.requests()
    graphql = sum(
        1 for r in log for op in r.get("graphql") or [] if field in op.get("fields", []) and op.get("valid")
    )
    rest = sum(1 for r in log if rest_route is not None and r.get("route") == rest_route)
    return graphql + rest


# -- the gateway knows the instance -----------------------------------------------------------------


async def test_start_up_line_names_gitlabs_version(band: Band) -> None:
    shown = versions.version_string(band.version, band.edition).removesuffix("-ee")
    named = f"GitLab {shown} ({band.edition.upper()}) at "
    deadline = time.monotonic() + 10  # the check runs in the background once the gateway serves
    while named not in band.gateway.log() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert named in band.gateway.log()


# -- CI ---------------------------------------------------------------------------------------------


@on_telling_bands()
async def test_list_pipelines(band: Band) -> None:
    out = ok(await band.call("list_pipelines", {"project_id": P}))
    assert [p["id"] for p in out["pipelines"]] == [1004, 1003, 1002, 1001]
    assert out["pipelines"][-1]["sha"] == ds.REF_SHAS["main"]


@on_telling_bands("Project.pipeline(id:)", "CiJob.exitCode")
async def test_get_pipeline_jobs(band: Band) -> None:
    args = {"project_id": P, "pipeline_id": ds.PIPELINE_ID, "include": ["jobs"]}
    out = ok(await band.call("get_pipeline", args))
    assert (out["id"], out["status"], out["sha"]) == (ds.PIPELINE_ID, "failed", ds.REF_SHAS["main"])
    ids = [j["id"] for j in out["jobs"]]
    assert len(ids) >= 20 and ids == ds.BUILD_JOB_IDS[: len(ids)]


@on_telling_bands("Project.pipeline(id:)", "CiJob.exitCode")
async def test_get_pipeline_failures(band: Band) -> None:
    args = {"project_id": P, "pipeline_id": ds.PIPELINE_ID, "include": ["failures"]}
    out = ok(await band.call("get_pipeline", args))
    exit_code = 1 if band.has("CiJob.exitCode") else None  # GitLab has no exit code before 17.9
    assert [(f["id"], f["exit_code"]) for f in out["failures"]] == [
        (5010, exit_code),
        (5024, exit_code),
        (5040, exit_code),
    ]


@on_telling_bands(*SAVE_PIPELINE_READS)
async def test_save_pipeline_creates_once(band: Band) -> None:
    out = ok(await band.call("save_pipeline", {"project_id": P, "ref": "main"}))
    assert (out["action"], out["id"], out["status"], out["ref"]) == (
        "create",
        ds.FIRST_CREATED_PIPELINE_ID,
        "created",
        "main",
    )
    assert [p["id"] for p in band.standin.control.pipelines(created=True)] == [ds.FIRST_CREATED_PIPELINE_ID]
    assert sent(band, "pipelineCreate", "POST /projects/:id/pipeline") == 1


@on_telling_bands(*SAVE_PIPELINE_READS)
async def test_save_pipeline_retries_once(band: Band) -> None:
    out = ok(await band.call("save_pipeline", {"pipeline_id": ds.PIPELINE_ID, "action": "retry"}))
    assert (out["action"], out["id"], out["status"]) == ("retry", ds.PIPELINE_ID, "running")
    assert sent(band, "pipelineRetry", "POST /projects/:id/pipelines/:pipeline_id/retry") == 1


@on_telling_bands(*SAVE_PIPELINE_READS)
async def test_save_pipeline_cancels_once(band: Band) -> None:
    out = ok(await band.call("save_pipeline", {"pipeline_id": ds.RUNNING_PIPELINE_ID, "action": "cancel"}))
    # Before 18.6 GitLab answers a cancel without the pipeline, and has no query for a pipeline by
    # its ID alone: named without its project, the cancelled pipeline's status and ref are unknown.
    answered = band.has("PipelineCancelPayload.pipeline")
    assert (out["action"], out["id"], out["status"], out["ref"]) == (
        "cancel",
        ds.RUNNING_PIPELINE_ID,
        "canceled" if answered else None,
        "feature" if answered else None,
    )
    assert sent(band, "pipelineCancel", "POST /projects/:id/pipelines/:pipeline_id/cancel") == 1


@on_telling_bands(routes=(ARTIFACTS_TREE,))
async def test_get_job(band: Band) -> None:
    args = {"project_id": P, "job_id": job_logs.FAILED_LOG_JOB_ID, "include": ["log"], "tail_lines": 5}
    out = ok(await band.call("get_job", args))
    assert (out["id"], out["status"], out["failure_reason"]) == (5010, "failed", "script_failure")
    assert "ERROR: Job failed: exit code 1" in out["log"]["content"]


@on_telling_bands(routes=(ARTIFACTS_TREE,))
async def test_artifact_listing_is_complete(band: Band) -> None:
    # GitLab's tree answers recursive=true with one level (Metadata::Entry#children): walked.
    args = {"project_id": P, "job_id": job_logs.ARTIFACTS_JOB_ID, "include": ["artifacts"]}
    out = ok(await band.call("get_job", args))
    listing = out["artifact_files"]
    files = {e["path"] for e in listing["entries"] if e["type"] == "file"}
    assert files == set(job_logs.ARTIFACT_FILES)
    assert listing["page_info"]["has_next_page"] is False
    assert listing["source"] == ("tree" if band.at_least("18.8") else "archive_directory")


@on_telling_bands(routes=(ARTIFACTS_TREE,))
async def test_get_artifact_file(band: Band) -> None:
    args = {"project_id": P, "job_id": job_logs.ARTIFACTS_JOB_ID, "artifact_path": "coverage/index.html"}
    out = ok(await band.call("get_artifact_file", args))
    assert out["content"] == job_logs.ARTIFACT_FILES["coverage/index.html"].decode()


# -- repository -----------------------------------------------------------------------------------


@on_telling_bands("Repository.commit", "Project.duoContextExclusionSettings")
async def test_get_repository_file(band: Band) -> None:
    args = {"project_id": P, "file_path": ds.FILES["readme"], "ref": "main"}
    out = ok(await band.call("get_repository_file", args))
    assert (out["content"], out["commit_sha"]) == (ds.README_MAIN, ds.REF_SHAS["main"])


@on_telling_bands("Repository.commit", "Project.duoContextExclusionSettings")
async def test_exclusion_rules_where_gitlab_has_them(band: Band) -> None:
    result = await band.call("get_repository_file", {"project_id": P, "file_path": ds.FILES["secret"]})
    no_raw_validation(result)
    if band.has("Project.duoContextExclusionSettings"):
        assert result.is_error and result.structured_content["error"]["kind"] == "excluded"
    else:  # no such rules in this GitLab: the file is there to read
        assert not result.is_error, agent_text(result)


# -- Duo ------------------------------------------------------------------------------------------


@on_telling_bands(*DUO_SESSION_READS)
async def test_get_duo_session_works_or_says_what_it_needs(band: Band) -> None:
    # What it cannot do without (webUrl and lastDuoMessage, newer, have fallbacks).
    reads_all = band.edition == "ee" and band.has("DuoWorkflow.latestCheckpoint")
    if "get_duo_session" not in await band.tool_names():
        assert not reads_all, "get_duo_session is left out of tools/list on a GitLab that has all it reads"
        return
    result = await band.call("get_duo_session", {"workflow_id": ds.WORKFLOWS["finished"]})
    no_raw_validation(result)
    if not result.is_error:
        # Only an EE GitLab with the workflows' checkpoints (18.4) can answer at all.
        assert band.edition == "ee" and band.has("DuoWorkflow.latestCheckpoint")
        out = dict(result.structured_content or {})
        assert (out["status"], out["answer"]) == ("finished", ds.FINAL_ANSWER)
        return
    assert not reads_all, agent_text(result)
    error = result.structured_content["error"]
    assert error["reason"] == "unsupported_by_gitlab", error
    message = error["message"]
    assert band.version in message, message  # the instance's version...
    if band.edition == "ce":  # ...and what it would need
        assert re.search(r"\bEE\b|Enterprise|Premium|Ultimate", message), message
    else:
        needed = [v for v in re.findall(r"\b(\d+\.\d+)\b", message) if v != band.version]
        assert any(versions.parse_version(v) > versions.parse_version(band.version) for v in needed), message
