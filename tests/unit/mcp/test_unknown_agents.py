"""An agent id the broker does not know, and a call that carries none, through the official SDK
client: a tool error each (``unauthorized``; "carries no agent id"), and no activity log file named
after what the caller sent.

The app serves on a loopback socket (aiohttp's test server), on each broker backend."""

from __future__ import annotations

from pathlib import Path

from gateway.server.services import SERVICES
from gateway.tools import broker as broker_tools
from tests.e2e.harness import mcp_client, text_of
from tests.unit.mcp.conftest import MakeMcp


async def test_unknown_agent_and_missing_agent_over_mcp(
    mcp_factory: MakeMcp, broker_database_at_head: str | None
) -> None:
    mcp = await mcp_factory(tools=broker_tools.TOOLS, broker={"database_url": broker_database_at_head})
    url = str(mcp.client.make_url("/mcp"))
    async with mcp_client(url, headers={"X-Agent-Id": "../../etc/passwd"}) as client:
        result = await client.call_tool("log_activity", {"message": "x"})
    assert result.is_error
    assert result.structured_content["error"]["reason"] == "unauthorized"
    async with mcp_client(url) as client:
        result = await client.call_tool("get_pipeline_status", {})
    assert result.is_error and "carries no agent id" in text_of(result.content[0])
    if broker_database_at_head is None:  # SQLite: the log files beside the database
        state_dir = Path(mcp.app[SERVICES].settings.state_dir)
        assert sorted(p.name for p in (state_dir / "logs").iterdir()) == ["pipeline.log"]
