"""Bad input: each a clear tool error (reason and text), with nothing changed."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.broker.conftest import Env


async def snapshot(env: Env) -> dict[str, Any]:
    status = await env.status()
    history = await env.ok("pm", "get_message_history", {"limit": 1000})
    plan = await env.ok("pm", "get_phase_plan")
    drop = ("agents", "uptime", "uptimeSeconds")
    return {"status": {k: v for k, v in status.items() if k not in drop}, "history": history, "plan": plan}


@pytest.fixture
async def developing(env: Env) -> Env:
    await env.ok("pm", "start_phase", {"phase": 1, "issues": ["A", "B"]})
    await env.ok("dev", "begin_developing")
    await env.ok("pm", "send_message", {"to": "dev", "subject": "develop", "body": {"issue": "A"}})
    return env


async def test_agent_id_path_traversal(developing: Env) -> None:
    env = developing
    before = await snapshot(env)
    calls: list[tuple[str, dict[str, Any]]] = [
        ("log_activity", {"message": "x"}),
        ("get_pipeline_status", {}),
        ("send_message", {"to": "dev", "subject": "s", "body": {}}),
    ]
    for tool, args in calls:
        err = await env.err("../../etc/passwd", tool, args)
        assert err["reason"] == "unauthorized"
        assert err["message"] == (
            "Agent id '../../etc/passwd' is not one of this broker's agents (pm, dev, reviewer). "
            "Call with one of those ids (header `X-Agent-Id` on loopback, or your agent's client token)."
        )
    err = await env.err("dev", "get_activity_log", {"agent": "../../etc/passwd"})
    assert err["reason"] == "bad_request"
    assert err["message"] == (
        "`agent`: '../../etc/passwd' is not a log of this broker; use one of: pm, dev, reviewer, pipeline."
    )
    if env.broker.logs.files:  # SQLite: the log files beside the database
        assert sorted(p.name for p in (env.state_dir / "logs").iterdir()) == ["pipeline.log"]
    assert await snapshot(env) == before


async def test_no_agent_id(env: Env) -> None:
    err = await env.err(None, "get_pipeline_status")
    assert err["reason"] == "unauthorized"
    assert "carries no agent id" in err["message"] and "X-Agent-Id" in err["message"]
    assert "X-Agent-Id '" not in err["message"]  # nothing was received, so nothing is quoted


@pytest.mark.parametrize(
    ("claimed", "hint"),
    [("qa", ""), ("PM", ": did you mean 'pm'?"), ("Reviewer", ": did you mean 'reviewer'?")],
)
async def test_unknown_agent_header_is_named(developing: Env, claimed: str, hint: str) -> None:
    env = developing
    before = await snapshot(env)
    err = await env.err(None, "send_message", {"to": "dev", "subject": "s", "body": {}}, claimed=claimed)
    assert err == {
        "reason": "unauthorized",
        "message": f"X-Agent-Id {claimed!r} is not one of the configured agents pm, dev, reviewer "
        f"(ids are case-sensitive{hint}). Send the header `X-Agent-Id: <id>` with one of those ids.",
        "agents": ["pm", "dev", "reviewer"],
        "request_id": "test",
    }
    assert await snapshot(env) == before


async def test_unknown_agent_header_path_traversal(developing: Env) -> None:
    env = developing
    before = await snapshot(env)
    for tool, args in [("log_activity", {"message": "x"}), ("get_activity_log", {})]:
        err = await env.err(None, tool, args, claimed="../../etc/passwd")
        assert err["reason"] == "unauthorized"
        assert err["message"].startswith(
            "X-Agent-Id '../../etc/passwd' is not one of the configured agents pm, dev, reviewer "
            "(ids are case-sensitive)."
        )
    if env.broker.logs.files:  # SQLite: the log files beside the database
        assert sorted(p.name for p in (env.state_dir / "logs").iterdir()) == ["pipeline.log"]
    assert await snapshot(env) == before


async def test_accepted_agent_id_wins_over_the_claim(env: Env) -> None:
    """The claim only words a refusal: with an accepted id (a client token's) the call goes through."""
    result = await env.call("dev", "log_activity", {"message": "hi"}, claimed="pm")
    assert not result.is_error
    assert (await env.ok("dev", "get_activity_log", {"agent": "dev"}))["lines"][-1].endswith("[dev] hi")


async def test_send_to_nobody(developing: Env) -> None:
    env = developing
    before = await snapshot(env)
    err = await env.err("pm", "send_message", {"to": "nobody", "subject": "s", "body": {}})
    assert err["reason"] == "bad_request"
    assert (
        err["message"] == "`to`: 'nobody' is not an agent of this broker; send to one of: pm, dev, reviewer. "
        "Nothing was sent."
    )
    assert await snapshot(env) == before


@pytest.mark.parametrize("body", ["text", ["a", "b"], 3, None])
async def test_body_not_an_object(developing: Env, body: Any) -> None:
    env = developing
    before = await snapshot(env)
    err = await env.err("pm", "send_message", {"to": "dev", "subject": "s", "body": body})
    assert err["reason"] == "bad_request"
    assert err["message"].startswith("Invalid arguments for send_message: `body`: ")
    assert err["invalid_arguments"] == ["body"]
    err = await env.err("pm", "reply_message", {"replyTo": "msg-x", "subject": "s", "body": body})
    assert err["invalid_arguments"] == ["body"]
    assert await snapshot(env) == before


@pytest.mark.parametrize(
    ("timeout", "text"),
    [
        (
            -1,
            "Invalid arguments for wait_for_message: `wait_seconds`: "
            "Input should be greater than or equal to 0",
        ),
        (
            10**9,
            "`wait_seconds`: 1e+09 s is longer than the longest wait this gateway allows (3600 s, "
            "broker.max_wait_seconds). Pass at most 3600 and call wait_for_message again when it times out.",
        ),
    ],
)
async def test_timeout_out_of_range(developing: Env, timeout: int, text: str) -> None:
    env = developing
    before = await snapshot(env)
    err = await env.err("dev", "wait_for_message", {"timeout_sec": timeout})
    assert err["reason"] == "bad_request"
    assert err["message"].startswith(text)
    assert err["invalid_arguments"] == [
        "wait_seconds"
    ]  # the listed name of what the caller sent as timeout_sec
    assert await snapshot(env) == before  # the queued message is still there, not leased
    assert (await env.wait("dev"))["message"]["subject"] == "develop"


async def test_reply_to_unknown_message(developing: Env) -> None:
    env = developing
    before = await snapshot(env)
    err = await env.err("dev", "reply_message", {"replyTo": "msg-doesnotexist", "subject": "s", "body": {}})
    assert err["reason"] == "not_found"
    assert err["message"].startswith("`reply_to`: no message has id 'msg-doesnotexist'.")
    assert await snapshot(env) == before


async def test_report_completion_for_issue_not_in_phase(developing: Env) -> None:
    env = developing
    before = await snapshot(env)
    err = await env.err("dev", "report_completion", {"issue": "JOP-999", "result": "pass"})
    assert err["reason"] == "bad_request"
    assert err["message"] == "Issue 'JOP-999' is not in phase 1; its issues are: A, B. Nothing was changed."
    err = await env.err("dev", "report_completion", {"issue": "B", "result": "pass"})
    assert err["reason"] == "conflict"
    assert (
        err["message"] == "Issue B is todo, not in progress; the issue in progress is A: report that one. "
        "Nothing was changed."
    )
    err = await env.err("dev", "report_completion", {"issue": "A", "result": "maybe"})
    assert err["message"] == (
        "Invalid arguments for report_completion: `result`: Input should be 'pass' or "
        "'fail' (accepts one of: pass, fail)."
    )
    assert await snapshot(env) == before


async def test_start_phase_with_duplicate_issues(env: Env) -> None:
    before = await snapshot(env)
    err = await env.err("pm", "start_phase", {"phase": 1, "issues": ["A", "B", "A"]})
    assert err["reason"] == "bad_request"
    assert err["message"].startswith(
        "Invalid arguments for start_phase: `issues`: lists A more than once; give each issue once"
    )
    err = await env.err("pm", "start_phase", {"phase": 1, "issues": []})
    assert err["invalid_arguments"] == ["issues"]
    err = await env.err(
        "pm",
        "set_phase_plan",
        {"planId": "p", "phases": [{"phase": 1, "issues": ["A"]}, {"phase": 2, "issues": ["A"]}]},
    )
    assert "lists A more than once" in err["message"]
    err = await env.err(
        "pm",
        "set_phase_plan",
        {"planId": "p", "phases": [{"phase": 1, "issues": ["A"]}, {"phase": 1, "issues": ["B"]}]},
    )
    assert "lists a phase number more than once" in err["message"]
    assert await snapshot(env) == before


async def test_unknown_argument(env: Env) -> None:
    err = await env.err("pm", "send_message", {"to": "dev", "subject": "s", "body": {}, "reply_to": "x"})
    assert err["message"].startswith("Invalid arguments for send_message: unknown argument `reply_to`")


async def test_reply_to_a_broker_notice(env: Env) -> None:
    await env.ok("pm", "get_pipeline_status")
    await env.ok("dev", "request_human", {"reason": "stuck"})
    notice = (await env.wait("pm"))["message"]
    err = await env.err("pm", "reply_message", {"replyTo": notice["messageId"], "subject": "s", "body": {}})
    assert err["reason"] == "bad_request" and "takes no replies" in err["message"]


@pytest.mark.parametrize(
    ("agent", "tool", "args", "wrong"),
    [
        (
            "pm",
            "start_phase",
            {"phase": True, "issues": ["A"]},
            "`phase`: Input should be an integer, got true",
        ),
        (
            "pm",
            "start_phase",
            {"phase": "7", "issues": ["A"]},
            '`phase`: Input should be an integer, got "7"',
        ),
        ("pm", "set_auto_advance", {"enabled": "off"}, '`enabled`: Input should be true or false, got "off"'),
        (
            "dev",
            "wait_for_message",
            {"timeout_sec": "5"},
            '`wait_seconds`: Input should be a number, got "5"',
        ),
    ],
)
async def test_arguments_of_another_json_type_are_refused_not_converted(
    env: Env, agent: str, tool: str, args: dict[str, Any], wrong: str
) -> None:
    # "off" is no false and true no phase 1: a lax conversion would change the pipeline.
    before = await snapshot(env)
    err = await env.err(agent, tool, args)
    assert err["reason"] == "bad_request" and wrong in err["message"]
    assert await snapshot(env) == before
