"""``save_pipeline`` end to end: the gateway process against the GitLab stand-in, through the
official ``mcp`` SDK client.

The stand-in validates every mutation and query against GitLab's complete schema (an invalid one
fails the test through ``fresh_standin``) and applies them to its data: pipeline 1001 in
``grp/sub/proj`` has failed jobs (retryable), 1003 is running (cancelable), 2001 is in
``grp/private-proj``, which the caller (alice, a developer of ``grp/sub/proj``) cannot read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.harness import GatewayProcess, mcp_client
from tests.standin import content
from tests.standin import dataset as ds
from tests.standin.fixtures import Standin

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def gateway(standin: Standin, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """One gateway for the module (service mode, alice's token), against the session's stand-in."""
    proc = GatewayProcess(env=standin.env(), state_dir=tmp_path_factory.mktemp("gateway") / "state").start()
    yield proc
    proc.stop()


async def call(gateway: GatewayProcess, arguments: dict[str, Any]) -> Any:
    async with mcp_client(gateway.mcp_url) as client:
        return await client.call_tool("save_pipeline", arguments)


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert json.loads(result.content[-1].text) == result.structured_content
    return dict(result.structured_content)


def failure(result: Any) -> dict[str, Any]:
    assert result.is_error, result.structured_content
    err = dict(result.structured_content["error"])
    assert result.content[0].text == err["message"]
    # Every tool error names its request id (the id on the gateway's log lines for the call).
    assert re.fullmatch(r"[0-9a-f]{32}", err.pop("request_id", "")), err
    return err


def pipelines_url(standin: Standin, pipeline_id: int, project: str = ds.PROJECT_PATH) -> str:
    return f"{standin.url}/{project}/-/pipelines/{pipeline_id}"


async def test_listed_as_destructive_and_not_read_only(
    gateway: GatewayProcess, fresh_standin: Standin
) -> None:
    async with mcp_client(gateway.mcp_url) as client:
        tool = next(t for t in (await client.list_tools()).tools if t.name == "save_pipeline")
    assert tool.annotations is not None
    assert tool.annotations.read_only_hint is False
    assert tool.annotations.destructive_hint is True
    assert tool.output_schema is not None
    assert set(tool.output_schema["anyOf"][0]["required"]) == {"action", "id", "status", "ref", "web_url"}


async def test_create_with_variables_and_inputs(gateway: GatewayProcess, fresh_standin: Standin) -> None:
    out = structured(
        await call(
            gateway,
            {
                "project_id": ds.PROJECT_PATH,
                "ref": "main",
                "variables": [
                    {"key": "DEPLOY_ENV", "value": "production"},
                    {"key": "CFG", "value": "a: 1", "variable_type": "file"},
                ],
                "inputs": {"environment": "production", "dry_run": True},
            },
        )
    )
    created = fresh_standin.control.pipelines(created=True)
    assert [p["id"] for p in created] == [ds.FIRST_CREATED_PIPELINE_ID]
    assert out == {
        "action": "create",
        "id": ds.FIRST_CREATED_PIPELINE_ID,
        "status": "created",
        "ref": "main",
        "web_url": pipelines_url(fresh_standin, ds.FIRST_CREATED_PIPELINE_ID),
    }
    state = fresh_standin.control.pipeline(ds.FIRST_CREATED_PIPELINE_ID)
    assert state["variables"] == [
        {"key": "DEPLOY_ENV", "value": "production", "variableType": "ENV_VAR"},
        {"key": "CFG", "value": "a: 1", "variableType": "FILE"},
    ]
    assert state["inputs"] == [
        {"name": "environment", "value": "production"},
        {"name": "dry_run", "value": True},
    ]
    assert fresh_standin.control.graphql_requests(field="pipelineCreate") == 1


async def test_create_by_numeric_id_and_by_url(gateway: GatewayProcess, fresh_standin: Standin) -> None:
    by_id = structured(await call(gateway, {"project_id": ds.PROJECT_ID, "ref": "feature"}))
    by_url = structured(
        await call(gateway, {"url": f"{fresh_standin.url}/{ds.PROJECT_PATH}/-/pipelines", "ref": "v1.0"})
    )
    assert (by_id["ref"], by_url["ref"]) == ("feature", "v1.0")
    assert by_url["id"] == by_id["id"] + 1
    assert by_url["web_url"] == pipelines_url(fresh_standin, by_url["id"])
    assert fresh_standin.control.graphql_requests(field="pipelineCreate") == 2


@pytest.mark.parametrize(
    ("ref", "words"),
    [("no-such-branch", "Reference not found"), ("broken-ci", content.BROKEN_CI_ERROR)],
)
async def test_gitlab_refusals_are_bad_request_in_its_words(
    gateway: GatewayProcess, fresh_standin: Standin, ref: str, words: str
) -> None:
    err = failure(await call(gateway, {"project_id": ds.PROJECT_PATH, "ref": ref}))
    assert err["reason"] == "bad_request"
    assert err["message"].startswith(f"GitLab did not create the pipeline: {words}")
    assert fresh_standin.control.pipelines(created=True) == []


async def test_create_in_a_project_the_caller_cannot_see(
    gateway: GatewayProcess, fresh_standin: Standin
) -> None:
    err = failure(await call(gateway, {"project_id": ds.PRIVATE_PROJECT_PATH, "ref": "main"}))
    assert err["reason"] == "not_found"
    assert err["message"].startswith(
        f"Project '{ds.PRIVATE_PROJECT_PATH}' not found, or this token may not run"
    )


async def test_create_whose_answer_is_lost_is_sent_once_and_says_how_to_check(
    gateway: GatewayProcess, fresh_standin: Standin
) -> None:
    # GitLab creates the pipeline, then the connection drops before the answer arrives.
    fresh_standin.control.drop(match={"field": "pipelineCreate"}, phase="after")
    err = failure(await call(gateway, {"project_id": ds.PROJECT_PATH, "ref": "main"}))
    assert fresh_standin.control.graphql_requests(field="pipelineCreate") == 1
    assert len(fresh_standin.control.pipelines(created=True)) == 1
    assert err["reason"] == "upstream_error" and err["outcome"] == "unknown"
    assert "may or may not have been created" in err["message"]
    assert f"{fresh_standin.url}/{ds.PROJECT_PATH}/-/pipelines?ref=main" in err["message"]


async def test_create_refused_before_gitlab_acts_is_sent_again(
    gateway: GatewayProcess, fresh_standin: Standin
) -> None:
    fresh_standin.control.rate_limit(retry_after=0, match={"field": "pipelineCreate"})
    out = structured(await call(gateway, {"project_id": ds.PROJECT_PATH, "ref": "main"}))
    assert out["id"] == ds.FIRST_CREATED_PIPELINE_ID
    assert fresh_standin.control.graphql_requests(field="pipelineCreate") == 2
    assert len(fresh_standin.control.pipelines(created=True)) == 1


async def test_preconditions_send_nothing(gateway: GatewayProcess, fresh_standin: Standin) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"project_id": ds.PROJECT_PATH}, "`ref` is required to create a pipeline"),
        ({"pipeline_id": ds.PIPELINE_ID}, 'Provide action: "retry" or "cancel" when `pipeline_id` is set.'),
        ({"action": "retry"}, 'action "retry" needs `pipeline_id`'),
        (
            {"pipeline_id": ds.PIPELINE_ID, "action": "retry", "variables": [{"key": "A", "value": "1"}]},
            "`variables` only applies when creating a pipeline",
        ),
        (
            {"project_id": ds.PROJECT_PATH, "url": f"{fresh_standin.url}/{ds.PROJECT_PATH}", "ref": "main"},
            "Provide exactly one of `url` or `project_id`",
        ),
        ({"url": f"https://gitlab.com/{ds.PROJECT_PATH}", "ref": "main"}, "is not on this gateway's GitLab"),
    ]
    for arguments, start in cases:
        err = failure(await call(gateway, arguments))
        assert err["reason"] == "bad_request"
        assert start in err["message"], err["message"]
    assert fresh_standin.control.request_count() == 0


async def test_retry_reruns_failed_jobs(gateway: GatewayProcess, fresh_standin: Standin) -> None:
    out = structured(await call(gateway, {"pipeline_id": ds.PIPELINE_ID, "action": "retry"}))
    assert out == {
        "action": "retry",
        "id": ds.PIPELINE_ID,
        "status": "running",
        "ref": "main",
        "web_url": pipelines_url(fresh_standin, ds.PIPELINE_ID),
    }
    jobs = fresh_standin.control.pipeline(ds.PIPELINE_ID)["jobs"]
    assert any(job["status"].lower() == "pending" for job in jobs)
    assert fresh_standin.control.graphql_requests(field="pipelineRetry") == 1


async def test_retry_refused_by_gitlab(gateway: GatewayProcess, fresh_standin: Standin) -> None:
    err = failure(await call(gateway, {"pipeline_id": ds.RUNNING_PIPELINE_ID, "action": "retry"}))
    assert err == {
        "reason": "bad_request",
        "message": f"GitLab did not retry pipeline {ds.RUNNING_PIPELINE_ID}: Pipeline is not retryable",
        "gitlab_errors": ["Pipeline is not retryable"],
    }


async def test_retry_whose_answer_is_lost_is_never_resent(
    gateway: GatewayProcess, fresh_standin: Standin
) -> None:
    fresh_standin.control.fail(502, match={"field": "pipelineRetry"}, phase="after")
    err = failure(
        await call(gateway, {"project_id": ds.PROJECT_PATH, "pipeline_id": ds.PIPELINE_ID, "action": "retry"})
    )
    assert fresh_standin.control.graphql_requests(field="pipelineRetry") == 1
    assert err["reason"] == "upstream_error" and err["outcome"] == "unknown"
    assert (
        f"get_pipeline (project_id='{ds.PROJECT_PATH}', pipeline_id={ds.PIPELINE_ID}, include=['jobs'])"
        in err["message"]
    )


async def test_retry_checks_the_named_project(gateway: GatewayProcess, fresh_standin: Standin) -> None:
    err = failure(
        await call(
            gateway, {"project_id": ds.PUBLIC_PROJECT_PATH, "pipeline_id": ds.PIPELINE_ID, "action": "retry"}
        )
    )
    assert err["reason"] == "not_found"
    assert err["message"].startswith(
        f"Pipeline {ds.PIPELINE_ID} not found in project '{ds.PUBLIC_PROJECT_PATH}'"
    )
    assert fresh_standin.control.graphql_requests(field="pipelineRetry") == 0
    assert fresh_standin.control.pipeline(ds.PIPELINE_ID)["status"].lower() == "failed"


async def test_retry_of_a_pipeline_the_caller_cannot_see(
    gateway: GatewayProcess, fresh_standin: Standin
) -> None:
    err = failure(await call(gateway, {"pipeline_id": ds.PRIVATE_PIPELINE_ID, "action": "retry"}))
    assert err["reason"] == "not_found"
    assert err["message"].startswith(
        f"Pipeline {ds.PRIVATE_PIPELINE_ID} not found, or this token may not retry"
    )


async def test_cancel_then_cancel_again(gateway: GatewayProcess, fresh_standin: Standin) -> None:
    out = structured(await call(gateway, {"pipeline_id": ds.RUNNING_PIPELINE_ID, "action": "cancel"}))
    assert out["action"] == "cancel" and out["id"] == ds.RUNNING_PIPELINE_ID
    assert out["status"] == "canceled"
    assert out["web_url"] == pipelines_url(fresh_standin, ds.RUNNING_PIPELINE_ID)
    err = failure(await call(gateway, {"pipeline_id": ds.RUNNING_PIPELINE_ID, "action": "cancel"}))
    assert err == {
        "reason": "bad_request",
        "message": f"GitLab did not cancel pipeline {ds.RUNNING_PIPELINE_ID}: Pipeline is not cancelable",
        "gitlab_errors": ["Pipeline is not cancelable"],
    }


async def test_cancel_whose_answer_is_lost_is_sent_again(
    gateway: GatewayProcess, fresh_standin: Standin
) -> None:
    # The first cancel is applied but its answer is lost; the second finds nothing left to cancel.
    fresh_standin.control.drop(match={"field": "pipelineCancel"}, phase="after")
    err = failure(await call(gateway, {"pipeline_id": ds.RUNNING_PIPELINE_ID, "action": "cancel"}))
    assert fresh_standin.control.graphql_requests(field="pipelineCancel") == 2
    assert fresh_standin.control.pipeline(ds.RUNNING_PIPELINE_ID)["status"].lower() == "canceled"
    assert err["reason"] == "bad_request"
    assert err["message"].startswith(
        f"GitLab did not confirm the first cancel request for pipeline {ds.RUNNING_PIPELINE_ID}, so the "
        "gateway sent it again, and GitLab answered: Pipeline is not cancelable. If the first request was "
        "applied"
    )


async def test_url_under_a_sub_path(
    fresh_standin_subpath: Standin, tmp_path_factory: pytest.TempPathFactory
) -> None:
    standin = fresh_standin_subpath
    proc = GatewayProcess(
        env=standin.env(), state_dir=tmp_path_factory.mktemp("gateway-sub") / "state"
    ).start()
    try:
        root = standin.url.removesuffix("/gitlab")
        async with mcp_client(proc.mcp_url) as client:
            outside = await client.call_tool(
                "save_pipeline", {"url": f"{root}/{ds.PROJECT_PATH}", "ref": "main"}
            )
            out = await client.call_tool(
                "save_pipeline", {"url": f"{standin.url}/{ds.PROJECT_PATH}", "ref": "main"}
            )
        assert failure(outside)["reason"] == "bad_request"
        created = structured(out)
        assert created["web_url"] == f"{standin.url}/{ds.PROJECT_PATH}/-/pipelines/{created['id']}"
        assert standin.control.graphql_requests(field="pipelineCreate") == 1
    finally:
        proc.stop()
