"""The ``broker`` command line beside a running gateway on the default setup (SQLite in the state
folder, console off): a person answers a ``HUMAN_NEEDED`` while the agents' waits stay open, and
switches auto-advance, cancels an advance, stops, starts over and reads the archived pipeline's
history, all through the gateway's operator socket; after the gateway stopped, nobody is shown
connected.

The installed ``gitlab-mcp-gateway broker`` runs beside the gateway and after it stopped; the many
commands in between run the same command line in this process (``main(["broker", ...])``, about a
second of CPU less each), against the same running gateway's operator socket."""

from __future__ import annotations

import asyncio
import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.__main__ import main
from tests.conftest import REPO
from tests.e2e.harness import GatewayProcess, gateway_command, mcp_client

pytestmark = pytest.mark.e2e


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    return dict(result.structured_content)


def broker(gateway: GatewayProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """``gitlab-mcp-gateway broker ...`` as the gateway's user, with its state folder."""
    return subprocess.run(
        [*gateway_command(), "broker", *args],
        env=gateway.env,
        cwd=gateway.state_dir.parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


class HereBroker:
    """``broker(gateway, ...)``'s command line run in this process, as the gateway's user with its
    state folder (the environment of ``gateway``), beside the running installed gateway."""

    def __init__(
        self, gateway: GatewayProcess, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        for name, value in gateway.env.items():
            if name.startswith(("GATEWAY_", "GITLAB_")):
                monkeypatch.setenv(name, value)
        monkeypatch.setattr("sys.stdin", io.StringIO(""))  # no terminal, as the subprocess had
        self.capsys = capsys

    def __call__(self, gateway: GatewayProcess, *args: str) -> subprocess.CompletedProcess[str]:
        self.capsys.readouterr()
        code = main(["broker", *args])
        out, err = self.capsys.readouterr()
        return subprocess.CompletedProcess(["broker", *args], code, out, err)


@pytest.mark.slow
async def test_a_person_answers_a_human_needed_beside_the_running_gateway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gateway = GatewayProcess(env={"GITLAB_URL": "http://127.0.0.1:9"}, state_dir=tmp_path / "state")
    gateway.start(60.0)
    here = HereBroker(gateway, monkeypatch, capsys)
    try:
        socket = gateway.state_dir / "operator.sock"
        assert stat.S_ISSOCK(socket.stat().st_mode) and stat.S_IMODE(socket.stat().st_mode) == 0o600
        assert "operator socket on at" in gateway.log()
        async with (
            mcp_client(gateway.mcp_url, headers={"X-Agent-Id": "pm"}) as pm,
            mcp_client(gateway.mcp_url, headers={"X-Agent-Id": "dev"}) as dev,
        ):
            structured(await pm.call_tool("start_phase", {"phase": 1, "issues": ["DEMO-1"]}))
            structured(await dev.call_tool("request_human", {"reason": "keep the v1 API?"}))
            while (await pm.call_tool("wait_for_message", {"timeout_sec": 1})).structured_content["message"]:
                pass  # the human_needed notice

            # The PM waits; the person answers from the command line; the PM's wait gets it.
            waiting = asyncio.create_task(pm.call_tool("wait_for_message", {"timeout_sec": 30}))
            await asyncio.sleep(0.5)
            status = await asyncio.to_thread(broker, gateway, "status")  # the installed command
            assert status.returncode == 0, status.stderr
            assert "NEEDS A PERSON: keep the v1 API?" in status.stdout and "broker instruct" in status.stdout
            done = await asyncio.to_thread(
                here, gateway, "instruct", "Keep v1; add v2 beside it.", "--as", "carol"
            )
            assert done.returncode == 0, done.stderr
            assert "as operator:carol" in done.stdout
            assert "The pipeline waits for a person (HUMAN_NEEDED)" in done.stdout
            assert "calls resume to go on" in done.stdout
            message = structured(await asyncio.wait_for(waiting, 20))["message"]
            assert message["from"] == "human" and message["body"]["text"] == "Keep v1; add v2 beside it."
            structured(await pm.call_tool("resume", {}))
            # Not paused: the instruction is a message like any other, and no resume follows it.
            state = structured(await pm.call_tool("get_pipeline_status", {}))["state"]
            busy = await asyncio.to_thread(here, gateway, "instruct", "Also log the v1 calls.")
            assert busy.returncode == 0, busy.stderr
            assert f"The pipeline is {state}, not paused" in busy.stdout, busy.stdout
            assert "no resume is needed" in busy.stdout and "calls resume" not in busy.stdout
            sent = await asyncio.to_thread(here, gateway, "instruct", "And v2's.", "--json")
            assert json.loads(sent.stdout)["state"] == state, sent.stdout
            assert "operator carol: instruct through the operator socket" in gateway.log()

            # The console's other controls. Auto-advance needs a plan to advance through.
            refused = await asyncio.to_thread(here, gateway, "auto-advance", "on", "--json")
            assert refused.returncode == 1
            assert "no phase plan" in json.loads(refused.stdout)["error"]["message"]
            phases = [{"phase": 1, "issues": ["DEMO-1"]}, {"phase": 2, "issues": ["DEMO-2"]}]
            plan = {"planId": "demo", "phases": phases, "autoAdvance": False, "cooldownMinutes": 1}
            structured(await pm.call_tool("set_phase_plan", plan))
            off = await asyncio.to_thread(here, gateway, "auto-advance", "off", "--json")
            assert off.returncode == 0 and json.loads(off.stdout)["autoAdvance"] is False, off.stderr
            on = await asyncio.to_thread(here, gateway, "auto-advance", "on")
            assert on.returncode == 0 and "Auto-advance is on" in on.stdout, on.stderr
            nothing = await asyncio.to_thread(here, gateway, "cancel-advance", "--json")
            assert nothing.returncode == 1
            error = json.loads(nothing.stdout)["error"]  # no advance under way
            assert error["reason"] == "conflict" and error["message"].startswith("No auto-advance")
            assert "conflict: No auto-advance" in nothing.stderr

            # Stop and start over; the archived pipeline's history stays readable.
            assert (await asyncio.to_thread(here, gateway, "stop", "--yes")).returncode == 0
            reset = await asyncio.to_thread(here, gateway, "reset", "--yes")
            assert reset.returncode == 0 and "broker history --pipeline 1" in reset.stdout, reset.stderr
            assert structured(await pm.call_tool("get_pipeline_status", {}))["state"] == "IDLE"
        live = await asyncio.to_thread(here, gateway, "history")
        assert live.stdout.strip() == "(no messages)"
        archived = await asyncio.to_thread(here, gateway, "history", "--pipeline", "1", "--json")
        subjects = [m["subject"] for m in json.loads(archived.stdout)["messages"]]
        assert "human" in subjects and "human_needed" in subjects
    finally:
        gateway.stop()
    assert not socket.exists()

    # With the gateway stopped, nobody is connected, whatever lastSeen says.
    after = broker(gateway, "status", "--json")
    assert after.returncode == 0, after.stderr
    body = json.loads(after.stdout)
    assert body["gatewayRunning"] is False
    assert not any(agent["connected"] for agent in body["status"]["agents"].values())
    text = (await asyncio.to_thread(here, gateway, "status")).stdout
    assert "No gateway is running" in text and "connected" not in text.split("Agents:")[1]


@pytest.mark.slow
def test_the_three_agents_example_runs_with_client_tokens_and_a_person_answers_from_the_cli(
    tmp_path: Path,
) -> None:
    tokens = {agent: f"{agent}-{'7f' * 16}" for agent in ("pm", "dev", "reviewer")}
    clients = [{"token": token, "agent_id": agent, "toolsets": ["broker"]} for agent, token in tokens.items()]
    gateway = GatewayProcess(
        env={"GITLAB_URL": "http://127.0.0.1:9", "GATEWAY_CLIENT_TOKENS": json.dumps(clients)},
        state_dir=tmp_path / "state",
    )
    gateway.start(60.0)
    env = {**os.environ, **{f"GATEWAY_TOKEN_{a.upper()}": t for a, t in tokens.items()}}
    script = subprocess.Popen(
        [sys.executable, str(REPO / "docs" / "examples" / "three_agents.py"), gateway.mcp_url, "--pace", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert script.stdout is not None
        seen = []
        for line in script.stdout:
            seen.append(line)
            if "broker instruct" in line:
                break
        else:
            pytest.fail("".join(seen))
        done = broker(gateway, "instruct", "Build v2 only.")
        assert done.returncode == 0, done.stderr
        rest, _ = script.communicate(timeout=60)
        assert script.returncode == 0, "".join(seen) + rest
        assert "the person said: Build v2 only." in rest and "The plan is COMPLETED" in rest
    finally:
        if script.poll() is None:
            script.kill()
            script.wait(10)
        gateway.stop()
