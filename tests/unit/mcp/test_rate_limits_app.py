"""Per-agent rate limits through the app: a runaway agent is held to its limit while another
agent's calls all go through; broker tools are not limited."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from tests.unit.mcp.conftest import MakeMcp
from tests.unit.mcp.helpers import Mcp

RUNAWAY = "dev-secret-4567890123"
CALM = "reviewer-secret-45678"
TOKENS = [
    {"token": RUNAWAY, "agent_id": "dev"},
    {"token": CALM, "agent_id": "reviewer", "calls_per_second": 10.0, "burst": 10},
]


async def as_agent(mcp_factory: MakeMcp, token: str) -> Mcp:
    client = await mcp_factory(client_tokens=TOKENS, limits={"calls_per_second": 5.0, "burst": 5})
    client.headers = {"Authorization": f"Bearer {token}"}
    await client.initialize()
    return client


async def test_runaway_agent_is_held_to_its_limit_while_another_is_served(mcp_factory: MakeMcp) -> None:
    runaway = await as_agent(mcp_factory, RUNAWAY)
    calm = Mcp(runaway.client, runaway.app)
    calm.headers = {"Authorization": f"Bearer {CALM}"}
    await calm.initialize()

    async def calls(client: Mcp, count: int, per_second: float) -> list[dict[str, Any]]:
        results = []
        started = time.monotonic()
        for i in range(count):
            await asyncio.sleep(max(0.0, started + i / per_second - time.monotonic()))
            results.append((await client.call("echo", {"text": "x"}))["result"])
        return results

    # one second: the runaway calls 50 times, the calm agent 8 times (within its own limit)
    started = time.monotonic()
    fast, slow = await asyncio.gather(calls(runaway, 50, 50.0), calls(calm, 8, 8.0))
    elapsed = time.monotonic() - started
    served = [r for r in fast if not r.get("isError")]
    refused = [r for r in fast if r.get("isError")]
    # a burst of 5, then 5 a second for the time it ran
    assert 5 <= len(served) <= 5 + 5 * elapsed + 1, (len(served), elapsed)
    assert len(refused) == 50 - len(served)
    error = refused[0]["structuredContent"]["error"]
    assert error["reason"] == "rate_limited" and error["retry_after_seconds"] == 1
    assert "agent 'dev'" in error["message"]
    assert not any(r.get("isError") for r in slow)
    # broker tools are not limited
    assert not (await runaway.call("deliver_json", {}))["result"].get("isError")
    text = await (await runaway.client.get("/metrics")).text()
    assert f'gateway_rate_limited_total{{agent="dev",limit="calls_per_second"}} {float(len(refused))}' in text
    assert 'gateway_rate_limited_total{agent="reviewer",' not in text
    counted = (
        'gateway_tool_calls_total{agent="dev",outcome="rate_limited"'
        ',source="gateway",tool="echo",toolset="ci"}'
    )
    assert f"{counted} {float(len(refused))}" in text
    # Who is using it: each agent's calls, by the agent its client token names.
    served_dev = 'gateway_tool_calls_total{agent="dev",outcome="ok",source="tool",tool="echo",toolset="ci"}'
    assert f"{served_dev} {float(len(served))}" in text
    assert (
        'gateway_tool_calls_total{agent="reviewer",outcome="ok",source="tool",tool="echo",toolset="ci"} 8.0'
        in text
    )


async def test_the_access_line_names_the_agent_and_never_its_token(
    mcp_factory: MakeMcp, caplog: pytest.LogCaptureFixture
) -> None:
    runaway = await as_agent(mcp_factory, RUNAWAY)
    caplog.set_level(logging.INFO, logger="gateway.mcp")
    results = [(await runaway.call("echo", {"text": "x"}))["result"] for _ in range(7)]
    assert any(r.get("isError") for r in results)
    lines = [r for r in caplog.records if r.name == "gateway.mcp" and r.getMessage() == "mcp request"]
    assert {(r.agent, r.outcome) for r in lines} == {("dev", "ok"), ("dev", "rate_limited")}  # type: ignore[attr-defined]
    assert all(RUNAWAY not in repr(r.__dict__) for r in lines)


async def test_no_limit_by_default(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory()
    await client.initialize()
    results = await asyncio.gather(*(client.call("echo", {"text": "x"}) for _ in range(30)))
    assert not any(r["result"].get("isError") for r in results)
