"""``get_pipeline``'s ``wait_seconds``: polls until a final status or the time is up, shares polls
between callers, reports progress, stops when cancelled.

GitLab is the fake of ``tests/unit/gitlab/fake_gitlab.py`` (every document validated against
GitLab's schema); the pipeline's status follows a script, one status per read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import respx

from gateway.config import Settings
from gateway.gitlab.credentials import service_credential
from gateway.tools import waiting
from gateway.tools.caller import Caller
from gateway.tools.ci import pipeline_wait
from gateway.tools.context import CallInfo, ToolContext
from tests.unit.gitlab.fake_gitlab import GRAPHQL_URL, PIPELINE_ID, PROJECT_PATH, FakeGitLab
from tests.unit.gitlab.tool_env import ToolEnv, error, ok
from tests.unit.tools.poll_pauses import PollPauses


@pytest.fixture
def fake() -> FakeGitLab:
    return FakeGitLab()


@pytest.fixture
def gitlab(fake: FakeGitLab) -> Iterator[respx.Route]:
    with respx.mock(assert_all_mocked=True, assert_all_called=False) as router:
        yield router.post(GRAPHQL_URL).mock(side_effect=fake)


@pytest.fixture
async def env(make_settings: Callable[..., Settings], gitlab: respx.Route) -> Any:
    async with httpx.AsyncClient() as http:
        yield ToolEnv(make_settings(), http)


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline_wait, "POLL_INTERVAL_SECONDS", 0.02)
    monkeypatch.setattr(pipeline_wait, "MAX_POLL_INTERVAL_SECONDS", 0.05)


def script(fake: FakeGitLab, *statuses: str) -> None:
    """The pipeline answers ``statuses`` in turn, one per read, the last one repeated."""
    pipeline = fake.projects[PROJECT_PATH]["pipelines_by_id"][f"gid://gitlab/Ci::Pipeline/{PIPELINE_ID}"]
    queue = list(statuses)
    pipeline["status"] = lambda _info: queue.pop(0) if len(queue) > 1 else queue[0]


Progress = list[tuple[float, float | None, str | None]]


async def call(env: ToolEnv, arguments: dict[str, Any], progress: Progress | None = None) -> dict[str, Any]:
    async def report(value: float, total: float | None, message: str | None) -> None:
        if progress is not None:
            progress.append((value, total, message))

    token = env.settings.gitlab.token
    caller = Caller(agent_id=None, credential=service_credential(token.get_secret_value() if token else None))
    info = CallInfo(request_id="req-wait", caller=caller, progress=report, has_progress_token=True)
    tool = env.registry.resolve("get_pipeline")
    assert tool is not None
    return (await env.registry.call(tool, ToolContext(env.services, info), arguments)).to_mcp()


ARGS = {"id": PROJECT_PATH, "pipeline_id": PIPELINE_ID}


async def test_answers_as_soon_as_the_pipeline_fails(env: ToolEnv, fake: FakeGitLab) -> None:
    script(fake, "RUNNING", "RUNNING", "FAILED")
    progress: Progress = []
    out = ok(await call(env, {**ARGS, "wait_seconds": 60}, progress))
    assert out["status"] == "failed"
    assert out["wait"]["timed_out"] is False
    assert out["wait"]["message"].startswith(f"Pipeline {PIPELINE_ID} is failed (waited ")
    assert len(fake.requests) == 3
    assert [p[1] for p in progress] == [60.0, 60.0]
    assert progress[0][2] is not None and progress[0][2].startswith(f"Pipeline {PIPELINE_ID} is running (")
    assert progress[0][0] < progress[1][0]


async def test_the_facet_is_read_once_after_the_wait(env: ToolEnv, fake: FakeGitLab) -> None:
    script(fake, "RUNNING", "FAILED")
    out = ok(await call(env, {**ARGS, "wait_seconds": 60, "include": ["jobs"], "job_status": "failed"}))
    assert out["status"] == "failed" and len(out["jobs"]) == 3
    assert out["wait"]["timed_out"] is False
    assert [r["variables"]["includeJobs"] for r in fake.requests] == [False, False, True]


async def test_times_out_with_the_current_status(
    env: ToolEnv, fake: FakeGitLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    script(fake, "RUNNING")
    recorded = PollPauses()
    monkeypatch.setattr(waiting, "asyncio", recorded)
    loop = asyncio.get_running_loop()
    started = loop.time()
    out = ok(await call(env, {**ARGS, "wait_seconds": 1}))
    elapsed = loop.time() - started
    # Never before the time is up. How far after depends on how late the loop runs and how slow
    # each read is: a process given a third of a core took 16 s, so only a wait that went on
    # regardless of its deadline fails here.
    assert 1.0 <= elapsed < 30
    assert out["status"] == "running"
    assert out["wait"]["timed_out"] is True
    assert out["wait"]["message"].startswith("Timed out after 1")
    assert out["wait"]["message"].endswith(
        f"pipeline {PIPELINE_ID} is still running. Call again with wait_seconds to keep waiting."
    )
    # 0.02 s growing by half each poll up to 0.05 s (about 20 reads in the second, not 50): the
    # schedule the poller asks for, and one read per pause.
    # How many pauses fit in the second depends on how slow each read is on this machine.
    schedule = [0.02, 0.03, 0.045] + [0.05] * len(recorded.pauses)
    assert recorded.pauses and recorded.pauses == pytest.approx(schedule[: len(recorded.pauses)])
    assert len(fake.requests) <= len(recorded.pauses) + 1


@pytest.mark.parametrize("status", ["SUCCESS", "FAILED", "CANCELED", "SKIPPED", "MANUAL"])
async def test_a_final_status_is_answered_at_once(env: ToolEnv, fake: FakeGitLab, status: str) -> None:
    script(fake, status)
    progress: Progress = []
    out = ok(await call(env, {**ARGS, "wait_seconds": 300}, progress))
    assert out["status"] == status.lower() and out["wait"]["timed_out"] is False
    assert len(fake.requests) == 1 and progress == []
    if status == "MANUAL":
        assert "waiting longer will not change it" in out["wait"]["message"]


@pytest.mark.parametrize("status", ["CREATED", "PENDING", "PREPARING", "WAITING_FOR_RESOURCE", "CANCELING"])
async def test_a_status_on_its_way_is_waited_on(env: ToolEnv, fake: FakeGitLab, status: str) -> None:
    script(fake, status, "SUCCESS")
    out = ok(await call(env, {**ARGS, "wait_seconds": 30}))
    assert out["status"] == "success" and len(fake.requests) == 2


async def test_two_callers_share_each_poll(env: ToolEnv, fake: FakeGitLab) -> None:
    script(fake, "RUNNING", "RUNNING", "RUNNING", "FAILED")
    first, second = await asyncio.gather(
        call(env, {**ARGS, "wait_seconds": 30}), call(env, {**ARGS, "wait_seconds": 30})
    )
    assert ok(first)["status"] == ok(second)["status"] == "failed"
    assert len(fake.requests) == 4


async def test_cancelling_stops_polling_at_once(env: ToolEnv, fake: FakeGitLab) -> None:
    script(fake, "RUNNING")
    task = asyncio.create_task(call(env, {**ARGS, "wait_seconds": 300}))
    async with asyncio.timeout(5):
        while len(fake.requests) < 2:
            await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 0.5)
    polled = len(fake.requests)
    await asyncio.sleep(0.2)
    assert len(fake.requests) == polled
    assert len(env.services.polls) == 0


async def test_a_missing_pipeline_ends_the_wait_with_not_found(env: ToolEnv) -> None:
    err = error(await call(env, {"id": PROJECT_PATH, "pipeline_id": 5, "wait_seconds": 30}))
    assert err["reason"] == "not_found"
    assert err["message"].startswith("Pipeline 5 not found or inaccessible")


@pytest.mark.parametrize("value", [-1, 301, True, "soon"])
async def test_wait_seconds_out_of_range_is_refused(env: ToolEnv, value: Any) -> None:
    err = error(await call(env, {**ARGS, "wait_seconds": value}))
    assert err["reason"] == "bad_request" and err["invalid_arguments"] == ["wait_seconds"]


def test_only_a_call_that_waits_is_long_running() -> None:
    from gateway.tools import all_tools

    tool = next(t for t in all_tools() if t.name == "get_pipeline")
    assert not tool.long_running
    assert tool.runs_long({**ARGS, "wait_seconds": 30})
    assert tool.runs_long({**ARGS, "wait_seconds": "30"})
    assert not tool.runs_long({**ARGS})
    assert not tool.runs_long({**ARGS, "wait_seconds": 0})
    assert not tool.runs_long({**ARGS, "wait_seconds": True})
