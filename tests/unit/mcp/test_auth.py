"""Who is calling (README, "Connecting a client")."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.mcp.http.auth import CLAIMED_AGENT_ID_CHARS, quotable
from gateway.tools import broker as broker_tools
from tests.unit.mcp.conftest import MakeMcp
from tests.unit.mcp.helpers import Mcp, Probe

PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
PM_TOKEN = "pm-secret-0123456789"
DEV_TOKEN = "dev-secret-4567890123"
TOKENS = [{"token": PM_TOKEN, "agent_id": "pm"}, {"token": DEV_TOKEN, "agent_id": "dev"}]


async def whoami(client: Mcp, headers: dict[str, str] | None = None) -> dict[str, Any]:
    resp = await client.post(
        {"jsonrpc": "2.0", "id": client.next_id(), "method": "tools/call", "params": {"name": "whoami"}},
        headers=headers,
    )
    assert resp.status == 200, await resp.text()
    return dict((await resp.json())["result"]["structuredContent"])


# -- X-Agent-Id on loopback ----------------------------------------------------------------


@pytest.mark.parametrize(("header", "agent"), [("dev", "dev"), ("pm", "pm"), (" reviewer ", "reviewer")])
async def test_agent_header_names_the_caller_on_loopback(mcp: Mcp, header: str, agent: str) -> None:
    who = await whoami(mcp, {"X-Agent-Id": header})
    assert who["agent_id"] == agent
    assert who["credential"] == "service"


@pytest.mark.parametrize("header", ["admin", "", "PM"])
async def test_invalid_agent_header_gives_no_agent(mcp: Mcp, header: str) -> None:
    assert (await whoami(mcp, {"X-Agent-Id": header}))["agent_id"] is None


async def test_no_agent_header_gives_no_agent(mcp: Mcp, probe: Probe) -> None:
    assert (await whoami(mcp))["agent_id"] is None
    assert probe.contexts[-1].call.caller.claimed_agent_id is None


@pytest.mark.parametrize(
    ("header", "claimed"),
    [
        ("qa", "qa"),
        ("PM", "PM"),
        (" dev ", "dev"),
        ("../../etc/passwd", "../../etc/passwd"),
        ("a" * 64, "a" * 64),
        ("b" * 65, "b" * 64 + "..."),
        ("", None),
    ],
)
async def test_agent_header_value_is_passed_on_as_claimed(
    mcp: Mcp, probe: Probe, header: str, claimed: str | None
) -> None:
    await whoami(mcp, {"X-Agent-Id": header})
    assert probe.contexts[-1].call.caller.claimed_agent_id == claimed


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("qa", "qa"),
        ("p\tm\x7f", "p?m?"),
        ("pé\u202eX", "p??X"),
        ("x" * 10_000, "x" * CLAIMED_AGENT_ID_CHARS + "..."),
    ],
)
def test_quotable_keeps_a_short_printable_ascii_prefix(value: str, shown: str) -> None:
    assert quotable(value) == shown


async def test_claimed_agent_id_is_not_set_with_client_tokens(mcp_factory: MakeMcp, probe: Probe) -> None:
    client = await mcp_factory(client_tokens=TOKENS)
    client.headers = {"Authorization": f"Bearer {DEV_TOKEN}"}
    await client.initialize()
    await whoami(client, {"X-Agent-Id": "qa"})
    assert probe.contexts[-1].call.caller.claimed_agent_id is None


async def test_claimed_agent_id_is_not_set_off_loopback(mcp_factory: MakeMcp, probe: Probe) -> None:
    off_loopback = await mcp_factory(server={"host": "0.0.0.0"}, gitlab={"credential_mode": "passthrough"})
    off_loopback.headers = {"PRIVATE-TOKEN": "glpat-caller"}
    await off_loopback.initialize()
    await whoami(off_loopback, {"X-Agent-Id": "qa"})
    assert probe.contexts[-1].call.caller.claimed_agent_id is None


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (
            "qa",
            "X-Agent-Id 'qa' is not one of the configured agents pm, dev, reviewer (ids are case-sensitive). "
            "Send the header `X-Agent-Id: <id>` with one of those ids.",
        ),
        (
            "PM",
            "X-Agent-Id 'PM' is not one of the configured agents pm, dev, reviewer (ids are case-sensitive: "
            "did you mean 'pm'?). Send the header `X-Agent-Id: <id>` with one of those ids.",
        ),
    ],
)
async def test_broker_refusal_names_the_agent_header_received(
    mcp_factory: MakeMcp, header: str, expected: str
) -> None:
    client = await mcp_factory(tools=broker_tools.TOOLS)
    await client.initialize()
    resp = await client.post(
        {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "get_pipeline_status"}},
        headers={"X-Agent-Id": header},
    )
    result = (await resp.json())["result"]
    assert result["isError"] is True
    assert result["content"][0]["text"] == expected
    assert result["structuredContent"]["error"]["reason"] == "unauthorized"


async def test_broker_with_client_tokens_says_nothing_of_the_header(mcp_factory: MakeMcp) -> None:
    """The token names the caller; a wrong-looking header neither refuses nor shows up."""
    client = await mcp_factory(tools=broker_tools.TOOLS, client_tokens=TOKENS)
    client.headers = {"Authorization": f"Bearer {DEV_TOKEN}"}
    await client.initialize()
    resp = await client.post(
        {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": "log_activity", "arguments": {"message": "hi"}},
        },
        headers={"X-Agent-Id": "PM"},
    )
    result = (await resp.json())["result"]
    assert "isError" not in result, result
    assert result["structuredContent"] == {"success": True}
    assert "PM" not in json.dumps(result)


async def test_agent_header_is_ignored_off_loopback_without_client_tokens(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory(server={"host": "0.0.0.0"}, gitlab={"credential_mode": "passthrough"})
    client.headers = {"PRIVATE-TOKEN": "glpat-caller"}
    await client.initialize()
    who = await whoami(client, {"X-Agent-Id": "pm"})
    assert who["agent_id"] is None
    assert who["credential"] == "passthrough"


# -- client tokens -------------------------------------------------------------------------


async def test_client_token_missing_is_401_with_bearer_challenge(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory(client_tokens=TOKENS)
    resp = await client.post(
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}},
        session=False,
    )
    assert resp.status == 401
    assert resp.headers["WWW-Authenticate"] == 'Bearer realm="gitlab-mcp-gateway"'
    body = await resp.json()
    assert body["id"] == 1
    assert body["error"]["code"] == -32001
    assert "Authorization: Bearer" in body["error"]["message"]
    assert "Mcp-Session-Id" not in resp.headers


@pytest.mark.parametrize(
    "authorization", ["Bearer wrong-secret", "Bearer pm-secret-012", "Basic cG06cG0=", "Bearer "]
)
async def test_client_token_wrong_is_401(mcp_factory: MakeMcp, authorization: str) -> None:
    client = await mcp_factory(client_tokens=TOKENS)
    resp = await client.post(
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}},
        headers={"Authorization": authorization},
        session=False,
    )
    assert resp.status == 401
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("session_id", [None, "forged-session-id"])
async def test_client_token_wrong_is_401_before_any_session_check(
    mcp_factory: MakeMcp, session_id: str | None
) -> None:
    # A caller without valid credentials is told that first, not that a session is missing or
    # unknown (curl without a session id used to get 400, a forged one 404).
    client = await mcp_factory(client_tokens=TOKENS)
    headers = {"Authorization": "Bearer wrong-secret"}
    if session_id is not None:
        headers["Mcp-Session-Id"] = session_id
    resp = await client.post(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers, session=False
    )
    assert resp.status == 401
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    assert (await resp.json())["error"]["code"] == -32001


async def test_client_token_decides_the_agent_and_the_header_is_ignored(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory(client_tokens=TOKENS)
    client.headers = {"Authorization": f"Bearer {DEV_TOKEN}"}
    await client.initialize()
    who = await whoami(client, {"X-Agent-Id": "pm"})
    assert who["agent_id"] == "dev"
    assert who["credential"] == "service"


async def test_every_request_needs_the_token(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory(client_tokens=TOKENS)
    client.headers = {"Authorization": f"Bearer {PM_TOKEN}"}
    await client.initialize()
    assert (await client.post(PING)).status == 200
    assert (await client.post(PING, headers={"Authorization": "Bearer nope"})).status == 401
    delete = await client.client.delete("/mcp", headers={"Mcp-Session-Id": client.session_id or ""})
    assert delete.status == 401
    assert (await client.post(PING)).status == 200


async def test_unknown_session_of_an_authenticated_caller_is_404(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory(client_tokens=TOKENS)
    resp = await client.post(
        PING, headers={"Mcp-Session-Id": "forged", "Authorization": f"Bearer {PM_TOKEN}"}
    )
    assert resp.status == 404  # the client then initializes again
    without_token = await client.post(PING, headers={"Mcp-Session-Id": "forged"})
    assert without_token.status == 401


async def test_a_session_is_bound_to_its_caller(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory(client_tokens=TOKENS)
    client.headers = {"Authorization": f"Bearer {PM_TOKEN}"}
    await client.initialize()
    stolen = await client.post(PING, headers={"Authorization": f"Bearer {DEV_TOKEN}"})
    assert stolen.status == 404
    deleted = await client.client.delete(
        "/mcp", headers={"Mcp-Session-Id": client.session_id or "", "Authorization": f"Bearer {DEV_TOKEN}"}
    )
    assert deleted.status == 404
    assert (await client.post(PING)).status == 200


# -- passthrough GitLab credentials --------------------------------------------------------


async def test_passthrough_without_gitlab_token_is_401_saying_which_header(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory(gitlab={"credential_mode": "passthrough", "token": None})
    resp = await client.post(
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}},
        session=False,
    )
    assert resp.status == 401
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    body = await resp.json()
    assert body["error"]["code"] == -32001
    assert body["error"]["message"] == (
        "This gateway forwards each caller's own GitLab token (passthrough mode) and this request "
        "carried none: send `PRIVATE-TOKEN: <your GitLab token>` or `Authorization: Bearer <your "
        "GitLab token>`."
    )


@pytest.mark.parametrize(
    "headers", [{"PRIVATE-TOKEN": "glpat-caller"}, {"Authorization": "Bearer glpat-caller"}]
)
async def test_passthrough_forwards_the_callers_token(
    mcp_factory: MakeMcp, probe: Probe, headers: dict[str, str]
) -> None:
    client = await mcp_factory(gitlab={"credential_mode": "passthrough", "token": None})
    client.headers = headers
    await client.initialize()
    assert (await whoami(client))["credential"] == "passthrough"
    credential = probe.contexts[-1].call.caller.credential
    assert credential is not None and credential.token == "glpat-caller"


async def test_passthrough_token_is_required_on_every_post(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory(gitlab={"credential_mode": "passthrough", "token": None})
    client.headers = {"PRIVATE-TOKEN": "glpat-caller"}
    await client.initialize()
    resp = await client.post(PING, headers={"PRIVATE-TOKEN": None})  # type: ignore[dict-item]
    assert resp.status == 401


async def test_passthrough_session_is_bound_to_the_gitlab_token(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory(gitlab={"credential_mode": "passthrough", "token": None})
    client.headers = {"PRIVATE-TOKEN": "glpat-alice"}
    await client.initialize()
    assert (await client.post(PING, headers={"PRIVATE-TOKEN": "glpat-mallory"})).status == 404
    assert (await client.post(PING)).status == 200


async def test_passthrough_with_client_tokens_takes_gitlab_token_from_private_token(
    mcp_factory: MakeMcp,
) -> None:
    client = await mcp_factory(gitlab={"credential_mode": "passthrough", "token": None}, client_tokens=TOKENS)
    client.headers = {"Authorization": f"Bearer {PM_TOKEN}"}
    resp = await client.post(
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}},
        session=False,
    )
    assert resp.status == 401
    assert "PRIVATE-TOKEN" in (await resp.json())["error"]["message"]
    client.headers["PRIVATE-TOKEN"] = "glpat-caller"
    await client.initialize()
    who = await whoami(client)
    assert (who["agent_id"], who["credential"]) == ("pm", "passthrough")
