"""``structured_text`` over HTTP: the caller's client token picks the text block of its results."""

from __future__ import annotations

import json
from typing import Any

from tests.unit.mcp.conftest import MakeMcp
from tests.unit.mcp.helpers import Mcp

PM_TOKEN = "pm-secret-0123456789"
DEV_TOKEN = "dev-secret-4567890123"


async def whoami(client: Mcp) -> dict[str, Any]:
    resp = await client.post(
        {"jsonrpc": "2.0", "id": client.next_id(), "method": "tools/call", "params": {"name": "whoami"}}
    )
    assert resp.status == 200, await resp.text()
    return dict((await resp.json())["result"])


async def test_summary_for_the_deployment_json_for_a_token_that_asks_for_it(mcp_factory: MakeMcp) -> None:
    tokens = [
        {"token": PM_TOKEN, "agent_id": "pm"},
        {"token": DEV_TOKEN, "agent_id": "dev", "structured_text": "json"},
    ]
    pm = await mcp_factory(client_tokens=tokens, structured_text="summary")
    pm.headers = {"Authorization": f"Bearer {PM_TOKEN}"}
    await pm.initialize()
    summarised = await whoami(pm)
    assert summarised["structuredContent"]["agent_id"] == "pm"
    [block] = summarised["content"]
    assert block["text"].startswith("The answer is in structuredContent; its top-level keys: ")
    assert "agent_id" in block["text"]

    pm.headers = {"Authorization": f"Bearer {DEV_TOKEN}"}
    await pm.initialize()
    copied = await whoami(pm)
    assert json.loads(copied["content"][-1]["text"]) == copied["structuredContent"]
