"""The ``broker`` command line beside a running gateway on the default setup (SQLite in the state
folder, console off): a person answers a ``HUMAN_NEEDED`` while the agents' waits stay open, and
switches auto-advance, cancels an advance, stops, starts over and reads the archived pipeline's
history, all through the gateway's operator socket; after the gateway stopped, nobody is shown
connected."""

from __future__ import annotations

import asyncio
import json
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import GatewayProcess, gateway_command, mcp_client

pytestmark = pytest.mark.e2e


def structured(result: Any) -> dict[str, Any]:
    assert not result.isError, result.content
    return dict(result.structuredContent)


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


@pytest.mark.slow
async def test_a_person_answers_a_human_needed_beside_the_running_gateway(tmp_path: Path) -> None:
    gateway = GatewayProcess(env={"GITLAB_URL": "http://127.0.0.1:9"}, state_dir=tmp_path / "state")
    gateway.start(60.0)
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
            while (await pm.call_tool("wait_for_message", {"timeout_sec": 1})).structuredContent["message"]:
                pass  # the human_needed notice

            # The PM waits; the person answers from the command line; the PM's wait gets it.
            waiting = asyncio.create_task(pm.call_tool("wait_for_message", {"timeout_sec": 30}))
            await asyncio.sleep(0.5)
            status = await asyncio.to_thread(broker, gateway, "status")
            assert status.returncode == 0, status.stderr
            assert "NEEDS A PERSON: keep the v1 API?" in status.stdout and "broker instruct" in status.stdout
            done = await asyncio.to_thread(
                broker, gateway, "instruct", "Keep v1; add v2 beside it.", "--as", "carol"
            )
            assert done.returncode == 0, done.stderr
            assert "as operator:carol" in done.stdout
            message = structured(await asyncio.wait_for(waiting, 20))["message"]
            assert message["from"] == "human" and message["body"]["text"] == "Keep v1; add v2 beside it."
            structured(await pm.call_tool("resume", {}))
            assert "operator carol: instruct through the operator socket" in gateway.log()

            # The console's other controls.
            off = await asyncio.to_thread(broker, gateway, "auto-advance", "off", "--json")
            assert off.returncode == 0 and json.loads(off.stdout)["autoAdvance"] is False, off.stderr
            on = await asyncio.to_thread(broker, gateway, "auto-advance", "on")
            assert on.returncode == 0 and "Auto-advance is on" in on.stdout, on.stderr
            nothing = await asyncio.to_thread(broker, gateway, "cancel-advance", "--json")
            assert nothing.returncode == 1
            assert json.loads(nothing.stdout)["error"]["reason"] == "conflict"  # no advance under way

            # Stop and start over; the archived pipeline's history stays readable.
            assert (await asyncio.to_thread(broker, gateway, "stop", "--yes")).returncode == 0
            reset = await asyncio.to_thread(broker, gateway, "reset", "--yes")
            assert reset.returncode == 0 and "broker history --pipeline 1" in reset.stdout, reset.stderr
            assert structured(await pm.call_tool("get_pipeline_status", {}))["state"] == "IDLE"
        live = await asyncio.to_thread(broker, gateway, "history")
        assert live.stdout.strip() == "(no messages)"
        archived = await asyncio.to_thread(broker, gateway, "history", "--pipeline", "1", "--json")
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
    text = broker(gateway, "status").stdout
    assert "No gateway is running" in text and "connected" not in text.split("Agents:")[1]
