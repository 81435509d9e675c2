"""``get_duo_session`` (GitLab's ``Query.duoWorkflowWorkflows``), every branch, and ``wait_seconds``.

GitLab is mocked with respx; every request is validated against GitLab's complete schema (see
``test_save_pipeline.GraphQL``). Results are checked as a caller sees them: the human text block,
the metadata object (``structuredContent``), and how many requests GitLab received.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import respx
from jsonschema import Draft202012Validator

from gateway.config import Settings
from gateway.gitlab.credentials import service_credential
from gateway.tools import all_tools, waiting
from gateway.tools.caller import Caller
from gateway.tools.context import CallInfo, ToolContext
from gateway.tools.duo import get_duo_session as duo_sessions
from gateway.tools.registry import Registry
from tests.unit.gitlab.tool_env import ToolEnv
from tests.unit.tools.poll_pauses import PollPauses
from tests.unit.tools.test_save_pipeline import GITLAB, NOT_AVAILABLE, GraphQL

PROJECT_WEB = f"{GITLAB}/grp/sub/proj"
SESSION_URL = f"{PROJECT_WEB}/-/automate/agent-sessions/42"


def msg(content: str, role: str | None = None, message_type: str = "agent") -> dict[str, Any]:
    return {"content": content, "role": role, "messageType": message_type}


def workflow(
    status: str,
    *,
    last: dict[str, Any] | None = None,
    messages: list[dict[str, Any]] | None = None,
    group: str | None = None,
    web_url: str | None = None,
    project_web: str | None = PROJECT_WEB,
    wid: int = 42,
) -> dict[str, Any]:
    node = {
        "id": f"gid://gitlab/Ai::DuoWorkflows::Workflow/{wid}",
        "status": status.upper() if status in duo_sessions.KNOWN_STATUSES else None,
        "statusName": status,
        "statusGroup": group,
        "webUrl": web_url,
        "project": {"webUrl": project_web} if project_web else None,
        "latestCheckpoint": {"lastDuoMessage": last, "duoMessages": messages or []},
    }
    return {"data": {"duoWorkflowWorkflows": {"nodes": [node]}}}


@pytest.fixture
def gql() -> GraphQL:
    return GraphQL()


@pytest.fixture
def route(gql: GraphQL) -> Iterator[respx.Route]:
    with respx.mock(assert_all_mocked=True, assert_all_called=False) as router:
        yield router.post(f"{GITLAB}/api/graphql").mock(side_effect=gql)


@pytest.fixture
async def env(make_settings: Callable[..., Settings], route: respx.Route) -> Any:
    async with httpx.AsyncClient() as http:
        yield ToolEnv(make_settings(), http)


def result(res: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(human text, metadata) of a success; the metadata is also the JSON text block and fits outputSchema."""
    assert not res.get("isError"), res
    assert [c["type"] for c in res["content"]] == ["text", "text"]
    meta: dict[str, Any] = res["structuredContent"]
    assert json.loads(res["content"][1]["text"]) == meta
    schema = next(t for t in all_tools() if t.name == "get_duo_session").output_schema()
    assert schema is not None
    Draft202012Validator(schema).validate(meta)
    text: str = res["content"][0]["text"]
    # The agent's last message is in structuredContent too (test_the_answer_is_in_structured_content_too);
    # the tests below compare the rest.
    answer = meta.pop("answer", None)
    assert answer is None or isinstance(answer, str)
    return text, meta


# -- declaration ----------------------------------------------------------------------------------


def test_declared_read_only_long_running_with_a_hidden_alias() -> None:
    tool = next(t for t in all_tools() if t.name == "get_duo_session")
    mcp = tool.to_mcp()
    assert tool.toolset == "duo_agent_platform"
    assert tool.long_running is True
    assert mcp["annotations"]["readOnlyHint"] is True
    assert mcp["inputSchema"]["required"] == ["workflow_id"]
    assert mcp["inputSchema"]["properties"]["wait_seconds"] | {"description": ""} == {
        "type": "integer",
        "minimum": 0,
        "maximum": 300,
        "default": 0,
        "description": "",
    }
    registry = Registry(all_tools())
    assert registry.resolve("get_duo_workflow_status") is tool
    assert "get_duo_workflow_status" not in [t.name for t in registry.listed]


async def test_alias_is_callable(env: ToolEnv, gql: GraphQL) -> None:
    gql.on("GetDuoSession", workflow("finished", last=msg("Done.", "assistant")))
    text, meta = result(await env.call("get_duo_workflow_status", {"workflow_id": 42}))
    assert text == "Done." and meta["status"] == "finished"


# -- one read per branch --------------------------------------------------------------------------


async def test_one_request_with_the_workflow_global_id(
    env: ToolEnv, gql: GraphQL, route: respx.Route
) -> None:
    gql.on("GetDuoSession", workflow("finished", last=msg("Done.", "assistant")))
    await env.call("get_duo_session", {"workflow_id": 42})
    assert route.call_count == 1
    assert gql.variables("GetDuoSession") == [{"workflowId": "gid://gitlab/Ai::DuoWorkflows::Workflow/42"}]


async def test_running_truncates_the_latest_agent_update_to_500_characters(
    env: ToolEnv, gql: GraphQL
) -> None:
    update = "Reading the failing job log. " + "x" * 600
    gql.on("GetDuoSession", workflow("running", last=msg(update)))
    text, meta = result(await env.call("get_duo_session", {"workflow_id": 42}))
    truncated = update[:497] + "..."
    assert len(truncated) == 500
    assert text == f"Status: running. Latest agent update: {truncated}. Poll again in 30 seconds."
    assert meta == {"workflow_id": 42, "status": "running", "web_url": SESSION_URL, "poll_after_seconds": 30}


async def test_running_with_a_short_update_keeps_it_whole(env: ToolEnv, gql: GraphQL) -> None:
    gql.on("GetDuoSession", workflow("running", messages=[msg("Planning", "assistant", "agent")]))
    text, _ = result(await env.call("get_duo_session", {"workflow_id": 42}))
    assert text == "Status: running. Latest agent update: Planning. Poll again in 30 seconds."


async def test_running_without_agent_messages(env: ToolEnv, gql: GraphQL) -> None:
    gql.on("GetDuoSession", workflow("running", last=msg("Fix CI", "user", "user")))
    text, meta = result(await env.call("get_duo_session", {"workflow_id": 42}))
    assert text == "Status: running. Poll again in 30 seconds."
    assert meta["poll_after_seconds"] == 30


async def test_created_is_polled_like_running(env: ToolEnv, gql: GraphQL) -> None:
    gql.on("GetDuoSession", workflow("created"))
    text, meta = result(await env.call("get_duo_session", {"workflow_id": 42}))
    assert text == "Status: created. Poll again in 30 seconds."
    assert meta == {"workflow_id": 42, "status": "created", "web_url": SESSION_URL, "poll_after_seconds": 30}


async def test_finished_returns_the_last_agent_answer(env: ToolEnv, gql: GraphQL) -> None:
    answer = "The job failed because `npm ci` needs a lock file. I pushed a fix in !12."
    gql.on("GetDuoSession", workflow("finished", last=msg(answer, "assistant", "agent")))
    text, meta = result(await env.call("get_duo_session", {"workflow_id": 42}))
    assert text == answer
    assert meta == {"workflow_id": 42, "status": "finished", "web_url": SESSION_URL}


async def test_answer_skips_user_and_tool_messages_newest_first(env: ToolEnv, gql: GraphQL) -> None:
    messages = [
        msg("first agent reply", None, "agent"),
        msg("a question", "user", "user"),
        msg("the final agent answer", "assistant", "agent"),
        msg("read_file: ok", None, "tool"),
        msg("   ", None, "agent"),
        msg("thanks", "user", "user"),
    ]
    gql.on("GetDuoSession", workflow("finished", last=messages[-1], messages=messages))
    text, _ = result(await env.call("get_duo_session", {"workflow_id": 42}))
    assert text == "the final agent answer"


async def test_answer_by_role_assistant_in_chat_sessions(env: ToolEnv, gql: GraphQL) -> None:
    messages = [msg("chat answer", "assistant", "request"), msg("tool output", "tool", "tool")]
    gql.on("GetDuoSession", workflow("finished", last=messages[-1], messages=messages))
    text, _ = result(await env.call("get_duo_session", {"workflow_id": 42}))
    assert text == "chat answer"


async def test_finished_without_an_agent_answer(env: ToolEnv, gql: GraphQL) -> None:
    gql.on(
        "GetDuoSession",
        workflow("finished", last=msg("run tests", "user", "user"), messages=[msg("ok", "tool", "tool")]),
    )
    text, _ = result(await env.call("get_duo_session", {"workflow_id": 42}))
    assert text == "Session finished, but no final answer was produced."


async def test_input_required_is_a_complete_turn_with_the_answer(env: ToolEnv, gql: GraphQL) -> None:
    gql.on("GetDuoSession", workflow("input_required", last=msg("Which branch should I use?", "assistant")))
    text, meta = result(await env.call("get_duo_session", {"workflow_id": 42}))
    assert text == "Which branch should I use?"
    assert meta == {
        "workflow_id": 42,
        "status": "input required",
        "turn_complete": True,
        "web_url": SESSION_URL,
    }


async def test_input_required_without_an_answer(env: ToolEnv, gql: GraphQL) -> None:
    gql.on("GetDuoSession", workflow("input_required"))
    text, _ = result(await env.call("get_duo_session", {"workflow_id": 42}))
    assert text == "The last turn completed, but no agent answer was found."


async def test_tool_call_approval_prepends_the_latest_agent_message(env: ToolEnv, gql: GraphQL) -> None:
    gql.on("GetDuoSession", workflow("tool_call_approval_required", last=msg("I want to run `make test`.")))
    text, meta = result(await env.call("get_duo_session", {"workflow_id": 42}))
    assert text == (
        "I want to run `make test`.\n\n"
        "Session is paused: tool_call_approval_required. Polling will NOT move it forward. To proceed, call "
        'approve_duo_agent_action with workflow_id=42 and decision="approve" (or "reject"). '
        "(approve_duo_agent_action is a tool of GitLab's built-in MCP server; this gateway does not "
        "serve it.)"
    )
    assert meta == {
        "workflow_id": 42,
        "status": "tool_call_approval_required",
        "awaiting_approval": True,
        "web_url": SESSION_URL,
    }


async def test_plan_approval_without_a_message(env: ToolEnv, gql: GraphQL) -> None:
    gql.on("GetDuoSession", workflow("plan_approval_required", wid=7))
    text, meta = result(await env.call("get_duo_session", {"workflow_id": 7}))
    assert text == (
        "Session is paused: plan_approval_required. Polling will NOT move it forward. To proceed, call "
        'approve_duo_agent_action with workflow_id=7 and decision="approve" (or "reject"). '
        "(approve_duo_agent_action is a tool of GitLab's built-in MCP server; this gateway does not "
        "serve it.)"
    )
    assert meta["awaiting_approval"] is True and meta["status"] == "plan_approval_required"
    assert meta["web_url"] == f"{PROJECT_WEB}/-/automate/agent-sessions/7"


async def test_paused(env: ToolEnv, gql: GraphQL) -> None:
    gql.on("GetDuoSession", workflow("paused"))
    text, meta = result(await env.call("get_duo_session", {"workflow_id": 42}))
    assert (
        text == "Session is paused. Polling will NOT move it forward: resume it from "
        f"{SESSION_URL}, then poll again."
    )
    assert meta == {"workflow_id": 42, "status": "paused", "paused": True, "web_url": SESSION_URL}


@pytest.mark.parametrize("status", ["failed", "stopped"])
async def test_other_terminal_states_point_to_the_web_url(env: ToolEnv, gql: GraphQL, status: str) -> None:
    gql.on("GetDuoSession", workflow(status, last=msg("partial work", "assistant")))
    text, meta = result(await env.call("get_duo_session", {"workflow_id": 42}))
    assert text == f"Session {status}. See {SESSION_URL} for details."
    assert meta == {"workflow_id": 42, "status": status, "web_url": SESSION_URL}


async def test_the_workflows_own_web_url_wins(env: ToolEnv, gql: GraphQL) -> None:
    own = f"{GITLAB}/grp/sub/proj/-/automate/agent-sessions/42?from=mcp"
    gql.on("GetDuoSession", workflow("failed", web_url=own))
    text, meta = result(await env.call("get_duo_session", {"workflow_id": 42}))
    assert meta["web_url"] == own
    assert text == f"Session failed. See {own} for details."


async def test_no_web_url_when_gitlab_gives_neither(env: ToolEnv, gql: GraphQL) -> None:
    gql.on("GetDuoSession", workflow("failed", project_web=None))
    text, meta = result(await env.call("get_duo_session", {"workflow_id": 42}))
    assert meta["web_url"] is None
    assert text == "Session failed. See the session in GitLab for details."


@pytest.mark.parametrize(
    ("group", "text"),
    [
        ("COMPLETED", "all done"),
        ("FAILED", f"Session exploded. See {SESSION_URL} for details."),
        ("CANCELED", f"Session exploded. See {SESSION_URL} for details."),
        (
            "AWAITING_INPUT",
            f"Session is waiting: exploded. Polling will NOT move it forward. See {SESSION_URL} for details.",
        ),
        ("ACTIVE", "Status: exploded. Latest agent update: all done. Poll again in 30 seconds."),
        (None, "Status: exploded. Latest agent update: all done. Poll again in 30 seconds."),
    ],
)
async def test_unknown_status_is_classified_by_its_group(
    env: ToolEnv, gql: GraphQL, group: str | None, text: str
) -> None:
    gql.on("GetDuoSession", workflow("exploded", group=group, last=msg("all done", "assistant")))
    got, meta = result(await env.call("get_duo_session", {"workflow_id": 42}))
    assert got == text
    assert meta["status"] == "exploded"


# -- not found ------------------------------------------------------------------------------------

NOT_FOUND = (
    "Duo session 42 was not found, or you do not have access to it. Check the workflow_id: the number "
    "ending the session's URL in GitLab (/-/automate/agent-sessions/<id>), or the ID that trigger_duo_flow "
    "or ask_duo_agent (tools of GitLab's built-in MCP server) returned."
)


@pytest.mark.parametrize(
    "answer",
    [
        NOT_AVAILABLE,
        {"data": {"duoWorkflowWorkflows": {"nodes": []}}},
        {"data": {"duoWorkflowWorkflows": None}},
    ],
    ids=["graphql-error", "filtered-out", "null-connection"],
)
async def test_missing_or_unreadable_is_one_not_found_message(
    env: ToolEnv, gql: GraphQL, answer: Any
) -> None:
    gql.on("GetDuoSession", answer)
    res = await env.call("get_duo_session", {"workflow_id": 42})
    assert res["isError"] is True
    # request_id: the id of this call on the gateway's log lines (every tool error names it).
    assert res["structuredContent"] == {
        "error": {"reason": "not_found", "message": NOT_FOUND, "request_id": "req-test-1"}
    }
    assert res["content"][0]["text"] == NOT_FOUND


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ({}, "`workflow_id` is required"),
        ({"workflow_id": 0}, "`workflow_id`: Input should be greater than or equal to 1"),
        ({"workflow_id": True}, "`workflow_id`: must be an integer, not true/false"),
        (
            {"workflow_id": 42, "wait_seconds": 301},
            "`wait_seconds`: Input should be less than or equal to 300",
        ),
        (
            {"workflow_id": 42, "wait_seconds": -1},
            "`wait_seconds`: Input should be greater than or equal to 0",
        ),
        ({"workflow_id": 42, "project_id": 1}, "unknown argument `project_id`"),
    ],
)
async def test_invalid_arguments_send_nothing(
    env: ToolEnv, route: respx.Route, arguments: dict[str, Any], fragment: str
) -> None:
    res = await env.call("get_duo_session", arguments)
    assert res["isError"] is True
    assert res["structuredContent"]["error"]["reason"] == "bad_request"
    assert fragment in res["content"][0]["text"]
    assert route.call_count == 0


# -- wait_seconds -------------------------------------------------------------------------------------


class Progress:
    """Records ``notifications/progress`` the tool sends."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, float | None, str | None]] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.sent.append((progress, total, message))


def context(env: ToolEnv, progress: Progress) -> ToolContext:
    token = env.settings.gitlab.token
    caller = Caller(agent_id=None, credential=service_credential(token.get_secret_value() if token else None))
    return ToolContext(
        env.services,
        CallInfo(request_id="req-wait", caller=caller, progress=progress, has_progress_token=True),
    )


async def call_with_progress(env: ToolEnv, arguments: dict[str, Any], progress: Progress) -> dict[str, Any]:
    tool = env.registry.resolve("get_duo_session")
    assert tool is not None
    return (await env.registry.call(tool, context(env, progress), arguments)).to_mcp()


@pytest.fixture
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(duo_sessions, "POLL_INTERVAL_SECONDS", 0.01)


@pytest.mark.usefixtures("fast_polls")
async def test_wait_returns_as_soon_as_the_session_leaves_running(
    env: ToolEnv, gql: GraphQL, route: respx.Route
) -> None:
    gql.on(
        "GetDuoSession",
        workflow("running", last=msg("Reading logs")),
        workflow("running", last=msg("Writing the fix")),
        workflow("finished", last=msg("Fixed in !12.", "assistant")),
        workflow("finished", last=msg("never read", "assistant")),
    )
    progress = Progress()
    text, meta = result(await call_with_progress(env, {"workflow_id": 42, "wait_seconds": 60}, progress))
    assert text == "Fixed in !12."
    assert meta == {"workflow_id": 42, "status": "finished", "web_url": SESSION_URL}
    assert route.call_count == 3
    assert len(progress.sent) == 2
    (p1, total1, m1), (p2, total2, m2) = progress.sent
    assert 0 < p1 < p2 and total1 == total2 == 60.0
    assert m1 is not None and m1.startswith("Session 42 is still running (0 s of 60 s).")
    assert m1.endswith("Latest agent update: Reading logs")
    assert m2 is not None and m2.endswith("Latest agent update: Writing the fix")


@pytest.mark.usefixtures("fast_polls")
async def test_wait_returns_at_once_for_an_approval_state(
    env: ToolEnv, gql: GraphQL, route: respx.Route
) -> None:
    gql.on("GetDuoSession", workflow("tool_call_approval_required"))
    progress = Progress()
    _, meta = result(await call_with_progress(env, {"workflow_id": 42, "wait_seconds": 300}, progress))
    assert meta["awaiting_approval"] is True
    assert route.call_count == 1 and progress.sent == []


async def test_wait_gives_up_when_the_time_is_up(
    env: ToolEnv, gql: GraphQL, route: respx.Route, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(duo_sessions, "POLL_INTERVAL_SECONDS", 0.3)
    gql.on("GetDuoSession", *[workflow("running", last=msg("still going"))] * 10)
    recorded = PollPauses()
    monkeypatch.setattr(waiting, "asyncio", recorded)
    loop = asyncio.get_running_loop()
    started = loop.time()
    text, meta = result(await call_with_progress(env, {"workflow_id": 42, "wait_seconds": 1}, Progress()))
    elapsed = loop.time() - started
    # Never before the time is up. How far after depends on how late the loop runs and how slow
    # each read is: a process given a third of a core took 16 s, so only a wait that went on
    # regardless of its deadline fails here.
    assert 1.0 <= elapsed < 30
    assert meta["status"] == "running" and meta["poll_after_seconds"] == 30
    assert text == "Status: running. Latest agent update: still going. Poll again in 30 seconds."
    # Every 0.3 s, the schedule the poller asks for (not the wall clock's gaps), one read a pause.
    assert recorded.pauses and all(p == pytest.approx(0.3) for p in recorded.pauses)
    assert 2 <= route.call_count <= len(recorded.pauses) + 1


async def test_no_wait_reads_once_even_while_running(env: ToolEnv, gql: GraphQL, route: respx.Route) -> None:
    gql.on("GetDuoSession", workflow("running"), workflow("running"))
    progress = Progress()
    result(await call_with_progress(env, {"workflow_id": 42}, progress))
    assert route.call_count == 1 and progress.sent == []


async def test_cancelling_the_call_stops_polling_at_once(
    env: ToolEnv, gql: GraphQL, route: respx.Route, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(duo_sessions, "POLL_INTERVAL_SECONDS", 0.05)
    gql.on("GetDuoSession", *[workflow("running")] * 100)
    task = asyncio.create_task(call_with_progress(env, {"workflow_id": 42, "wait_seconds": 300}, Progress()))
    async with asyncio.timeout(5):  # the second poll is due after 0.05 s
        while route.call_count < 2 and not task.done():
            await asyncio.sleep(0.01)
    assert not task.done(), f"the wait ended before its second poll: {task.result()!r}"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=0.5)
    polled = route.call_count
    await asyncio.sleep(0.2)
    assert route.call_count == polled


@pytest.mark.usefixtures("fast_polls")
async def test_wait_ends_with_not_found_if_the_session_disappears(env: ToolEnv, gql: GraphQL) -> None:
    gql.on("GetDuoSession", workflow("running"), {"data": {"duoWorkflowWorkflows": {"nodes": []}}})
    res = await call_with_progress(env, {"workflow_id": 42, "wait_seconds": 30}, Progress())
    assert res["structuredContent"]["error"] == {
        "reason": "not_found",
        "message": NOT_FOUND,
        "request_id": "req-wait",
    }


async def test_the_answer_is_in_structured_content_too(env: ToolEnv, gql: GraphQL) -> None:
    answer = "The pipeline failed because `rspec` ran out of memory; raise the job's memory limit."
    gql.on("GetDuoSession", workflow("finished", last=msg(answer, "assistant", "agent")))
    res = await env.call("get_duo_session", {"workflow_id": 42})
    assert res["structuredContent"]["answer"] == answer
    assert res["content"][0]["text"] == answer


async def test_no_answer_yet_means_no_answer_field(env: ToolEnv, gql: GraphQL) -> None:
    gql.on("GetDuoSession", workflow("running"))
    res = await env.call("get_duo_session", {"workflow_id": 42})
    assert "answer" not in res["structuredContent"]
