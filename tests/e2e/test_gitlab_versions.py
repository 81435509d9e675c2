"""Every GitLab tool against every GitLab band: 16.11 to the newest, EE and CE.

One stand-in and one gateway per band (``gitlab_band``, :mod:`tests.e2e.gitlab_bands`), shared by
the module's tests. What a user of each band should get: the same data as on the newest GitLab
wherever that version has it (null where it lacks a value, such as a job's exit code before 17.9);
``save_pipeline`` creating, retrying and cancelling with each request sent once; ``get_duo_session``
either working or answering plainly which GitLab version or edition it needs; and no GitLab
validation message ("doesn't exist on type") in anything an agent reads.

Where today's gateway falls short on a band, the test is marked ``xfail(strict=False)`` with the
reason, decided from the band's declared schema (:data:`tests.gitlab.versions.ARRIVALS`): once the
gateway serves that band the test passes (XPASS) and the mark can go.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from mcp.types import CallToolResult

from tests.e2e.gitlab_bands import RAW_VALIDATION, Band, agent_text
from tests.gitlab import versions
from tests.standin import dataset as ds
from tests.standin import job_logs

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

P = ds.PROJECT_PATH


def gap(request: pytest.FixtureRequest, missing: bool, reason: str) -> None:
    """Mark the running test an expected failure on this band when today's gateway cannot serve it."""
    if missing:
        request.applymarker(pytest.mark.xfail(strict=False, reason=reason))


#: Today's gateway fails a tool on a GitLab that lacks one of these coordinates: (coordinates, why).
GAPS: dict[str, tuple[tuple[str, ...], str]] = {
    "get_pipeline": (
        ("Project.pipeline(id:)", "CiJob.exitCode"),
        "the gateway's get_pipeline document asks for Project.pipeline(id:) (17.4) and CiJob.exitCode "
        "(17.9) on every version",
    ),
    "save_pipeline": (
        ("PipelineCancelPayload.pipeline", "Mutation.pipelineCreate"),
        "save_pipeline's one document holds all three mutations, and PipelineCancelPayload.pipeline "
        "(18.6) or Mutation.pipelineCreate (17.8) is missing",
    ),
    "get_repository_file": (
        ("Repository.commit",),
        "get_repository_file asks for Repository.commit(ref:) (17.11) and, on EE, "
        "Project.duoContextExclusionSettings (18.2) at once, so its CE fallback is not taken",
    ),
}


def tool_gap(request: pytest.FixtureRequest, band: Band, tool: str) -> None:
    """:func:`gap` for ``tool`` as :data:`GAPS` describes it."""
    coordinates, why = GAPS[tool]
    gap(request, not all(band.has(c) for c in coordinates), f"GitLab {band.id}: {why}")


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
    assert versions.version_string(band.version, band.edition) in band.gateway.log()


# -- CI ---------------------------------------------------------------------------------------------


async def test_list_pipelines(band: Band) -> None:
    out = ok(await band.call("list_pipelines", {"project_id": P}))
    assert [p["id"] for p in out["pipelines"]] == [1004, 1003, 1002, 1001]
    assert out["pipelines"][-1]["sha"] == ds.REF_SHAS["main"]


async def test_get_pipeline_jobs(band: Band, request: pytest.FixtureRequest) -> None:
    tool_gap(request, band, "get_pipeline")
    args = {"project_id": P, "pipeline_id": ds.PIPELINE_ID, "include": ["jobs"]}
    out = ok(await band.call("get_pipeline", args))
    assert (out["id"], out["status"], out["sha"]) == (ds.PIPELINE_ID, "failed", ds.REF_SHAS["main"])
    ids = [j["id"] for j in out["jobs"]]
    assert len(ids) >= 20 and ids == ds.BUILD_JOB_IDS[: len(ids)]


async def test_get_pipeline_failures(band: Band, request: pytest.FixtureRequest) -> None:
    tool_gap(request, band, "get_pipeline")
    args = {"project_id": P, "pipeline_id": ds.PIPELINE_ID, "include": ["failures"]}
    out = ok(await band.call("get_pipeline", args))
    exit_code = 1 if band.has("CiJob.exitCode") else None  # GitLab has no exit code before 17.9
    assert [(f["id"], f["exit_code"]) for f in out["failures"]] == [
        (5010, exit_code),
        (5024, exit_code),
        (5040, exit_code),
    ]


async def test_save_pipeline_creates_once(band: Band, request: pytest.FixtureRequest) -> None:
    tool_gap(request, band, "save_pipeline")
    out = ok(await band.call("save_pipeline", {"project_id": P, "ref": "main"}))
    assert (out["action"], out["id"], out["status"], out["ref"]) == (
        "create",
        ds.FIRST_CREATED_PIPELINE_ID,
        "created",
        "main",
    )
    assert [p["id"] for p in band.standin.control.pipelines(created=True)] == [ds.FIRST_CREATED_PIPELINE_ID]
    assert sent(band, "pipelineCreate", "POST /projects/:id/pipeline") == 1


async def test_save_pipeline_retries_once(band: Band, request: pytest.FixtureRequest) -> None:
    tool_gap(request, band, "save_pipeline")
    out = ok(await band.call("save_pipeline", {"pipeline_id": ds.PIPELINE_ID, "action": "retry"}))
    assert (out["action"], out["id"], out["status"]) == ("retry", ds.PIPELINE_ID, "running")
    assert sent(band, "pipelineRetry", "POST /projects/:id/pipelines/:pipeline_id/retry") == 1


async def test_save_pipeline_cancels_once(band: Band, request: pytest.FixtureRequest) -> None:
    tool_gap(request, band, "save_pipeline")
    out = ok(await band.call("save_pipeline", {"pipeline_id": ds.RUNNING_PIPELINE_ID, "action": "cancel"}))
    assert (out["action"], out["id"], out["status"], out["ref"]) == (
        "cancel",
        ds.RUNNING_PIPELINE_ID,
        "canceled",
        "feature",
    )
    assert sent(band, "pipelineCancel", "POST /projects/:id/pipelines/:pipeline_id/cancel") == 1


async def test_get_job(band: Band) -> None:
    args = {"project_id": P, "job_id": job_logs.FAILED_LOG_JOB_ID, "include": ["log"], "tail_lines": 5}
    out = ok(await band.call("get_job", args))
    assert (out["id"], out["status"], out["failure_reason"]) == (5010, "failed", "script_failure")
    assert "ERROR: Job failed: exit code 1" in out["log"]["content"]


async def test_artifact_listing_is_complete(band: Band) -> None:
    # GitLab's tree answers recursive=true with one level (Metadata::Entry#children): walked.
    args = {"project_id": P, "job_id": job_logs.ARTIFACTS_JOB_ID, "include": ["artifacts"]}
    out = ok(await band.call("get_job", args))
    listing = out["artifact_files"]
    files = {e["path"] for e in listing["entries"] if e["type"] == "file"}
    assert files == set(job_logs.ARTIFACT_FILES)
    assert listing["page_info"]["has_next_page"] is False
    assert listing["source"] == ("tree" if band.at_least("18.8") else "archive_directory")


async def test_get_artifact_file(band: Band) -> None:
    args = {"project_id": P, "job_id": job_logs.ARTIFACTS_JOB_ID, "artifact_path": "coverage/index.html"}
    out = ok(await band.call("get_artifact_file", args))
    assert out["content"] == job_logs.ARTIFACT_FILES["coverage/index.html"].decode()


# -- repository -----------------------------------------------------------------------------------


async def test_get_repository_file(band: Band, request: pytest.FixtureRequest) -> None:
    tool_gap(request, band, "get_repository_file")
    args = {"project_id": P, "file_path": ds.FILES["readme"], "ref": "main"}
    out = ok(await band.call("get_repository_file", args))
    assert (out["content"], out["commit_sha"]) == (ds.README_MAIN, ds.REF_SHAS["main"])


async def test_exclusion_rules_where_gitlab_has_them(band: Band, request: pytest.FixtureRequest) -> None:
    tool_gap(request, band, "get_repository_file")
    result = await band.call("get_repository_file", {"project_id": P, "file_path": ds.FILES["secret"]})
    no_raw_validation(result)
    if band.has("Project.duoContextExclusionSettings"):
        assert result.is_error and result.structured_content["error"]["kind"] == "excluded"
    else:  # no such rules in this GitLab: the file is there to read
        assert not result.is_error, agent_text(result)


# -- Duo ------------------------------------------------------------------------------------------


async def test_get_duo_session_works_or_says_what_it_needs(
    band: Band, request: pytest.FixtureRequest
) -> None:
    reads_all = band.edition == "ee" and all(
        band.has(c)
        for c in ("DuoWorkflow.latestCheckpoint", "DuoWorkflow.webUrl", "DuoWorkflowEvent.lastDuoMessage")
    )
    gap(
        request,
        not reads_all,
        f"GitLab {band.id}: get_duo_session is listed and answers GitLab's validation error (bad_request)",
    )
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
