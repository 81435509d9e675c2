"""``get_job`` (https://docs.gitlab.com/api/jobs/#get-a-single-job): the job, its cleaned log in
byte windows or as a tail, read as GitLab's answer streams, and its artifacts.

GitLab is mocked with respx; a log is served as a stream of small chunks that counts what was read,
so a test sees whether the gateway stopped reading. Results are checked as a caller sees them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
import respx

from gateway.config import Settings
from gateway.gitlab.credentials import ANONYMOUS
from gateway.gitlab.job_log import clean_log
from gateway.tools.visibility import ANONYMOUS_READS
from tests.standin.job_logs import FAILED_LOG, runner_log
from tests.unit.gitlab.tool_env import ToolEnv, error, ok

GITLAB = "https://gitlab.example.com"
API = f"{GITLAB}/api/v4"
PROJECT = "grp/sub/proj"
JOB_URL = f"{API}/projects/grp%2Fsub%2Fproj/jobs/5010"
TRACE_URL = f"{JOB_URL}/trace"
RAW = FAILED_LOG.encode()


def job(**overrides: Any) -> dict[str, Any]:
    return {
        "id": 5010,
        "name": "rspec 7/30",
        "status": "failed",
        "stage": "test",
        "ref": "main",
        "allow_failure": False,
        "failure_reason": "script_failure",
        "duration": 180.5,
        "queued_duration": 5.0,
        "created_at": "2026-01-15T09:00:05Z",
        "started_at": "2026-01-15T09:01:00Z",
        "finished_at": "2026-01-15T09:04:00Z",
        "pipeline": {"id": 1001, "status": "failed"},
        "web_url": f"{GITLAB}/{PROJECT}/-/jobs/5010",
        "artifacts": [{"file_type": "trace", "size": 2114, "filename": "job.log", "file_format": None}],
        "artifacts_expire_at": None,
        **overrides,
    }


class Body:
    """A log sent in ``size``-byte chunks, counting the bytes GitLab had to send."""

    def __init__(self, data: bytes, size: int = 7, *, length: bool = True) -> None:
        self.data, self.size, self.length, self.sent = data, size, length, 0

    async def chunks(self) -> AsyncIterator[bytes]:
        for i in range(0, len(self.data), self.size):
            piece = self.data[i : i + self.size]
            self.sent += len(piece)
            yield piece

    def response(self, request: httpx.Request) -> httpx.Response:
        headers = {"Content-Type": "text/plain; charset=utf-8"}
        if self.length:
            headers["Content-Length"] = str(len(self.data))
        return httpx.Response(200, headers=headers, content=self.chunks())


def serve(router: respx.MockRouter, job_answer: dict[str, Any], body: Body | None = None) -> Body:
    body = body or Body(RAW)
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job_answer))
    router.get(TRACE_URL).mock(side_effect=body.response)
    return body


async def test_the_job_alone_is_one_request(env: ToolEnv, router: respx.MockRouter) -> None:
    serve(router, job())
    out = ok(await env.call("get_job", {"id": PROJECT, "job_id": 5010}), "get_job")
    assert out == {
        "id": 5010,
        "name": "rspec 7/30",
        "status": "failed",
        "stage": "test",
        "ref": "main",
        "allow_failure": False,
        "failure_reason": "script_failure",
        "duration": 180.5,
        "queued_duration": 5.0,
        "created_at": "2026-01-15T09:00:05Z",
        "started_at": "2026-01-15T09:01:00Z",
        "finished_at": "2026-01-15T09:04:00Z",
        "pipeline_id": 1001,
        "web_url": f"{GITLAB}/{PROJECT}/-/jobs/5010",
    }
    assert [c.request.url.raw_path for c in router.calls] == [b"/api/v4/projects/grp%2Fsub%2Fproj/jobs/5010"]


async def test_a_job_url_names_the_job_and_other_hosts_are_refused(
    env: ToolEnv, router: respx.MockRouter
) -> None:
    serve(router, job())
    out = ok(await env.call("get_job", {"url": f"{GITLAB}/{PROJECT}/-/jobs/5010"}), "get_job")
    assert out["id"] == 5010
    err = error(await env.call("get_job", {"url": f"https://evil.example.org/{PROJECT}/-/jobs/5010"}))
    assert err["reason"] == "bad_request" and "not on this gateway's GitLab" in err["message"]
    err = error(await env.call("get_job", {"url": f"{GITLAB}/{PROJECT}/-/pipelines/5010"}))
    assert "is not a job URL" in err["message"] and "Or pass `project_id` and `job_id`." in err["message"]
    err = error(await env.call("get_job", {"url": f"{GITLAB}/{PROJECT}/-/jobs/5010", "job_id": 5010}))
    assert "not both" in err["message"]
    assert len(router.calls) == 1


LONGEST_LINE = max(len(line) + 1 for line in RAW.split(b"\n"))


@pytest.mark.parametrize("limit", [LONGEST_LINE, 333, 1000, 100_000])
async def test_successive_windows_join_into_exactly_the_cleaned_log(
    env: ToolEnv, router: respx.MockRouter, limit: int
) -> None:
    serve(router, job())
    pieces, offset, calls = [], 0, 0
    while True:
        args = {"id": PROJECT, "job_id": 5010, "include": ["log"], "byte_offset": offset, "byte_limit": limit}
        log = ok(await env.call("get_job", args), "get_job")["log"]
        meta = log["metadata"]
        assert meta["returned"]["start"] == offset and meta["total_bytes"] == len(RAW)
        end = meta["returned"]["end"]
        assert end - offset <= limit
        # every window but one cut inside an over-long line ends on a line boundary
        assert RAW[end - 1 : end] == b"\n" or meta["cap_reason"] == "line_cut" or end == len(RAW)
        pieces.append(log["content"])
        calls += 1
        if log.get("next") is None:
            assert meta["truncated"] is (offset > 0)
            break
        assert log["next"] == {"byte_offset": end, "byte_limit": limit}
        assert f'Call again with {{"byte_offset": {end}}}' in log["system_instruction"]
        offset = end
    assert "".join(pieces) == clean_log(RAW).text
    assert calls == 1 if limit > len(RAW) else calls > 1


async def test_a_line_longer_than_the_window_is_cut_on_a_character(
    env: ToolEnv, router: respx.MockRouter
) -> None:
    raw = ("日本語" * 30 + "\n").encode()
    serve(router, job(), Body(raw))
    seen = []
    offset = 0
    while offset < len(raw):
        args = {"id": PROJECT, "job_id": 5010, "include": ["log"], "byte_offset": offset, "byte_limit": 40}
        log = ok(await env.call("get_job", args), "get_job")["log"]
        assert log["metadata"]["cap_reason"] == ("line_cut" if log.get("next") else None)
        seen.append(log["content"])
        offset = log["metadata"]["returned"]["end"]
    assert "".join(seen) == raw.decode()


async def test_a_window_stops_reading_gitlabs_answer_once_full(
    env: ToolEnv, router: respx.MockRouter
) -> None:
    body = serve(router, job(), Body(RAW * 200, size=64))
    args = {"id": PROJECT, "job_id": 5010, "include": ["log"], "byte_limit": 500}
    log = ok(await env.call("get_job", args), "get_job")["log"]
    assert log["metadata"]["total_bytes"] == len(RAW) * 200
    assert body.sent < 1000


async def test_a_window_inside_a_character_starts_at_the_next_one(
    env: ToolEnv, router: respx.MockRouter
) -> None:
    raw = "ab日本語\nnext\n".encode()
    serve(router, job(), Body(raw))
    args = {"id": PROJECT, "job_id": 5010, "include": ["log"], "byte_offset": 3}
    log = ok(await env.call("get_job", args), "get_job")["log"]
    assert log["content"] == "本語\nnext\n"
    assert log["metadata"]["returned"] == {"start": 5, "end": len(raw)}


async def test_tail_lines_gives_the_last_lines_and_every_section(
    env: ToolEnv, router: respx.MockRouter
) -> None:
    body = serve(router, job(), Body(RAW, length=False))
    args = {"url": f"{GITLAB}/{PROJECT}/-/jobs/5010", "include": ["log"], "tail_lines": 12}
    log = ok(await env.call("get_job", args), "get_job")["log"]
    full = clean_log(RAW)
    assert log["content"] == "".join(line + "\n" for line in full.lines[-12:])
    assert log["content"].splitlines()[-2] == "ERROR: Job failed: exit code 1"
    meta = log["metadata"]
    assert meta["total_lines"] == len(full.lines) and meta["first_line"] == len(full.lines) - 11
    assert meta["total_bytes"] == len(RAW) and meta["returned"]["end"] == len(RAW)
    assert RAW[meta["returned"]["start"] :].decode().count("\n") >= 12
    step = next(s for s in log["sections"] if s["name"] == "step_script")
    assert full.lines[step["first_line"] - 1] == step["header"]
    assert step["duration_seconds"] == 60 and not step["open"]
    assert '"byte_offset": 0' in log["system_instruction"]
    assert body.sent == len(RAW)


async def test_tail_lines_and_a_byte_window_are_one_or_the_other(
    env: ToolEnv, router: respx.MockRouter
) -> None:
    args = {"id": PROJECT, "job_id": 5010, "include": ["log"], "tail_lines": 5, "byte_offset": 10}
    err = error(await env.call("get_job", args))
    assert err["reason"] == "bad_request" and err["invalid_arguments"] == ["tail_lines", "byte_offset"]
    err = error(await env.call("get_job", {"id": PROJECT, "job_id": 5010, "tail_lines": 5}))
    assert 'add include: ["log"]' in err["message"]
    assert not router.calls


async def test_a_running_jobs_unfinished_line_waits_for_the_next_read(
    env: ToolEnv, router: respx.MockRouter
) -> None:
    raw = b"spec 001 ok\nspec 002 ok\nspec 00"
    serve(router, job(status="running", failure_reason=None, finished_at=None), Body(raw, length=False))
    log = ok(await env.call("get_job", {"id": PROJECT, "job_id": 5010, "include": ["log"]}), "get_job")["log"]
    assert log["content"] == "spec 001 ok\nspec 002 ok\n"
    assert log["next"]["byte_offset"] == 24
    assert "still being written" in log["system_instruction"]


async def test_a_log_the_token_may_not_read_is_not_a_missing_job(
    env: ToolEnv, router: respx.MockRouter
) -> None:
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job()))
    router.get(TRACE_URL).mock(return_value=httpx.Response(403, json={"message": "403 Forbidden"}))
    err = error(await env.call("get_job", {"id": PROJECT, "job_id": 5010, "include": ["log"]}))
    assert err["reason"] == "unauthorized" and err["kind"] == "log_forbidden"
    assert "may read the job but not its log" in err["message"]


async def test_a_missing_job_and_a_missing_project_say_which(env: ToolEnv, router: respx.MockRouter) -> None:
    router.get(JOB_URL).mock(return_value=httpx.Response(404, json={"message": "404 Not found"}))
    err = error(await env.call("get_job", {"id": PROJECT, "job_id": 5010, "include": ["log"]}))
    assert err["reason"] == "not_found" and err["message"].startswith("Job 5010 not found in project")
    router.get(f"{API}/projects/grp%2Fnope/jobs/5010").mock(
        return_value=httpx.Response(404, json={"message": "404 Project Not Found"})
    )
    err = error(await env.call("get_job", {"id": "grp/nope", "job_id": 5010}))
    assert err["message"] == (
        "Project 'grp/nope' not found or inaccessible. Check the project ID or full path (for example "
        "`group/subgroup/project`) and that your GitLab token can read the project."
    )
    anonymous = error(await env.call("get_job", {"id": "grp/nope", "job_id": 5010}, credential=ANONYMOUS))
    assert anonymous["message"].endswith(ANONYMOUS_READS)  # it sees public projects only
    router.get(JOB_URL).mock(return_value=httpx.Response(404, json={"message": "404 Not found"}))
    anonymous = error(await env.call("get_job", {"id": PROJECT, "job_id": 5010}, credential=ANONYMOUS))
    assert anonymous["message"].endswith(ANONYMOUS_READS)


async def test_artifacts_list_what_the_job_kept(env: ToolEnv, router: respx.MockRouter) -> None:
    serve(
        router,
        job(
            artifacts=[
                {"file_type": "archive", "size": 4096, "filename": "artifacts.zip", "file_format": "zip"},
                {"file_type": "junit", "size": 300, "filename": "junit.xml.gz", "file_format": "gzip"},
            ],
            artifacts_expire_at="2020-01-01T00:00:00.000Z",
        ),
    )
    tree = [{"name": "junit.xml", "path": "junit.xml", "type": "file", "size": 1200, "mode": "100644"}]
    router.get(url__startswith=f"{JOB_URL}/artifacts/tree").mock(return_value=httpx.Response(200, json=tree))
    args = {"id": PROJECT, "job_id": 5010, "include": ["artifacts", "log"], "tail_lines": 1}
    out = ok(await env.call("get_job", args), "get_job")
    assert out["artifact_files"]["entries"] == [{"path": "junit.xml", "type": "file", "size": 1200}]
    assert out["artifacts"][0] == {
        "name": "artifacts.zip",
        "file_type": "archive",
        "file_format": "zip",
        "size": 4096,
        "expire_at": "2020-01-01T00:00:00.000Z",
        "expired": True,
    }
    assert out["log"]["content"] == "\n"  # the runner's last line: a colour reset


async def test_a_sub_path_gitlab_serves_job_urls(make_settings: Callable[..., Settings]) -> None:
    base = "https://example.com/gitlab"
    with respx.mock(assert_all_mocked=True) as mocked:
        mocked.get(f"{base}/api/v4/projects/grp%2Fsub%2Fproj/jobs/7").mock(
            return_value=httpx.Response(200, json=job(id=7))
        )
        async with httpx.AsyncClient() as http:
            env = ToolEnv(make_settings(gitlab={"url": base}), http)
            out = ok(await env.call("get_job", {"url": f"{base}/{PROJECT}/-/jobs/7/"}), "get_job")
    assert out["id"] == 7


def test_the_runner_log_fixture_has_what_the_cleaner_handles() -> None:
    raw = runner_log(["x\n"], failed=False)
    assert "\r" in raw and "collapsed=true" in raw and "\x1b[" in raw


async def test_a_log_gitlab_fails_to_send_is_asked_again(env: ToolEnv, router: respx.MockRouter) -> None:
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job()))
    answers = iter([httpx.Response(503, text="busy")])

    def trace(request: httpx.Request) -> httpx.Response:
        return next(answers, None) or Body(RAW).response(request)

    router.get(TRACE_URL).mock(side_effect=trace)
    args = {"id": PROJECT, "job_id": 5010, "include": ["log"], "tail_lines": 1}
    out = ok(await env.call("get_job", args), "get_job")
    assert out["log"]["metadata"]["total_bytes"] == len(RAW)
    assert len(env.sleeps) == 1  # one backoff between the two attempts
