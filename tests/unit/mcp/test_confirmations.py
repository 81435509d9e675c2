"""``confirm_destructive``: who must confirm, and what a client that cannot ask is told
(``gateway.tools.confirmations``), on the broker's ``stop_pipeline``."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.tools import broker as broker_tools
from tests.unit.mcp.conftest import MakeMcp
from tests.unit.mcp.helpers import Mcp, modern_headers, modern_meta

PM_TOKEN = "pm-secret-0123456789"
DEV_TOKEN = "dev-secret-4567890123"


async def stop(client: Mcp, token: str, capabilities: dict[str, Any]) -> dict[str, Any]:
    meta = modern_meta()
    meta["io.modelcontextprotocol/clientCapabilities"] = capabilities
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "stop_pipeline", "arguments": {}, "_meta": meta},
    }
    headers = {**modern_headers("tools/call", "stop_pipeline"), "Authorization": f"Bearer {token}"}
    resp = await client.post(body, headers=headers, session=False)
    return dict((await resp.json())["result"])


@pytest.mark.parametrize(
    ("deployment", "pm_token", "asks_pm", "asks_dev"),
    [(False, False, False, False), (True, False, True, True), (False, True, True, False)],
)
async def test_the_deployment_or_a_token_turns_confirmations_on(
    mcp_factory: MakeMcp, deployment: bool, pm_token: bool, asks_pm: bool, asks_dev: bool
) -> None:
    tokens = [
        {"token": PM_TOKEN, "agent_id": "pm", "confirm_destructive": pm_token},
        {"token": DEV_TOKEN, "agent_id": "dev"},
    ]
    client = await mcp_factory(tools=broker_tools.TOOLS, client_tokens=tokens, confirm_destructive=deployment)
    for token, asks in ((PM_TOKEN, asks_pm), (DEV_TOKEN, asks_dev)):
        result = await stop(client, token, {"elicitation": {}})
        if asks:
            assert result["resultType"] == "input_required"
            assert list(result["inputRequests"]) == ["confirm"]
        else:
            assert result["resultType"] == "complete" and result["structuredContent"]["state"] == "STOPPED"
            break  # stopped for good: later calls would not tell anything more


async def test_a_client_that_cannot_ask_gets_a_tool_error_and_nothing_stops(mcp_factory: MakeMcp) -> None:
    tokens = [{"token": PM_TOKEN, "agent_id": "pm"}]
    client = await mcp_factory(tools=broker_tools.TOOLS, client_tokens=tokens, confirm_destructive=True)
    result = await stop(client, PM_TOKEN, {})
    assert result["isError"] is True
    error = result["structuredContent"]["error"]
    assert error["reason"] == "unauthorized"
    assert "did not declare the `elicitation` capability" in error["message"]
    assert "Nothing was done" in error["message"]
    answered = await stop(client, PM_TOKEN, {"elicitation": {}})
    assert answered["resultType"] == "input_required"  # still running: a question, not STOPPED
