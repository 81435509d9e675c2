"""Toolsets per agent: the deployment's tools, narrowed by the caller's client token and then by
the request's X-MCP-Toolsets, X-MCP-Tools and X-MCP-Readonly headers, never widened; in both eras."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.config import load_settings
from gateway.tools import all_tools
from tests.unit.mcp.conftest import MakeMcp
from tests.unit.mcp.helpers import Mcp, modern_headers, modern_meta

PM_TOKEN = "pm-secret-0123456789"
DEV_TOKEN = "dev-secret-4567890123"
REVIEWER_TOKEN = "reviewer-secret-45678"
AGENTS = [
    {"token": PM_TOKEN, "agent_id": "pm", "toolsets": ["broker"]},
    {"token": DEV_TOKEN, "agent_id": "dev", "toolsets": ["broker", "ci", "repository"]},
    {"token": REVIEWER_TOKEN, "agent_id": "reviewer", "toolsets": ["ci", "repository"], "read_only": True},
]
# What a gateway serves by default: every toolset but `superseded`.
TOOLS = [t for t in all_tools() if t.toolset != "superseded"]
BROKER = [t.name for t in TOOLS if t.toolset == "broker"]
CI_AND_REPOSITORY = [t.name for t in TOOLS if t.toolset in ("ci", "repository")]
READ_ONLY_CI_AND_REPOSITORY = [
    t.name for t in TOOLS if t.toolset in ("ci", "repository") and t.annotations.read_only
]


async def gateway(mcp_factory: MakeMcp, **settings: Any) -> Mcp:
    return await mcp_factory(tools=TOOLS, client_tokens=AGENTS, **settings)


async def as_agent(client: Mcp, token: str, headers: dict[str, str] | None = None) -> list[str]:
    """Initialize as the token's agent (legacy era); the names its tools/list shows (every page)."""
    client.headers = {"Authorization": f"Bearer {token}", **(headers or {})}
    await client.initialize()
    names: list[str] = []
    params: dict[str, Any] = {}
    while True:
        result = (await client.rpc("tools/list", params))["result"]
        names += [t["name"] for t in result["tools"]]
        if "nextCursor" not in result:
            return names
        params = {"cursor": result["nextCursor"]}


async def test_pm_token_limited_to_broker_sees_the_18_broker_tools_only(mcp_factory: MakeMcp) -> None:
    client = await gateway(mcp_factory)
    listed = await as_agent(client, PM_TOKEN)
    assert len(BROKER) == 18
    assert listed == BROKER
    error = (await client.call("get_pipeline", {"id": "g/p", "pipeline_id": 1}))["error"]
    assert error["code"] == -32602
    assert error["message"] == (
        "Unknown tool: get_pipeline. Call tools/list for the tools this gateway serves. get_pipeline "
        "belongs to toolset 'ci', which the client token of agent 'pm' (its client_tokens entry) does "
        "not enable (toolsets: broker)."
    )
    assert client.gitlab_requests == []  # refused before anything reached GitLab
    text = await (await client.client.get("/metrics")).text()
    assert (
        'gateway_tool_calls_total{agent="pm",outcome="unauthorized"'
        ',source="gateway",tool="get_pipeline",toolset="ci"} 1.0' in text
    )


async def test_same_gateway_shows_the_reviewer_ci_and_repository_read_only(mcp_factory: MakeMcp) -> None:
    client = await gateway(mcp_factory)
    listed = await as_agent(client, REVIEWER_TOKEN)
    assert listed == READ_ONLY_CI_AND_REPOSITORY
    assert "get_pipeline" in listed and "get_repository_file" in listed
    assert "save_pipeline" not in listed and "get_pipeline_status" not in listed
    error = (await client.call("save_pipeline", {}))["error"]
    assert error["code"] == -32602
    assert (
        "save_pipeline changes GitLab or broker state and the client token of agent 'reviewer'"
        in (error["message"])
    )
    # and the dev agent on the same gateway sees all three toolsets, save_pipeline included
    dev = await as_agent(client, DEV_TOKEN)
    assert dev == CI_AND_REPOSITORY + BROKER


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"X-MCP-Toolsets": "ci"}, [t for t in CI_AND_REPOSITORY if t.startswith("get_") or "pipeline" in t]),
        ({"X-MCP-Tools": "get_pipeline, get_job"}, ["get_job", "get_pipeline"]),
        (
            {"X-MCP-Readonly": "true"},
            [t.name for t in TOOLS if t.annotations.read_only and t.toolset != "duo_agent_platform"],
        ),
        (
            {"X-MCP-Toolsets": "repository", "X-MCP-Tools": "get_job"},
            ["get_job", *(t.name for t in TOOLS if t.toolset == "repository")],
        ),
        # unknown names are ignored: what is left narrows
        ({"X-MCP-Toolsets": "ci,actions,no_such"}, None),
        ({"X-MCP-Toolsets": " "}, CI_AND_REPOSITORY + BROKER),  # empty: as if not sent
    ],
)
async def test_headers_narrow_the_dev_agent(
    mcp_factory: MakeMcp, headers: dict[str, str], expected: list[str] | None
) -> None:
    client = await gateway(mcp_factory)
    listed = await as_agent(client, DEV_TOKEN, headers)
    ci = [t.name for t in TOOLS if t.toolset == "ci"]
    if expected is None or headers.get("X-MCP-Toolsets") == "ci":
        expected = ci
    assert sorted(listed) == sorted(expected)


async def test_headers_never_widen(mcp_factory: MakeMcp) -> None:
    client = await gateway(mcp_factory)
    # the pm asks for ci and for a named ci tool: its token allows neither
    listed = await as_agent(client, PM_TOKEN, {"X-MCP-Toolsets": "ci,broker", "X-MCP-Tools": "get_pipeline"})
    assert listed == BROKER
    assert (await client.call("get_pipeline", {}))["error"]["code"] == -32602
    # the reviewer cannot lift its read-only limit
    listed = await as_agent(
        client, REVIEWER_TOKEN, {"X-MCP-Readonly": "false", "X-MCP-Tools": "save_pipeline"}
    )
    assert listed == []  # save_pipeline is the only tool the header names, and it is hidden
    error = (await client.call("save_pipeline", {}))["error"]
    assert "the client token of agent 'reviewer'" in error["message"]


async def test_a_header_hides_a_tool_and_says_so(mcp_factory: MakeMcp) -> None:
    client = await gateway(mcp_factory)
    await as_agent(client, DEV_TOKEN, {"X-MCP-Toolsets": "broker"})
    error = (await client.call("get_job", {}))["error"]
    assert error["message"].endswith(
        "get_job belongs to toolset 'ci', which this request's X-MCP-Toolsets header does not enable "
        "(toolsets: broker)."
    )


async def test_deployment_limits_apply_below_the_token(mcp_factory: MakeMcp) -> None:
    client = await gateway(mcp_factory, toolsets=["ci"], read_only=True)
    listed = await as_agent(client, DEV_TOKEN)
    assert listed == [t.name for t in TOOLS if t.toolset == "ci" and t.annotations.read_only]


def modern(method: str, token: str, params: dict[str, Any] | None = None, **headers: str) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**(params or {}), "_meta": modern_meta()}}
    return body, {
        "MCP-Protocol-Version": None,
        "Authorization": f"Bearer {token}",
        **modern_headers(method, (params or {}).get("name")),
        **headers,
    }


async def modern_post(
    client: Mcp, method: str, token: str, params: dict[str, Any] | None = None, **headers: str
) -> Any:
    body, sent = modern(method, token, params, **headers)
    return await client.post(body, headers=sent, session=False)


async def test_modern_era_lists_and_refuses_alike_and_marks_the_list_private(mcp_factory: MakeMcp) -> None:
    client = await gateway(mcp_factory)
    result = (await (await modern_post(client, "tools/list", PM_TOKEN)).json())["result"]
    assert [t["name"] for t in result["tools"]] == BROKER
    assert result["cacheScope"] == "private"
    resp = await modern_post(client, "tools/call", PM_TOKEN, {"name": "get_pipeline", "arguments": {}})
    error = (await resp.json())["error"]
    assert error["code"] == -32602
    assert "which the client token of agent 'pm'" in error["message"]
    discover = (await (await modern_post(client, "server/discover", PM_TOKEN)).json())["result"]
    assert discover["cacheScope"] == "private"
    assert discover["capabilities"]["tools"] == {"listChanged": False}


async def test_unlimited_caller_keeps_the_public_list(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory(tools=TOOLS, client_tokens=[{"token": DEV_TOKEN, "agent_id": "dev"}])
    result = (await (await modern_post(client, "tools/list", DEV_TOKEN)).json())["result"]
    assert [t["name"] for t in result["tools"]] == [t.name for t in TOOLS]
    assert result["cacheScope"] == "public"
    discover = (await (await modern_post(client, "server/discover", DEV_TOKEN)).json())["result"]
    assert discover["cacheScope"] == "public"


async def test_the_documented_agents_example_gives_each_role_its_tools(
    mcp_factory: MakeMcp, tmp_path: Path
) -> None:
    text = (Path(__file__).parents[3] / "docs" / "examples" / "agents.toml").read_text()
    secrets = {agent: f"{agent}-example-secret-000000" for agent in ("pm", "dev", "reviewer")}
    for agent, secret in secrets.items():
        text = text.replace(f"REPLACE-with-a-random-secret-for-{agent}", secret)
    config = tmp_path / "agents.toml"
    config.write_text(text)
    tokens = [
        {k: v for k, v in t.model_dump().items() if v is not None} | {"token": t.token.get_secret_value()}
        for t in load_settings(config).client_tokens
    ]
    client = await mcp_factory(tools=TOOLS, client_tokens=tokens)
    assert await as_agent(client, secrets["pm"]) == BROKER
    assert await as_agent(client, secrets["dev"]) == CI_AND_REPOSITORY + BROKER
    # The reviewer reports through the broker (report_review) and changes nothing in GitLab.
    reviewer = await as_agent(client, secrets["reviewer"])
    assert reviewer == READ_ONLY_CI_AND_REPOSITORY + BROKER and "report_review" in reviewer


async def test_an_agent_calling_gitlab_tools_only_is_connected_not_away(mcp_factory: MakeMcp) -> None:
    client = await gateway(mcp_factory)
    await as_agent(client, REVIEWER_TOKEN)
    # The reviewer only reads GitLab (here GitLab answers 503): no broker tool called.
    answer = (await client.call("get_pipeline", {"id": "g/p", "pipeline_id": 1}))["result"]
    assert answer["isError"] is True and client.gitlab_requests
    pm = Mcp(client.client, client.app)
    await as_agent(pm, PM_TOKEN)
    status = (await pm.call("get_pipeline_status", {}))["result"]["structuredContent"]
    reviewer = status["agents"]["reviewer"]
    assert reviewer["connected"] is True and reviewer["lastSeen"] is not None
    assert status["agents"]["dev"] == {"connected": False, "lastSeen": None}
