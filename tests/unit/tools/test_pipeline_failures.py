"""``get_pipeline`` with ``include: ["failures"]``: failed jobs, the end of their failing log
section, and their failed test cases, in one call with a bounded answer.

GraphQL is the fake of ``tests/unit/gitlab/fake_gitlab.py`` (every document validated and executed
against GitLab's schema); job logs (``GET /projects/:id/jobs/:job_id/trace``) are respx routes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import respx

from gateway.config import Settings
from gateway.tools.ci import pipeline_failures as pf
from tests.unit.gitlab.fake_gitlab import (
    ERROR_TEST,
    FAILED_JOB_IDS,
    FAILING_TEST,
    GITLAB,
    GRAPHQL_URL,
    PIPELINE_ID,
    PROJECT_PATH,
    FakeGitLab,
    passed,
)
from tests.unit.gitlab.tool_env import ToolEnv, ok

ARGS = {"id": PROJECT_PATH, "pipeline_id": PIPELINE_ID, "include": ["failures"]}
E = "\x1b"
RUNNER_LOG = (
    f"{E}[0KRunning with gitlab-runner 17.0.0\n"
    f"section_start:1700000000:prepare_executor\r{E}[0K{E}[0K{E}[36;1mPreparing the docker executor{E}[0;m\n"
    "Using docker image ruby:3.3\n"
    f"section_end:1700000010:prepare_executor\r{E}[0K\n"
    f"section_start:1700000010:step_script\r{E}[0K{E}[0K{E}[36;1mExecuting step_script{E}[0;m\n"
    "$ bundle exec rspec\n"
    "Progress: 10%\rProgress: 50%\rProgress: 100%\n"
    "Failures:\n"
    "  1) Checkout applies the discount\n"
    f"     {E}[31mFailure/Error: expect(total).to eq(90){E}[0m\n"
    f"section_end:1700000100:step_script\r{E}[0K\n"
    f"section_start:1700000100:upload_artifacts_on_failure\r{E}[0K{E}[0K{E}[36;1mUploading artifacts{E}[0;m\n"
    "Uploading artifacts...\n"
    f"section_end:1700000105:upload_artifacts_on_failure\r{E}[0K\n"
    f"{E}[31;1mERROR: Job failed: exit code 1\n{E}[0;m\n"
)
TRACE = re.compile(r"/api/v4/projects/grp%2Fsub%2Fproj/jobs/(?P<job>\d+)/trace$")


class Logs:
    """The trace route: a log (or a status) per job, and the jobs asked for."""

    def __init__(self) -> None:
        self.by_job: dict[int, str | int] = {}
        self.asked: list[int] = []

    def __call__(self, request: httpx.Request, job: str) -> httpx.Response:
        job_id = int(job)
        self.asked.append(job_id)
        log = self.by_job.get(job_id, RUNNER_LOG)
        if isinstance(log, int):
            return httpx.Response(log, json={"message": f"{log} Forbidden"})
        return httpx.Response(200, content=log.encode(), headers={"Content-Type": "text/plain"})


@pytest.fixture
def fake() -> FakeGitLab:
    return FakeGitLab()


@pytest.fixture
def logs() -> Logs:
    return Logs()


@pytest.fixture
def gitlab(fake: FakeGitLab, logs: Logs) -> Iterator[respx.MockRouter]:
    with respx.mock(assert_all_mocked=True, assert_all_called=False) as router:
        router.post(GRAPHQL_URL).mock(side_effect=fake)
        router.get(url__regex=TRACE.pattern).mock(side_effect=logs)
        yield router


@pytest.fixture
async def env(make_settings: Callable[..., Settings], gitlab: respx.MockRouter) -> Any:
    async with httpx.AsyncClient() as http:
        yield ToolEnv(make_settings(), http)


async def test_one_call_says_what_failed_and_why(env: ToolEnv, fake: FakeGitLab, logs: Logs) -> None:
    out = ok(await env.call("get_pipeline", ARGS))
    assert [f["id"] for f in out["failures"]] == list(FAILED_JOB_IDS)
    first = out["failures"][0]
    assert first["failure_message"] == "The script failed with exit code 1"
    assert first["exit_code"] == 1 and first["status"] == "failed"
    assert first["test_suite"] == "rspec"
    assert first["web_url"] == f"{GITLAB}/{PROJECT_PATH}/-/jobs/{FAILED_JOB_IDS[0]}"
    assert [f["allow_failure"] for f in out["failures"]] == [False, False, True]
    assert out["failures"][2]["test_suite"] is None
    log = first["log"]
    assert log["section"] == "step_script"
    assert log["text"] == (
        "Executing step_script\n$ bundle exec rspec\nProgress: 100%\nFailures:\n"
        "  1) Checkout applies the discount\n     Failure/Error: expect(total).to eq(90)"
    )
    assert (log["first_line"], log["last_line"]) == (4, 9)
    assert log["total_bytes"] == len(RUNNER_LOG.encode()) and log["truncated"] is False
    assert first["log_error"] is None
    # errors first, then failures, as GitLab lists a suite's cases
    assert [(t["name"], t["status"]) for t in out["failed_tests"]] == [
        (ERROR_TEST["name"], "error"),
        (FAILING_TEST["name"], "failed"),
    ]
    failing = out["failed_tests"][1]
    assert failing == {
        "suite": "rspec",
        "job_ids": list(FAILED_JOB_IDS[:2]),
        "name": FAILING_TEST["name"],
        "classname": FAILING_TEST["classname"],
        "file": FAILING_TEST["file"],
        "status": "failed",
        "stack_trace": FAILING_TEST["stackTrace"],
        "stack_trace_truncated": False,
    }
    assert out["test_summary"] == {
        "count": 4,
        "failed": 1,
        "error": 1,
        "suite_error": None,
        "failed_tests_not_shown": 0,
    }
    assert out["page_info"]["has_next_page"] is False
    assert "get_job" in out["more"] and "after" not in out["more"]
    # one query for the jobs and the summary, one for the test cases, one log read per job
    assert [r["operationName"] for r in fake.requests] == ["getPipeline", "getPipelineTestCases"]
    assert sorted(logs.asked) == sorted(FAILED_JOB_IDS)


async def test_a_log_gitlab_refuses_leaves_the_job_listed(env: ToolEnv, logs: Logs) -> None:
    logs.by_job[FAILED_JOB_IDS[1]] = 403
    logs.by_job[FAILED_JOB_IDS[2]] = 404
    out = ok(await env.call("get_pipeline", ARGS))
    refused, missing = out["failures"][1], out["failures"][2]
    assert refused["log"] is None and "refused to show this job's log (403)" in refused["log_error"]
    assert missing["log"] is None and missing["log_error"].startswith("GitLab has no log for this job")
    assert out["failures"][0]["log"]["section"] == "step_script"
    assert len(out["failed_tests"]) == 2


async def test_without_test_reports_one_query_is_enough(env: ToolEnv, fake: FakeGitLab) -> None:
    fake.test_cases.clear()
    out = ok(await env.call("get_pipeline", ARGS))
    assert out["failed_tests"] == []
    assert out["test_summary"]["count"] == 0
    assert [r["operationName"] for r in fake.requests] == ["getPipeline"]


async def test_pages_of_failed_jobs(env: ToolEnv, fake: FakeGitLab, logs: Logs) -> None:
    out = ok(await env.call("get_pipeline", {**ARGS, "first": 2}))
    assert [f["id"] for f in out["failures"]] == list(FAILED_JOB_IDS[:2])
    assert out["page_info"]["has_next_page"] is True
    assert f'after: "{out["page_info"]["end_cursor"]}".' in out["more"]
    nxt = ok(await env.call("get_pipeline", {**ARGS, "first": 2, "after": out["page_info"]["end_cursor"]}))
    assert [f["id"] for f in nxt["failures"]] == [FAILED_JOB_IDS[2]]
    assert nxt["failed_tests"] == [] and len(logs.asked) == 3


async def test_a_page_holds_at_most_ten_failed_jobs(env: ToolEnv, fake: FakeGitLab) -> None:
    ok(await env.call("get_pipeline", {**ARGS, "first": 50}))
    assert fake.requests[0]["variables"]["first"] == pf.MAX_FAILURES_PAGE


async def test_the_answer_stays_bounded(env: ToolEnv, fake: FakeGitLab, logs: Logs) -> None:
    huge_line = "x" * 5000
    long_log = "".join(f"line {n} {huge_line}\n" for n in range(3000)) + "ERROR: Job failed: exit code 1\n"
    for job in FAILED_JOB_IDS:
        logs.by_job[job] = long_log
    trace = "Failure/Error: " + "frame\n" * 5000
    fake.test_cases[FAILED_JOB_IDS[0]] = [
        {**FAILING_TEST, "name": f"case {n}", "stackTrace": trace} for n in range(30)
    ] + [passed(1)]
    out = ok(await env.call("get_pipeline", ARGS))
    assert len(json.dumps(out)) < pf.MAX_ANSWER_CHARS
    for failure in out["failures"]:
        assert failure["log"]["section"] is None  # no sections: the log's own end
        assert len(failure["log"]["text"]) <= pf.MAX_LOG_CHARS and failure["log"]["truncated"]
        assert failure["log"]["text"].endswith("ERROR: Job failed: exit code 1")
        assert failure["log"]["total_lines"] == 3001
    assert len(out["failed_tests"]) == pf.MAX_TESTS_PER_SUITE
    assert all(len(t["stack_trace"]) <= pf.MAX_STACK_TRACE_CHARS for t in out["failed_tests"])
    assert all(t["stack_trace_truncated"] for t in out["failed_tests"] if t["name"].startswith("case "))
    assert out["test_summary"]["failed_tests_not_shown"] == 31 - pf.MAX_TESTS_PER_SUITE
    assert "more failed test cases are in the pipeline's Tests tab" in out["more"]
    # the test cases read were only as many as shown
    assert fake.requests[1]["variables"]["cases"] == pf.MAX_TESTS_PER_SUITE


async def test_job_status_is_refused_with_failures(env: ToolEnv) -> None:
    result = await env.call("get_pipeline", {**ARGS, "job_status": "failed"})
    assert result["isError"] is True
    assert "filters the jobs facet only" in result["structuredContent"]["error"]["message"]
