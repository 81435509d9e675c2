"""Toolsets per agent through the real gateway, with the official SDK client in both eras: one
gateway, three client tokens (pm: broker; dev: broker, ci, repository; reviewer: ci and repository
read-only), and the X-MCP-* headers narrowing a request."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from mcp.shared.exceptions import MCPError

from gateway.tools import all_tools
from tests.e2e.every_tool import HAPPY
from tests.e2e.harness import GatewayProcess, mcp_client
from tests.standin.fixtures import Standin

pytestmark = pytest.mark.e2e

PM = "pm-e2e-client-token-0001"
DEV = "dev-e2e-client-token-0002"
REVIEWER = "reviewer-e2e-client-token-0003"
ERAS = {"auto": "2026-07-28", "legacy": "2025-11-25"}


@pytest.fixture(scope="module")
def gateway(standin: Standin, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    tokens = [
        {"token": PM, "agent_id": "pm", "toolsets": ["broker"]},
        {"token": DEV, "agent_id": "dev", "toolsets": ["broker", "ci", "repository"]},
        {"token": REVIEWER, "agent_id": "reviewer", "toolsets": ["ci", "repository"], "read_only": True},
    ]
    env = {**standin.env(), "GATEWAY_CLIENT_TOKENS": json.dumps(tokens)}
    proc = GatewayProcess(env=env, state_dir=tmp_path_factory.mktemp("toolsets") / "state").start()
    yield proc
    proc.stop()


def bearer(token: str, **headers: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **headers}


@pytest.mark.parametrize("mode", sorted(ERAS))
async def test_each_agent_sees_and_calls_only_its_toolsets(gateway: GatewayProcess, mode: str) -> None:
    async with mcp_client(gateway.mcp_url, mode=mode, headers=bearer(PM)) as pm:
        assert pm.protocol_version == ERAS[mode]
        broker = [t.name for t in (await pm.list_tools()).tools]
        assert len(broker) == 18 and "get_pipeline_status" in broker and "get_pipeline" not in broker
        with pytest.raises(MCPError) as err:
            await pm.call_tool("get_pipeline", HAPPY["get_pipeline"])
        assert err.value.code == -32602
        assert "Unknown tool: get_pipeline" in err.value.error.message
        assert "client token of agent 'pm'" in err.value.error.message
        assert not (await pm.call_tool("get_pipeline_status", {})).is_error

    async with mcp_client(gateway.mcp_url, mode=mode, headers=bearer(REVIEWER)) as reviewer:
        listed = {t.name: t for t in (await reviewer.list_tools()).tools}
        assert {"get_pipeline", "get_job", "get_repository_file"} <= set(listed)
        assert "save_pipeline" not in listed and not set(broker) & set(listed)
        assert all(t.annotations is not None and t.annotations.read_only_hint for t in listed.values())
        result = await reviewer.call_tool("get_pipeline", HAPPY["get_pipeline"])
        assert not result.is_error, result.content
        with pytest.raises(MCPError) as err:
            await reviewer.call_tool("save_pipeline", {})
        assert err.value.code == -32602 and "read-only" in err.value.error.message


@pytest.mark.parametrize("mode", sorted(ERAS))
async def test_headers_narrow_a_request_and_never_widen(gateway: GatewayProcess, mode: str) -> None:
    narrowed = bearer(DEV, **{"X-MCP-Toolsets": "repository", "X-MCP-Tools": "get_job"})
    async with mcp_client(gateway.mcp_url, mode=mode, headers=narrowed) as dev:
        repository = sorted(t.name for t in all_tools() if t.toolset == "repository")
        assert sorted(t.name for t in (await dev.list_tools()).tools) == sorted(["get_job", *repository])
    widened = bearer(PM, **{"X-MCP-Toolsets": "ci,repository,broker", "X-MCP-Readonly": "false"})
    async with mcp_client(gateway.mcp_url, mode=mode, headers=widened) as pm:
        assert len((await pm.list_tools()).tools) == 18
