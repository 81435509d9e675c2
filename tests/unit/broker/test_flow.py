"""The broker's tools end to end in process: phases, counters, limits, human, auto-advance, stop."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from gateway.broker import schema
from gateway.broker.machine import State
from gateway.broker.queries import IssueRow, Queries
from gateway.config import Settings
from tests.unit.broker.conftest import Env, EnvFactory, close

PLAN = {
    "planId": "jope-core",
    "phases": [
        {"phase": 1, "issues": ["JOP-237"]},
        {"phase": 2, "issues": ["JOP-240", "JOP-238", "JOP-239", "JOP-241"]},
        {"phase": 3, "issues": ["JOP-243", "JOP-242"]},
    ],
}


async def develop(env: Env, phase: int, issues: list[str]) -> None:
    await env.ok("pm", "start_phase", {"phase": phase, "issues": issues})
    await env.ok("dev", "begin_developing")
    for issue in issues:
        await env.ok("dev", "report_completion", {"issue": issue, "result": "pass"})


async def test_seed_examples(env: Env) -> None:
    assert await env.ok("pm", "set_phase_plan", {**PLAN, "autoAdvance": True, "cooldownMinutes": 5}) == {
        "success": True,
        "totalPhases": 3,
        "totalIssues": 7,
    }
    assert await env.ok(
        "pm", "start_phase", {"phase": 2, "issues": ["JOP-240", "JOP-238", "JOP-239", "JOP-241"]}
    ) == {"success": True, "phase": 2, "issueCount": 4, "state": "PHASE_PREPARING"}
    out = await env.ok("dev", "begin_developing")
    assert out == {"success": True, "state": "PHASE_DEVELOPING", "currentIssue": "JOP-240"}
    assert await env.ok("dev", "report_completion", {"issue": "JOP-240", "result": "pass"}) == {
        "success": True,
        "allDone": False,
        "nextIssue": "JOP-238",
        "state": "PHASE_DEVELOPING",
    }
    await env.ok("dev", "report_completion", {"issue": "JOP-238", "result": "fail"})
    assert await env.ok("dev", "report_completion", {"issue": "JOP-238", "result": "fail"}) == {
        "success": True,
        "allDone": False,
        "failCount": 2,
        "state": "PHASE_DEVELOPING",
    }
    status = await env.status()
    assert status["state"] == "PHASE_DEVELOPING"
    assert status["phase"] == 2
    assert status["issues"] == {
        "JOP-240": {"status": "done", "failCount": 0},
        "JOP-238": {"status": "in_progress", "failCount": 2},
        "JOP-239": {"status": "todo", "failCount": 0},
        "JOP-241": {"status": "todo", "failCount": 0},
    }
    assert status["phasePlan"] == {"planId": "jope-core", "autoAdvance": True}
    assert status["autoAdvance"] == {"active": False}
    assert status["fixCount"] == 0
    assert status["agents"]["pm"]["connected"] is True
    assert status["agents"]["reviewer"] == {"connected": False, "lastSeen": None}
    assert status["queues"] == {"pm": 0, "dev": 0, "reviewer": 0}
    for issue in ("JOP-238", "JOP-239"):
        await env.ok("dev", "report_completion", {"issue": issue, "result": "pass"})
    assert await env.ok("dev", "report_completion", {"issue": "JOP-241", "result": "pass"}) == {
        "success": True,
        "allDone": True,
        "state": "PHASE_REVIEWING",
    }
    assert await env.ok("reviewer", "report_review", {"result": "changes", "prId": "PR #4"}) == {
        "success": True,
        "state": "PHASE_DEVELOPING",
        "fixCount": 1,
    }
    status = await env.status()
    # every issue back to todo, the first in progress; fail counts kept
    assert [v["status"] for v in status["issues"].values()] == ["in_progress", "todo", "todo", "todo"]
    assert status["issues"]["JOP-238"]["failCount"] == 2
    assert status["fixCount"] == 1


async def test_fail_limit_then_human_and_resume(env: Env) -> None:
    await env.ok("pm", "start_phase", {"phase": 1, "issues": ["A", "B"]})
    await env.ok("dev", "begin_developing")
    await env.ok("pm", "wait_for_message", {"timeout_sec": 0})  # pm is connected
    for n in (1, 2):
        assert (await env.ok("dev", "report_completion", {"issue": "A", "result": "fail"}))["failCount"] == n
    out = await env.ok("dev", "report_completion", {"issue": "A", "result": "fail"})
    assert out == {"success": True, "allDone": False, "failCount": 3, "state": "HUMAN_NEEDED"}
    # every connected agent is told, with high priority, the reporter included; not the reviewer
    for agent in ("pm", "dev"):
        notice = (await env.wait(agent))["message"]
        assert notice["subject"] == "human_needed"
        assert notice["from"] == "broker" and notice["priority"] == "high"
        assert notice["body"]["reason"] == "issue A failed 3 times (fail limit 3)"
        assert (await env.wait(agent))["message"] is None
    assert (await env.wait("reviewer"))["message"] is None
    status = await env.status()
    assert status["humanNeeded"]["origin"] == "PHASE_DEVELOPING"
    err = await env.err("dev", "report_completion", {"issue": "A", "result": "pass"})
    assert err["reason"] == "conflict"
    assert err["message"].startswith(
        "report_completion is not allowed in state HUMAN_NEEDED; it is allowed in: PHASE_DEVELOPING."
    )
    assert "the PM calls resume" in err["message"]
    err = await env.err("dev", "resume")
    assert err["reason"] == "unauthorized" and "only for the PM" in err["message"]
    assert await env.ok("pm", "resume") == {"success": True, "state": "PHASE_DEVELOPING"}
    for agent in ("pm", "dev", "reviewer"):  # the caller is told too; all three are connected now
        assert (await env.wait(agent))["message"]["subject"] == "resumed"
    # the phase goes on where it was, A still in progress; a person resuming means "try again":
    # A's fail count starts over, so its next fail does not send the pipeline straight back
    status = await env.status()
    assert status["issues"]["A"] == {"status": "in_progress", "failCount": 0}
    assert "humanNeeded" not in status
    out = await env.ok("dev", "report_completion", {"issue": "A", "result": "fail"})
    assert out == {"success": True, "allDone": False, "failCount": 1, "state": "PHASE_DEVELOPING"}
    lines = (await env.ok("pm", "get_activity_log", {"agent": "pipeline"}))["lines"]
    assert any("failCount of A back to 0" in line for line in lines)


async def test_resume_keeps_fail_counts_below_the_limit(env: Env) -> None:
    await env.ok("pm", "start_phase", {"phase": 1, "issues": ["A", "B"]})
    await env.ok("dev", "begin_developing")
    await env.ok("dev", "report_completion", {"issue": "A", "result": "fail"})
    await env.ok("dev", "request_human", {"reason": "which API?"})
    assert await env.ok("pm", "resume") == {"success": True, "state": "PHASE_DEVELOPING"}
    assert (await env.status())["issues"]["A"]["failCount"] == 1


async def test_fix_limit(env: Env) -> None:
    await develop(env, 1, ["A"])
    await env.ok("reviewer", "report_review", {"result": "changes"})
    await env.ok("dev", "report_completion", {"issue": "A", "result": "pass"})
    out = await env.ok("reviewer", "report_review", {"result": "changes", "prId": "!7"})
    assert out == {"success": True, "state": "HUMAN_NEEDED", "fixCount": 2}
    assert await env.ok("pm", "resume") == {"success": True, "state": "PHASE_DEVELOPING"}
    status = await env.status()
    assert status["issues"]["A"]["status"] == "in_progress"
    # a person resuming means "try again": the next review asking for changes is the phase's
    # first since, not a third that sends it straight back to HUMAN_NEEDED
    assert status["fixCount"] == 0
    await env.ok("dev", "report_completion", {"issue": "A", "result": "pass"})
    out = await env.ok("reviewer", "report_review", {"result": "changes"})
    assert out == {"success": True, "state": "PHASE_DEVELOPING", "fixCount": 1}
    lines = (await env.ok("pm", "get_activity_log", {"agent": "pipeline"}))["lines"]
    assert any("fixCount of phase 1 back to 0" in line for line in lines)


async def test_request_human_in_review_resumes_into_development(env: Env) -> None:
    await develop(env, 1, ["A", "B"])
    assert await env.ok("reviewer", "request_human", {"reason": "unclear spec"}) == {
        "success": True,
        "previousState": "PHASE_REVIEWING",
    }
    # broker.md: "every connected agent is told", the caller included (pm and dev called just now)
    for agent in ("reviewer", "pm", "dev"):
        notice = (await env.wait(agent))["message"]
        assert notice["subject"] == "human_needed" and notice["body"]["requestedBy"] == "reviewer"
    assert await env.ok("pm", "resume") == {"success": True, "state": "PHASE_DEVELOPING"}
    # nothing was left to do, so the issues are reopened rather than leaving the dev stuck
    status = await env.status()
    assert [v["status"] for v in status["issues"].values()] == ["in_progress", "todo"]


async def test_approved_last_phase_completes(env: Env) -> None:
    await env.ok("pm", "set_phase_plan", PLAN)
    await develop(env, 3, ["JOP-243", "JOP-242"])
    assert await env.ok("reviewer", "report_review", {"result": "approved"}) == {
        "success": True,
        "state": "COMPLETED",
    }
    plan = await env.ok("pm", "get_phase_plan")
    assert plan == {
        "planId": "jope-core",
        "phases": PLAN["phases"],
        "currentPhase": 3,
        "completedPhases": [3],
        "autoAdvance": False,
        "cooldownMinutes": 5.0,
    }
    # What to do from here is in the refusal itself.
    refused = await env.err("pm", "start_phase", {"phase": 4, "issues": ["NEXT-1"]})
    assert "call request_human, then the PM calls resume (back to IDLE) and start_phase" in refused["message"]


async def test_has_next_phase_defaults_from_plan(env: Env) -> None:
    await env.ok("pm", "set_phase_plan", PLAN)
    await develop(env, 1, ["JOP-237"])
    assert (await env.ok("reviewer", "report_review", {"result": "approved"}))["state"] == "IDLE"
    await develop(env, 2, ["X"])
    assert (await env.ok("reviewer", "report_review", {"result": "approved", "hasNextPhase": False}))[
        "state"
    ] == "COMPLETED"


async def test_has_next_phase_defaults_from_plan_when_the_phase_is_not_in_it(make_env: EnvFactory) -> None:
    env = await make_env(broker={"cooldown_seconds_override": 30})
    phases = PLAN["phases"][1:]  # phases 2 and 3
    await env.ok("pm", "set_phase_plan", {"planId": "p", "phases": phases, "autoAdvance": True})
    await develop(env, 1, ["HAND-1"])  # phase 1 run by hand, outside the plan
    out = await env.ok("reviewer", "report_review", {"result": "approved"})
    assert out["state"] == "IDLE" and out["autoAdvance"]["nextPhase"] == 2


async def test_has_next_phase_skips_completed_phases(env: Env) -> None:
    await env.ok("pm", "set_phase_plan", PLAN)
    await develop(env, 3, ["JOP-243", "JOP-242"])  # the last phase first, by hand
    await env.ok("reviewer", "report_review", {"result": "approved", "hasNextPhase": True})
    await develop(env, 2, ["JOP-240"])
    # after 2 comes 3 in the plan, and it is completed: nothing is left
    assert (await env.ok("reviewer", "report_review", {"result": "approved"}))["state"] == "COMPLETED"


async def test_auto_advance_runs_and_resumes_after_restart(make_env: EnvFactory) -> None:
    env = await make_env(broker={"cooldown_seconds_override": 0.3, "session_reset_seconds": 0.2})
    await env.ok("pm", "set_phase_plan", {**PLAN, "autoAdvance": True})
    await develop(env, 1, ["JOP-237"])
    out = await env.ok("reviewer", "report_review", {"result": "approved"})
    assert out["state"] == "IDLE"
    assert out["autoAdvance"]["stage"] == "cooldown" and out["autoAdvance"]["nextPhase"] == 2
    status = await env.status()
    assert status["autoAdvance"]["active"] is True and status["autoAdvance"]["stage"] == "cooldown"
    # a restart during the cooldown resumes from the stored deadline
    await close(env)
    env = await make_env(env.settings)
    assert (await env.status())["autoAdvance"]["stage"] == "cooldown"
    reset = (await env.wait("dev", 5))["message"]
    assert reset["subject"] == "session_reset" and reset["body"]["nextPhase"] == 2
    assert (await env.status())["autoAdvance"]["stage"] == "session_reset"
    started = (await env.wait("dev", 5))["message"]
    assert started["subject"] == "phase_started"
    assert started["body"] == {
        "phase": 2,
        "issues": ["JOP-240", "JOP-238", "JOP-239", "JOP-241"],
        "startedBy": "auto_advance",
    }
    status = await env.status()
    assert status["state"] == "PHASE_PREPARING" and status["phase"] == 2
    assert status["autoAdvance"] == {"active": False}
    lines = (await env.ok("pm", "get_activity_log", {"agent": "pipeline"}))["lines"]
    assert any("IDLE -> PHASE_PREPARING (auto_advance:start_phase)" in line for line in lines)


async def test_cancel_auto_advance(make_env: EnvFactory) -> None:
    env = await make_env(broker={"cooldown_seconds_override": 30})
    err = await env.err("pm", "cancel_auto_advance", {"reason": "nothing"})
    assert err["reason"] == "conflict" and err["message"].startswith("No auto-advance is under way")
    await env.ok("pm", "set_phase_plan", {**PLAN, "autoAdvance": True})
    await develop(env, 1, ["JOP-237"])
    await env.ok("reviewer", "report_review", {"result": "approved"})
    assert await env.ok("pm", "cancel_auto_advance", {"reason": "hold on"}) == {
        "success": True,
        "stage": "cooldown",
    }
    status = await env.status()
    assert status["state"] == "PAUSED" and status["autoAdvance"] == {"active": False}
    # every agent is told, as it would have been told of the reset and the phase start
    for agent in ("pm", "dev", "reviewer"):
        notice = (await env.wait(agent))["message"]
        assert notice["subject"] == "auto_advance_cancelled"
        assert notice["from"] == "broker" and notice["priority"] == "high"
        assert notice["body"] == {
            "stage": "cooldown",
            "nextPhase": 2,
            "reason": "hold on",
            "cancelledBy": "pm",
            "state": "PAUSED",
        }
    assert (await env.err("pm", "start_phase", {"phase": 2, "issues": ["X"]}))["reason"] == "conflict"
    assert await env.ok("pm", "resume") == {"success": True, "state": "IDLE"}
    await env.ok("pm", "start_phase", {"phase": 2, "issues": ["X"]})


async def test_cancel_auto_advance_in_session_reset_tells_the_agents(make_env: EnvFactory) -> None:
    env = await make_env(broker={"cooldown_seconds_override": 0.1, "session_reset_seconds": 30})
    await env.ok("pm", "set_phase_plan", {**PLAN, "autoAdvance": True})
    await develop(env, 1, ["JOP-237"])
    await env.ok("reviewer", "report_review", {"result": "approved"})
    for agent in ("pm", "dev", "reviewer"):
        assert (await env.wait(agent, 5))["message"]["subject"] == "session_reset"
    assert await env.ok("pm", "cancel_auto_advance", {"reason": "not today"}) == {
        "success": True,
        "stage": "session_reset",
    }
    # the agents that reset for the next phase learn that it is not coming until the PM resumes
    for agent in ("pm", "dev", "reviewer"):
        notice = (await env.wait(agent))["message"]
        assert notice["subject"] == "auto_advance_cancelled" and notice["priority"] == "high"
        assert notice["body"]["stage"] == "session_reset" and notice["body"]["state"] == "PAUSED"
        assert notice["body"]["reason"] == "not today" and notice["body"]["nextPhase"] == 2
    assert (await env.status())["state"] == "PAUSED"
    assert await env.ok("pm", "resume") == {"success": True, "state": "IDLE"}
    for agent in ("pm", "dev", "reviewer"):
        assert (await env.wait(agent))["message"]["subject"] == "resumed"


async def test_set_auto_advance_off_drops_the_advance(make_env: EnvFactory) -> None:
    env = await make_env(broker={"cooldown_seconds_override": 30})
    await env.ok("pm", "set_phase_plan", {**PLAN, "autoAdvance": True})
    await develop(env, 1, ["JOP-237"])
    await env.ok("reviewer", "report_review", {"result": "approved"})
    assert await env.ok("pm", "set_auto_advance", {"enabled": False}) == {
        "success": True,
        "autoAdvance": False,
        "cancelledStage": "cooldown",
    }
    status = await env.status()
    assert status["state"] == "IDLE" and status["autoAdvance"] == {"active": False}
    assert status["phasePlan"]["autoAdvance"] is False


async def test_stop_pipeline(env: Env) -> None:
    await env.ok("pm", "start_phase", {"phase": 1, "issues": ["A"]})
    waiter = asyncio.create_task(env.call("dev", "wait_for_message", {"timeout_sec": 30}))
    await asyncio.sleep(0.05)
    assert await env.ok("reviewer", "stop_pipeline") == {"success": True, "state": "STOPPED"}
    woken = await asyncio.wait_for(waiter, 2)
    assert woken.structured["stopped"] is True and woken.structured["message"] is None
    assert woken.text is not None and "stopped" in woken.text
    assert (env.state_dir / ".stop-pipeline").read_text().startswith("stopped by reviewer at ")
    refused: list[tuple[str, dict[str, Any]]] = [
        ("begin_developing", {}),
        ("send_message", {"to": "pm", "subject": "x", "body": {}}),
        ("wait_for_message", {}),
        ("request_human", {"reason": "x"}),
        ("resume", {}),
        ("set_phase_plan", PLAN),
        ("set_auto_advance", {"enabled": True}),
    ]
    for tool, args in refused:
        err = await env.err("pm", tool, args)
        assert err["reason"] == "conflict", tool
        assert err["message"].startswith("The pipeline is STOPPED (stop_pipeline by reviewer at "), tool
    # monitoring keeps working; a second stop succeeds
    assert (await env.status())["state"] == "STOPPED"
    await env.ok("dev", "log_activity", {"message": "bye"})
    await env.ok("dev", "get_activity_log")
    await env.ok("dev", "get_message_history")
    await env.ok("dev", "get_phase_plan")
    assert await env.ok("pm", "stop_pipeline") == {"success": True, "state": "STOPPED"}


async def test_stop_file_at_start_means_stopped(
    make_env: EnvFactory, make_settings: Callable[..., Settings], broker_database_at_head: str | None
) -> None:
    settings = make_settings(broker={"database_url": broker_database_at_head})
    from pathlib import Path

    Path(settings.state_dir).mkdir(parents=True, exist_ok=True)
    (Path(settings.state_dir) / ".stop-pipeline").write_text("operator\n")
    env = await make_env(settings)
    assert (await env.status())["state"] == "STOPPED"
    assert (await env.err("pm", "start_phase", {"phase": 1, "issues": ["A"]}))["reason"] == "conflict"


async def test_state_survives_restart(make_env: EnvFactory) -> None:
    env = await make_env()
    await env.ok("pm", "set_phase_plan", PLAN)
    await env.ok("pm", "start_phase", {"phase": 1, "issues": ["A", "B"]})
    await env.ok("dev", "begin_developing")
    await env.ok("dev", "report_completion", {"issue": "A", "result": "pass"})
    sent = await env.ok("pm", "send_message", {"to": "dev", "subject": "develop", "body": {"issue": "B"}})
    await close(env)
    env = await make_env(env.settings)
    status = await env.status()
    assert status["state"] == "PHASE_DEVELOPING"
    assert status["issues"] == {
        "A": {"status": "done", "failCount": 0},
        "B": {"status": "in_progress", "failCount": 0},
    }
    assert status["queues"]["dev"] == 1
    assert status["agents"]["pm"]["lastSeen"] is not None
    assert (await env.wait("dev"))["message"]["messageId"] == sent["messageId"]


async def test_wrong_state_changes_nothing(env: Env) -> None:
    before = await env.status()
    err = await env.err("dev", "begin_developing")
    assert err == {
        "reason": "conflict",
        "message": "begin_developing is not allowed in state IDLE; it is allowed in: PHASE_PREPARING. "
        "Nothing was changed. Call get_pipeline_status to see where the pipeline is.",
        "state": "IDLE",
        "allowed_states": ["PHASE_PREPARING"],
        "request_id": "test",
    }
    after = await env.status()
    assert {k: v for k, v in after.items() if k not in ("agents", "uptime", "uptimeSeconds")} == {
        k: v for k, v in before.items() if k not in ("agents", "uptime", "uptimeSeconds")
    }


async def test_reply_goes_to_sender_in_thread(env: Env) -> None:
    sent = await env.ok("pm", "send_message", {"to": "dev", "subject": "develop", "body": {"issue": "JOP-1"}})
    got = (await env.wait("dev"))["message"]
    assert got["messageId"] == sent["messageId"] and got["threadId"] == sent["messageId"]
    reply = await env.ok(
        "dev", "reply_message", {"replyTo": sent["messageId"], "subject": "done", "body": {"issue": "JOP-1"}}
    )
    assert reply["queued"] is True and reply["to"] == "pm" and reply["threadId"] == sent["messageId"]
    back = (await env.wait("pm"))["message"]
    assert back["replyTo"] == sent["messageId"] and back["from"] == "dev"
    history = (await env.ok("pm", "get_message_history", {"issue": "JOP-1"}))["messages"]
    assert [m["subject"] for m in history] == ["develop", "done"]
    assert all(m["delivered"] for m in history)
    assert (await env.ok("pm", "get_message_history", {"issue": "JOP-2"}))["messages"] == []


async def test_activity_logs(env: Env) -> None:
    await env.ok("dev", "log_activity", {"message": "line one\nforged line"})
    lines = (await env.ok("dev", "get_activity_log"))["lines"]
    assert len(lines) == 1 and lines[0].endswith("[dev] line one\\nforged line")
    await env.ok("dev", "log_activity", {"message": "deploy \u202eenod\u2066 ok"})
    shown = (await env.ok("dev", "get_activity_log", {"tail_lines": 1}))["lines"][0]
    assert shown.endswith("[dev] deploy \\u202eenod\\u2066 ok")  # bidi controls escaped, never raw
    assert (env.state_dir / "logs" / "dev.log").exists() is env.broker.logs.files  # files on SQLite
    await env.ok("pm", "start_phase", {"phase": 1, "issues": ["A"]})
    pipeline = (await env.ok("dev", "get_activity_log", {"agent": "pipeline", "tail_lines": 1}))["lines"]
    assert pipeline[0].endswith("[pm] phase 1 prepared: A")


async def test_metrics(env: Env) -> None:
    await env.ok("pm", "start_phase", {"phase": 1, "issues": ["A"]})
    await env.ok("pm", "send_message", {"to": "dev", "subject": "s", "body": {}})
    reg = env.metrics.registry
    assert reg.get_sample_value("gateway_broker_state", {"state": "PHASE_PREPARING"}) == 1
    assert reg.get_sample_value("gateway_broker_state", {"state": "IDLE"}) == 0
    assert (
        reg.get_sample_value(
            "gateway_broker_transitions_total", {"from_state": "IDLE", "to_state": "PHASE_PREPARING"}
        )
        == 1
    )
    await env.broker.housekeeping.refresh_depths()  # what each timer look does now and then
    assert reg.get_sample_value("gateway_broker_queue_depth", {"agent": "dev"}) == 1
    assert reg.get_sample_value("gateway_broker_messages_sent_total", {"agent": "dev"}) == 1
    await env.wait("dev")
    await env.broker.housekeeping.refresh_depths()
    assert reg.get_sample_value("gateway_broker_queue_depth", {"agent": "dev"}) == 0
    assert reg.get_sample_value("gateway_broker_messages_delivered_total", {"agent": "dev"}) == 1
    assert reg.get_sample_value("gateway_broker_waits_open") == 0


async def test_uptime_format() -> None:
    from gateway.broker.formats import human_duration

    assert human_duration(8100) == "2h 15m"
    assert human_duration(95) == "1m 35s"
    assert human_duration(4) == "4s"
    assert human_duration(90000) == "1d 1h 0m"


def test_connected_window(env: Env) -> None:
    env.broker.roster.last_call["dev"] = time.time() - 61
    assert env.broker.roster.connected("dev") is False
    env.broker.roster.last_call["dev"] = time.time() - 30
    assert env.broker.roster.connected("dev") is True


# Replicas share a PostgreSQL broker; only a SQLite folder is one gateway's.
@pytest.mark.parametrize("broker_backend", ["sqlite"], indirect=True)
async def test_second_gateway_on_same_folder_is_refused(env: Env, make_env: EnvFactory) -> None:
    from gateway.broker.store import StoreError

    with pytest.raises(StoreError, match="another gateway is using the broker state folder"):
        await make_env(env.settings)
    assert State.IDLE.value == (await env.status())["state"]


@pytest.mark.spawns_process(
    reason="runs gitlab-mcp-gateway as a user does: its exit status and what it prints"
)
@pytest.mark.parametrize("command", [[], ["--migrate"]])
def test_a_state_folder_that_cannot_be_made_is_one_clean_line(tmp_path: Path, command: list[str]) -> None:
    in_the_way = tmp_path / "state"
    in_the_way.write_text("not a folder\n")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("GITLAB_", "GATEWAY_"))}
    clean.update(GITLAB_URL="http://127.0.0.1:9", GATEWAY_STATE_DIR=str(in_the_way))
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "--port", "0", *command],
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    verb = "migrate" if command else "start"
    assert result.stderr.splitlines()[-1] == (
        f"gitlab-mcp-gateway: cannot {verb}: the broker state folder {in_the_way} cannot be used: a file "
        f"is in the way, not a folder ({in_the_way}). Give GATEWAY_STATE_DIR (or state_dir in the "
        "--config file) a folder this gateway's user can create and write"
    )


async def test_status_is_one_snapshot(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """get_pipeline_status reads every table as of one moment, even while another change commits."""
    await env.ok("pm", "start_phase", {"phase": 1, "issues": ["A"]})
    read_issues = Queries.issues

    async def commit_meanwhile(self: Queries) -> list[IssueRow]:
        # Another replica's change commits between the status's statements.
        async with env.broker.store.engine.begin() as conn:
            await conn.execute(sa.update(schema.issues).values(fail_count=7))
        return await read_issues(self)

    monkeypatch.setattr(Queries, "issues", commit_meanwhile)
    status = await env.status()
    monkeypatch.undo()
    assert status["issues"]["A"]["failCount"] == 0  # as of the status's first statement
    assert (await env.status())["issues"]["A"]["failCount"] == 7
