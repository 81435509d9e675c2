"""``get_duo_session`` end to end: the gateway process against the GitLab stand-in, through the
official ``mcp`` SDK client.

The stand-in validates each ``duoWorkflowWorkflows`` query against GitLab's complete schema and
serves workflows 501-520 (``tests/standin/dataset.py``); its control API changes a workflow
between two calls, or after a delay, so a session can be walked through its states.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.harness import GatewayProcess, mcp_client
from tests.standin import dataset as ds
from tests.standin.fixtures import Standin

pytestmark = pytest.mark.e2e

W = ds.WORKFLOWS


@pytest.fixture(scope="module")
def gateway(standin: Standin, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """One gateway for the module (service mode, alice's token), against the session's stand-in."""
    proc = GatewayProcess(env=standin.env(), state_dir=tmp_path_factory.mktemp("gateway") / "state").start()
    yield proc
    proc.stop()


def session_url(standin: Standin, workflow_id: int) -> str:
    return f"{standin.url}/{ds.PROJECT_PATH}/-/automate/agent-sessions/{workflow_id}"


def read(result: Any) -> tuple[str, dict[str, Any]]:
    """(human text, metadata); the metadata is structuredContent and the second text block."""
    assert not result.is_error, result.content
    assert len(result.content) == 2
    assert json.loads(result.content[1].text) == result.structured_content
    return result.content[0].text, dict(result.structured_content)


async def test_listed_read_only_and_alias_hidden(gateway: GatewayProcess, fresh_standin: Standin) -> None:
    async with mcp_client(gateway.mcp_url) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert "get_duo_workflow_status" not in tools
        tool = tools["get_duo_session"]
        assert tool.annotations is not None and tool.annotations.read_only_hint is True
        assert tool.input_schema["required"] == ["workflow_id"]
        text, meta = read(await client.call_tool("get_duo_workflow_status", {"workflow_id": W["finished"]}))
    assert text == ds.FINAL_ANSWER
    assert meta == {
        "workflow_id": W["finished"],
        "status": "finished",
        "web_url": session_url(fresh_standin, 502),
        "answer": ds.FINAL_ANSWER,
    }


async def test_running_approval_running_finished(gateway: GatewayProcess, fresh_standin: Standin) -> None:
    wid = W["running"]
    control = fresh_standin.control
    url = session_url(fresh_standin, wid)
    async with mcp_client(gateway.mcp_url) as client:

        async def poll() -> tuple[str, dict[str, Any]]:
            text, meta = read(await client.call_tool("get_duo_session", {"workflow_id": wid}))
            # structuredContent.answer, the agent's last message in full, is checked where it is
            # the whole answer (the finished step below, and the tests above).
            answer = meta.pop("answer", None)
            assert answer is None or isinstance(answer, str)
            return text, meta | ({"answer": answer} if meta["status"] == "finished" else {})

        text, meta = await poll()
        assert text == (
            f"Status: running. Latest agent update: {ds.LONG_PROGRESS[:497]}.... Poll again in 30 seconds."
        )
        assert meta == {"workflow_id": wid, "status": "running", "web_url": url, "poll_after_seconds": 30}

        control.update_workflow(
            wid,
            status="tool_call_approval_required",
            append_messages=[
                "The fixture needs a fresh database; I will run the test suite to confirm.",
                {"content": "Run `make test`?", "message_type": "request"},
            ],
        )
        text, meta = await poll()
        assert text == (
            "The fixture needs a fresh database; I will run the test suite to confirm.\n\n"
            "Session is paused: tool_call_approval_required. Polling will NOT move it forward. To proceed, "
            f'call approve_duo_agent_action with workflow_id={wid} and decision="approve" (or "reject"). '
            "(approve_duo_agent_action is a tool of GitLab's built-in MCP server; this gateway does not "
            "serve it.)"
        )
        assert meta == {
            "workflow_id": wid,
            "status": "tool_call_approval_required",
            "awaiting_approval": True,
            "web_url": url,
        }

        control.update_workflow(
            wid,
            status="running",
            append_messages=[
                {"content": "approved", "message_type": "user", "role": "user"},
                {"content": "make test: 30 examples, 0 failures", "message_type": "tool"},
            ],
        )
        text, meta = await poll()
        assert text == (
            "Status: running. Latest agent update: The fixture needs a fresh database; I will run the test "
            "suite to confirm.. Poll again in 30 seconds."
        )
        assert meta["status"] == "running" and meta["poll_after_seconds"] == 30

        control.update_workflow(
            wid, status="finished", append_messages=["All 30 examples pass; fixed in !18."]
        )
        text, meta = await poll()
        assert text == "All 30 examples pass; fixed in !18."
        assert meta == {"workflow_id": wid, "status": "finished", "web_url": url, "answer": text}
    assert control.graphql_requests(field="duoWorkflowWorkflows") == 4


@pytest.mark.parametrize(
    ("name", "text", "extra"),
    [
        ("input_required", ds.CHAT_ANSWER, {"status": "input required", "turn_complete": True}),
        ("finished_no_answer", "Session finished, but no final answer was produced.", {"status": "finished"}),
        ("finished_last_is_tool", ds.LAST_AGENT_ANSWER_511, {"status": "finished"}),
        ("failed", "Session failed. See {url} for details.", {"status": "failed"}),
        ("stopped", "Session stopped. See {url} for details.", {"status": "stopped"}),
        (
            "paused",
            "Session is paused. Polling will NOT move it forward: resume it from {url}, then poll again.",
            {"status": "paused", "paused": True},
        ),
        (
            "created",
            "Status: created. Poll again in 30 seconds.",
            {"status": "created", "poll_after_seconds": 30},
        ),
    ],
)
async def test_each_state_as_the_seed_shows_it(
    gateway: GatewayProcess, fresh_standin: Standin, name: str, text: str, extra: dict[str, Any]
) -> None:
    wid = W[name]
    url = session_url(fresh_standin, wid)
    async with mcp_client(gateway.mcp_url) as client:
        got_text, meta = read(await client.call_tool("get_duo_session", {"workflow_id": wid}))
    assert got_text == text.format(url=url)
    answer = meta.pop("answer", None)  # the agent's last message, when it wrote one
    assert meta == {"workflow_id": wid, "web_url": url, **extra}
    if name in ("input_required", "finished_last_is_tool"):
        assert answer == got_text


async def test_plan_approval(gateway: GatewayProcess, fresh_standin: Standin) -> None:
    wid = W["plan_approval_required"]
    async with mcp_client(gateway.mcp_url) as client:
        text, meta = read(await client.call_tool("get_duo_session", {"workflow_id": wid}))
    assert text.endswith(
        "Session is paused: plan_approval_required. Polling will NOT move it forward. To proceed, call "
        f'approve_duo_agent_action with workflow_id={wid} and decision="approve" (or "reject"). '
        "(approve_duo_agent_action is a tool of GitLab's built-in MCP server; this gateway does not "
        "serve it.)"
    )
    assert meta["awaiting_approval"] is True


async def test_missing_and_unreadable_look_the_same(gateway: GatewayProcess, fresh_standin: Standin) -> None:
    async with mcp_client(gateway.mcp_url) as client:
        hidden = await client.call_tool("get_duo_session", {"workflow_id": W["private"]})
        missing = await client.call_tool("get_duo_session", {"workflow_id": 999_999})
    for result, wid in ((hidden, W["private"]), (missing, 999_999)):
        assert result.is_error
        assert result.structured_content is not None
        error = dict(result.structured_content["error"])
        error.pop("request_id", None)  # differs per call; the log lines carry it
        assert {"error": error} == {
            "error": {
                "reason": "not_found",
                "message": f"Duo session {wid} was not found, or you do not have access to it. Check the "
                "workflow_id: the number ending the session's URL in GitLab "
                "(/-/automate/agent-sessions/<id>), or the ID that trigger_duo_flow or ask_duo_agent (tools "
                "of GitLab's built-in MCP server) returned.",
            }
        }


async def test_wait_returns_early_when_the_session_finishes(
    gateway: GatewayProcess, fresh_standin: Standin
) -> None:
    wid = W["running"]
    fresh_standin.control.update_workflow(
        wid, status="finished", append_messages=["Fixed in !19."], after_seconds=1.0
    )
    updates: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append((progress, total, message))

    started = time.monotonic()
    async with mcp_client(gateway.mcp_url) as client:
        result = await client.call_tool(
            "get_duo_session", {"workflow_id": wid, "wait_seconds": 120}, progress_callback=on_progress
        )
    elapsed = time.monotonic() - started
    text, meta = read(result)
    assert text == "Fixed in !19."
    assert meta["status"] == "finished"
    assert elapsed < 15, f"waited {elapsed:.1f}s although the session finished after 1s"
    assert fresh_standin.control.graphql_requests(field="duoWorkflowWorkflows") >= 2
    assert updates, "no progress notification while waiting"
    assert updates[0][1] == 120
    assert updates[0][2] is not None and updates[0][2].startswith(f"Session {wid} is still running")
