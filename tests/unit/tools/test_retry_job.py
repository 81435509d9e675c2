"""``retry_job`` (https://docs.gitlab.com/api/jobs/#retry-a-job): one job run again, sent at most
once, and each refusal told apart."""

from __future__ import annotations

from typing import Any

import httpx
import respx

from gateway.tools import all_tools
from tests.unit.gitlab.tool_env import ToolEnv, error, ok

GITLAB = "https://gitlab.example.com"
PROJECT = "grp/sub/proj"
JOB_URL = f"{GITLAB}/api/v4/projects/grp%2Fsub%2Fproj/jobs/5024"
RETRY_URL = f"{JOB_URL}/retry"


def job(**overrides: Any) -> dict[str, Any]:
    return {
        "id": 5024,
        "name": "rspec 21/30",
        "stage": "test",
        "status": "failed",
        "failure_reason": "script_failure",
        "ref": "main",
        "pipeline": {"id": 1001},
        "web_url": f"{GITLAB}/{PROJECT}/-/jobs/5024",
        **overrides,
    }


def test_retry_job_changes_something_but_destroys_nothing() -> None:
    tool = next(t for t in all_tools() if t.name == "retry_job")
    hints = tool.annotations.to_mcp()
    assert hints["readOnlyHint"] is False and hints["destructiveHint"] is False
    assert hints["idempotentHint"] is False and tool.toolset == "ci"


async def test_a_failed_job_is_run_again_and_the_new_job_answered(
    env: ToolEnv, router: respx.MockRouter
) -> None:
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job()))
    new = job(id=5100, status="pending", failure_reason=None, web_url=f"{GITLAB}/{PROJECT}/-/jobs/5100")
    retry = router.post(RETRY_URL).mock(return_value=httpx.Response(201, json=new))
    out = ok(await env.call("retry_job", {"project_id": PROJECT, "job_id": 5024}), "retry_job")
    assert out["id"] == 5100 and out["status"] == "pending" and out["retried_job_id"] == 5024
    assert out["pipeline_id"] == 1001 and out["web_url"].endswith("/-/jobs/5100")
    assert retry.call_count == 1
    # The job's URL names it too.
    ok(await env.call("retry_job", {"url": f"{GITLAB}/{PROJECT}/-/jobs/5024"}), "retry_job")
    assert retry.call_count == 2


async def test_a_retry_that_may_have_reached_gitlab_is_not_sent_again(
    env: ToolEnv, router: respx.MockRouter
) -> None:
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job()))
    retry = router.post(RETRY_URL).mock(return_value=httpx.Response(502, text="Bad Gateway"))
    err = error(await env.call("retry_job", {"project_id": PROJECT, "job_id": 5024}))
    assert retry.call_count == 1
    assert err["reason"] == "upstream_error" and err["outcome"] == "unknown"
    assert "did not send it again" in err["message"]
    assert "pipeline_id=1001" in err["message"] and "'rspec 21/30'" in err["message"]


async def test_a_job_gitlab_will_not_retry_says_why(env: ToolEnv, router: respx.MockRouter) -> None:
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job(status="running")))
    router.post(RETRY_URL).mock(
        return_value=httpx.Response(403, json={"message": "403 Forbidden - Job is not retryable"})
    )
    err = error(await env.call("retry_job", {"project_id": PROJECT, "job_id": 5024}))
    assert err["reason"] == "bad_request" and err["kind"] == "not_retryable" and err["status"] == "running"
    router.post(RETRY_URL).mock(return_value=httpx.Response(403, json={"message": "403 Forbidden"}))
    err = error(await env.call("retry_job", {"project_id": PROJECT, "job_id": 5024}))
    assert err["reason"] == "unauthorized" and "Developer role" in err["message"]


async def test_a_job_retried_already_names_its_newest_run(env: ToolEnv, router: respx.MockRouter) -> None:
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job()))
    router.post(RETRY_URL).mock(
        return_value=httpx.Response(403, json={"message": "403 Forbidden - Job is not retryable"})
    )
    jobs = router.get(f"{GITLAB}/api/v4/projects/grp%2Fsub%2Fproj/pipelines/1001/jobs").mock(
        return_value=httpx.Response(
            200, json=[job(id=5023, name="lint", status="success"), job(id=5031, status="pending")]
        )
    )
    err = error(await env.call("retry_job", {"project_id": PROJECT, "job_id": 5024}))
    assert err["reason"] == "bad_request" and err["kind"] == "already_retried"
    assert err["newest_job_id"] == 5031 and "job 5031 (status pending) is" in err["message"]
    assert "it was retried already, so it is not the newest run of 'rspec 21/30'" in err["message"]
    # The newest run itself refused (an archived pipeline): the general reasons.
    jobs.mock(return_value=httpx.Response(200, json=[job()]))
    err = error(await env.call("retry_job", {"project_id": PROJECT, "job_id": 5024}))
    assert err["kind"] == "not_retryable" and "newest_job_id" not in err
    # GitLab failing the lookup leaves the refusal told without it.
    jobs.mock(return_value=httpx.Response(500))
    err = error(await env.call("retry_job", {"project_id": PROJECT, "job_id": 5024}))
    assert err["kind"] == "not_retryable"


async def test_a_missing_job_is_told_and_nothing_is_sent(env: ToolEnv, router: respx.MockRouter) -> None:
    router.get(JOB_URL).mock(return_value=httpx.Response(404, json={"message": "404 Not found"}))
    retry = router.post(RETRY_URL)
    err = error(await env.call("retry_job", {"project_id": PROJECT, "job_id": 5024}))
    assert err["reason"] == "not_found" and not retry.called
    err = error(await env.call("retry_job", {"project_id": PROJECT}))
    assert err["reason"] == "bad_request" and "job_id missing" in err["message"] and not retry.called
