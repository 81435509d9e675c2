"""The phase broker end to end: three official SDK clients (pm, dev, reviewer) drive a plan of
three phases through the running gateway over MCP (``docs/broker.md``).

Covered on the way: a failure that reaches the fail limit and the PM's ``resume``; a review that
asks for changes; a ``request_human`` during review; auto-advance with a cooldown shortened by
configuration; a cancelled auto-advance; ``stop_pipeline`` waking a waiting agent; progress
notifications during a wait; the final ``get_pipeline_status`` field by field.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

import pytest
from mcp import Client

from tests.e2e.harness import GatewayProcess, mcp_client

pytestmark = pytest.mark.e2e

BROKER_ENV = {
    "GITLAB_URL": "http://127.0.0.1:9",  # no GitLab at all: the broker does not need one
    "GATEWAY_BROKER__COOLDOWN_SECONDS_OVERRIDE": "0.5",
    "GATEWAY_BROKER__SESSION_RESET_SECONDS": "0.3",
    "GATEWAY_BROKER__PROGRESS_INTERVAL_SECONDS": "0.2",
}
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


class Agent:
    """One agent's SDK client."""

    def __init__(self, name: str, client: Client) -> None:
        self.name = name
        self.client = client

    async def call(self, tool: str, args: dict[str, Any] | None = None, **kw: Any) -> Any:
        return await self.client.call_tool(tool, args or {}, **kw)

    async def ok(self, tool: str, args: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        result = await self.call(tool, args, **kw)
        assert not result.is_error, (self.name, tool, result.content)
        assert json.loads(result.content[-1].text) == result.structured_content
        return dict(result.structured_content)

    async def err(self, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        result = await self.call(tool, args)
        assert result.is_error, (self.name, tool, result.structured_content)
        return dict(result.structured_content["error"])

    async def wait(self, timeout: float = 5, **kw: Any) -> dict[str, Any] | None:
        out = await self.ok("wait_for_message", {"timeout_sec": timeout}, **kw)
        message: dict[str, Any] | None = out["message"]
        return message

    async def expect(self, subject: str, timeout: float = 5) -> dict[str, Any]:
        message = await self.wait(timeout)
        assert message is not None, f"{self.name} expected {subject!r} and got nothing"
        assert message["subject"] == subject, (self.name, message)
        return message


async def agents(stack: AsyncExitStack, gateway: GatewayProcess) -> tuple[Agent, Agent, Agent]:
    out = []
    for name in ("pm", "dev", "reviewer"):
        client = await stack.enter_async_context(mcp_client(gateway.mcp_url, headers={"X-Agent-Id": name}))
        out.append(Agent(name, client))
    return out[0], out[1], out[2]


async def test_three_agents_run_a_plan_of_three_phases(
    start_gateway: Callable[..., GatewayProcess], broker_env: dict[str, str]
) -> None:
    gateway = start_gateway(env={**BROKER_ENV, **broker_env})
    async with AsyncExitStack() as stack:
        pm, dev, reviewer = await agents(stack, gateway)

        # the listed tools: 18 broker tools, wait_for_message not read-only, monitoring read-only
        tools = {t.name: t for t in (await pm.client.list_tools()).tools}
        monitoring, waiting = tools["get_pipeline_status"].annotations, tools["wait_for_message"].annotations
        assert monitoring is not None and monitoring.read_only_hint is True
        assert waiting is not None and waiting.read_only_hint is False

        assert await pm.ok(
            "set_phase_plan",
            {
                "planId": "jope-core",
                "phases": [
                    {"phase": 1, "issues": ["JOP-237"]},
                    {"phase": 2, "issues": ["JOP-240", "JOP-238"]},
                    {"phase": 3, "issues": ["JOP-243"]},
                ],
                "autoAdvance": True,
                "cooldownMinutes": 5,
            },
        ) == {"success": True, "totalPhases": 3, "totalIssues": 4}

        # ---- phase 1: the fail limit, the PM resumes; a review asks for changes ----
        assert (await pm.ok("start_phase", {"phase": 1, "issues": ["JOP-237"]}))["state"] == "PHASE_PREPARING"
        develop = await pm.ok(
            "send_message", {"to": "dev", "subject": "develop", "body": {"issue": "JOP-237", "phase": 1}}
        )
        got = await dev.expect("develop")
        assert got["messageId"] == develop["messageId"] and got["from"] == "pm"
        assert await dev.ok("begin_developing") == {
            "success": True,
            "state": "PHASE_DEVELOPING",
            "currentIssue": "JOP-237",
        }
        pm_wait = asyncio.create_task(pm.wait(10))  # the PM is waiting, hence connected
        await asyncio.sleep(0.2)
        for n in (1, 2):
            assert (await dev.ok("report_completion", {"issue": "JOP-237", "result": "fail"}))[
                "failCount"
            ] == n
        assert await dev.ok("report_completion", {"issue": "JOP-237", "result": "fail"}) == {
            "success": True,
            "allDone": False,
            "failCount": 3,
            "state": "HUMAN_NEEDED",
        }
        notice = await pm_wait
        assert notice is not None and notice["subject"] == "human_needed" and notice["priority"] == "high"
        assert notice["body"]["reason"] == "issue JOP-237 failed 3 times (fail limit 3)"
        assert (await dev.err("report_completion", {"issue": "JOP-237", "result": "pass"}))[
            "reason"
        ] == "conflict"
        assert (await dev.err("resume"))["reason"] == "unauthorized"
        assert await pm.ok("resume") == {"success": True, "state": "PHASE_DEVELOPING"}
        # every connected agent is told, the caller included; the reviewer has not called yet
        await dev.expect("human_needed")
        for agent in (pm, dev):
            await agent.expect("resumed")
        assert await dev.ok("report_completion", {"issue": "JOP-237", "result": "pass"}) == {
            "success": True,
            "allDone": True,
            "state": "PHASE_REVIEWING",
        }
        review = await dev.ok(
            "send_message", {"to": "reviewer", "subject": "review", "body": {"issue": "JOP-237", "pr": "!4"}}
        )
        await reviewer.expect("review")
        assert await reviewer.ok("report_review", {"result": "changes", "prId": "!4"}) == {
            "success": True,
            "state": "PHASE_DEVELOPING",
            "fixCount": 1,
        }
        await reviewer.ok(
            "reply_message",
            {
                "replyTo": review["messageId"],
                "subject": "changes",
                "body": {"issue": "JOP-237", "notes": "rename the flag"},
            },
        )
        changes = await dev.expect("changes")
        assert changes["replyTo"] == review["messageId"] and changes["threadId"] == review["messageId"]
        await dev.ok("report_completion", {"issue": "JOP-237", "result": "pass"})
        # approved with a next phase: auto-advance, cooldown 0.5 s (configuration), then a reset
        out = await reviewer.ok("report_review", {"result": "approved", "prId": "!4"})
        assert out["state"] == "IDLE" and out["autoAdvance"]["stage"] == "cooldown"
        assert out["autoAdvance"]["nextPhase"] == 2
        for agent in (pm, dev, reviewer):
            reset = await agent.expect("session_reset")
            assert reset["body"]["nextPhase"] == 2 and reset["from"] == "broker"
        for agent in (pm, dev, reviewer):
            started = await agent.expect("phase_started")
            assert started["body"] == {
                "phase": 2,
                "issues": ["JOP-240", "JOP-238"],
                "startedBy": "auto_advance",
            }
        status = await pm.ok("get_pipeline_status")
        assert (status["state"], status["phase"], status["fixCount"]) == ("PHASE_PREPARING", 2, 0)

        # ---- phase 2: request_human during the review; a cancelled auto-advance ----
        await dev.ok("begin_developing")
        assert (await dev.ok("report_completion", {"issue": "JOP-240", "result": "pass"}))[
            "nextIssue"
        ] == "JOP-238"
        await dev.ok("report_completion", {"issue": "JOP-238", "result": "pass"})
        assert await reviewer.ok("request_human", {"reason": "needs a product decision"}) == {
            "success": True,
            "previousState": "PHASE_REVIEWING",
        }
        for agent in (pm, dev, reviewer):
            assert (await agent.expect("human_needed"))["body"]["reason"] == "needs a product decision"
        assert (await pm.ok("get_pipeline_status"))["humanNeeded"]["origin"] == "PHASE_REVIEWING"
        assert await pm.ok("resume") == {"success": True, "state": "PHASE_DEVELOPING"}
        for agent in (pm, dev, reviewer):
            await agent.expect("resumed")
        for issue in ("JOP-240", "JOP-238"):
            await dev.ok("report_completion", {"issue": issue, "result": "pass"})
        await reviewer.ok("set_auto_advance", {"enabled": True})
        await reviewer.ok("report_review", {"result": "approved"})
        status = await pm.ok("get_pipeline_status")
        assert status["autoAdvance"]["active"] is True and status["autoAdvance"]["stage"] == "cooldown"
        assert ISO.match(status["autoAdvance"]["deadline"])
        assert await pm.ok("cancel_auto_advance", {"reason": "hold phase 3"}) == {
            "success": True,
            "stage": "cooldown",
        }
        await asyncio.sleep(0.8)  # past the cooldown: nothing happens
        status = await pm.ok("get_pipeline_status")
        assert status["state"] == "PAUSED" and status["autoAdvance"] == {"active": False}
        for agent in (pm, dev, reviewer):
            cancelled = await agent.expect("auto_advance_cancelled")
            assert cancelled["body"]["reason"] == "hold phase 3" and cancelled["body"]["state"] == "PAUSED"
        assert await pm.ok("resume") == {"success": True, "state": "IDLE"}
        for agent in (pm, dev, reviewer):
            await agent.expect("resumed")

        # ---- phase 3, started by hand; a wait with progress; completion; stop ----
        await pm.ok("start_phase", {"phase": 3, "issues": ["JOP-243"]})
        await dev.ok("begin_developing")
        await dev.ok("report_completion", {"issue": "JOP-243", "result": "pass"})
        progress: list[tuple[float, float | None, str | None]] = []

        async def on_progress(p: float, total: float | None, message: str | None) -> None:
            progress.append((p, total, message))

        review_wait = asyncio.create_task(reviewer.wait(10, progress_callback=on_progress))
        await asyncio.sleep(0.7)
        await dev.ok(
            "send_message",
            {"to": "reviewer", "subject": "review", "body": {"issue": "JOP-243"}, "priority": "high"},
        )
        received = await review_wait
        assert received is not None and received["subject"] == "review"
        assert len(progress) >= 2 and progress[0][2] is not None
        assert progress[0][2].startswith("waiting for a message, ")
        assert [p for p, _, _ in progress] == sorted(p for p, _, _ in progress)
        assert await reviewer.ok("report_review", {"result": "approved"}) == {
            "success": True,
            "state": "COMPLETED",
        }
        plan = await pm.ok("get_phase_plan")
        assert plan["completedPhases"] == [1, 2, 3] and plan["currentPhase"] == 3

        dev_wait = asyncio.create_task(dev.ok("wait_for_message", {"timeout_sec": 30}))
        await asyncio.sleep(0.2)
        assert await pm.ok("stop_pipeline") == {"success": True, "state": "STOPPED"}
        woken = await asyncio.wait_for(dev_wait, 5)
        assert woken["stopped"] is True and woken["message"] is None and woken["timedOut"] is False
        assert (gateway.state_dir / ".stop-pipeline").read_text().startswith("stopped by pm at ")
        err = await dev.err("send_message", {"to": "pm", "subject": "x", "body": {}})
        assert err["reason"] == "conflict" and err["message"].startswith("The pipeline is STOPPED")
        await dev.ok("log_activity", {"message": "stopped, leaving"})
        assert (await dev.ok("get_activity_log"))["lines"][-1].endswith("[dev] stopped, leaving")

        # ---- the final snapshot, field by field ----
        status = await reviewer.ok("get_pipeline_status")
        assert status["state"] == "STOPPED"
        assert status["phase"] == 3
        assert status["issues"] == {"JOP-243": {"status": "done", "failCount": 0}}
        assert set(status["agents"]) == {"pm", "dev", "reviewer"}
        for name in ("pm", "dev", "reviewer"):
            assert status["agents"][name]["connected"] is True
            assert ISO.match(status["agents"][name]["lastSeen"])
        assert status["queues"] == {"pm": 0, "dev": 0, "reviewer": 0}
        assert status["phasePlan"] == {"planId": "jope-core", "autoAdvance": True}
        assert status["autoAdvance"] == {"active": False}
        assert status["fixCount"] == 0
        assert re.fullmatch(r"(\d+m )?\d+s", status["uptime"])
        assert status["limits"] == {"failLimit": 3, "fixLimit": 2}
        assert status["stopped"]["by"] == "pm"

        pipeline = (await pm.ok("get_activity_log", {"agent": "pipeline", "tail_lines": 200}))["lines"]
        transitions = [line.split("] ", 1)[1] for line in pipeline if " -> " in line]
        assert transitions == [
            "IDLE -> PHASE_PREPARING (start_phase)",
            "PHASE_PREPARING -> PHASE_DEVELOPING (begin_developing)",
            "PHASE_DEVELOPING -> HUMAN_NEEDED (report_completion:fail_limit)",
            "HUMAN_NEEDED -> PHASE_DEVELOPING (resume:phase)",
            "PHASE_DEVELOPING -> PHASE_REVIEWING (report_completion:pass_last)",
            "PHASE_REVIEWING -> PHASE_DEVELOPING (report_review:changes)",
            "PHASE_DEVELOPING -> PHASE_REVIEWING (report_completion:pass_last)",
            "PHASE_REVIEWING -> IDLE (report_review:approved_advance)",
            "IDLE -> PHASE_PREPARING (auto_advance:start_phase)",
            "PHASE_PREPARING -> PHASE_DEVELOPING (begin_developing)",
            "PHASE_DEVELOPING -> PHASE_REVIEWING (report_completion:pass_last)",
            "PHASE_REVIEWING -> HUMAN_NEEDED (request_human)",
            "HUMAN_NEEDED -> PHASE_DEVELOPING (resume:phase)",
            "PHASE_DEVELOPING -> PHASE_REVIEWING (report_completion:pass_last)",
            "PHASE_REVIEWING -> IDLE (report_review:approved_advance)",
            "IDLE -> PAUSED (cancel_auto_advance)",
            "PAUSED -> IDLE (resume:idle)",
            "IDLE -> PHASE_PREPARING (start_phase)",
            "PHASE_PREPARING -> PHASE_DEVELOPING (begin_developing)",
            "PHASE_DEVELOPING -> PHASE_REVIEWING (report_completion:pass_last)",
            "PHASE_REVIEWING -> COMPLETED (report_review:approved_last)",
            "COMPLETED -> STOPPED (stop_pipeline)",
        ]
        history = (await pm.ok("get_message_history", {"issue": "JOP-237"}))["messages"]
        assert [m["subject"] for m in history] == ["develop", "review", "changes"]

    # metrics of the run
    import httpx

    text = httpx.get(f"{gateway.url}/metrics").text
    assert 'gateway_broker_state{state="STOPPED"} 1.0' in text
    assert 'gateway_broker_transitions_total{from_state="IDLE",to_state="PAUSED"} 1.0' in text
