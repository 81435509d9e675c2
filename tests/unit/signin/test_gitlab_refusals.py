"""When GitLab refuses a signed-in person's token during a call, or the person's scope is too
narrow: HTTP 401 (refresh, or sign in again) and 403 (step up), not a tool error."""

from __future__ import annotations

from typing import Any

from gateway.tools.context import ToolContext
from gateway.tools.registry import READ_ONLY, Annotations, Tool, ToolInput
from tests.unit.mcp.helpers import modern_headers, modern_meta, response_message
from tests.unit.signin.conftest import MakeGateway, sign_in, whoami


class NoInput(ToolInput):
    pass


async def me(ctx: ToolContext, args: NoInput) -> dict[str, Any]:
    user = await ctx.gitlab.rest("GET", "/user")
    return {"username": user["username"]}


async def change(ctx: ToolContext, args: NoInput) -> dict[str, Any]:
    await ctx.gitlab.rest("POST", "/user/status", json={"message": "hi"})
    return {"done": True}


TOOLS = [
    Tool(
        name="me",
        description="Who am I at GitLab.",
        input_model=NoInput,
        handler=me,
        annotations=READ_ONLY,
        toolset="ci",
    ),
    Tool(
        name="change",
        description="Change something at GitLab.",
        input_model=NoInput,
        handler=change,
        annotations=Annotations(read_only=False),
        toolset="ci",
    ),
]


async def call(gw: Any, token: str, tool: str) -> Any:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": {}, "_meta": modern_meta()},
    }
    headers = {**modern_headers("tools/call", tool), "Authorization": f"Bearer {token}"}
    return await gw.mcp.post(body, headers=headers, session=False)


async def test_tool_calls_reach_gitlab_as_the_signed_in_user(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(extra_tools=TOOLS)
    tokens = await sign_in(gw)
    resp = await call(gw, tokens.access_token, "me")
    answer = await response_message(resp)
    assert "result" in answer, answer
    assert answer["result"]["structuredContent"] == {"username": "alice"}, answer
    sent = gw.gitlab.api_requests[-1]
    assert gw.gitlab.access[sent.headers["Authorization"].removeprefix("Bearer ")] == "alice"
    assert "PRIVATE-TOKEN" not in sent.headers


async def test_a_read_scope_asks_to_step_up_before_a_change(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(extra_tools=TOOLS)
    reader = await sign_in(gw, scope="mcp:read")
    before = len(gw.gitlab.api_requests)
    resp = await call(gw, reader.access_token, "change")
    assert resp.status == 403
    challenge = resp.headers["WWW-Authenticate"]
    assert challenge.startswith('Bearer error="insufficient_scope"')
    assert 'scope="mcp:read mcp:write"' in challenge and "resource_metadata=" in challenge
    assert len(gw.gitlab.api_requests) == before
    assert (await call(gw, reader.access_token, "me")).status == 200


async def test_a_token_gitlab_refuses_is_refreshed_and_the_call_sent_again(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(extra_tools=TOOLS)
    tokens = await sign_in(gw)
    gw.gitlab.expire_all()  # GitLab ended the token before its time
    answer = await response_message(await call(gw, tokens.access_token, "me"))
    assert answer["result"]["structuredContent"] == {"username": "alice"}, answer
    assert gw.gitlab.refreshes == 1
    refused, resent = gw.gitlab.api_requests[-2:]
    assert refused.headers["Authorization"] != resent.headers["Authorization"]
    answer = await response_message(await call(gw, tokens.access_token, "me"))
    assert "result" in answer and gw.gitlab.refreshes == 1  # the new token is the grant's now


async def test_a_grant_gitlab_revoked_ends_the_sign_in(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(extra_tools=TOOLS)
    tokens = await sign_in(gw)
    gw.gitlab.revoke_user("alice")
    resp = await call(gw, tokens.access_token, "me")
    assert resp.status == 401
    assert 'error="invalid_token"' in resp.headers["WWW-Authenticate"]
    assert (await whoami(gw, tokens.access_token)).status == 401  # the grant is gone everywhere


async def test_a_batch_with_a_change_asks_a_read_scope_to_step_up_before_any_of_it_runs(
    make_gateway: MakeGateway,
) -> None:
    gw = await make_gateway(extra_tools=TOOLS)
    reader = await sign_in(gw, scope="mcp:read")
    gw.mcp.headers["Authorization"] = f"Bearer {reader.access_token}"
    await gw.mcp.initialize("2025-03-26")
    before = len(gw.gitlab.api_requests)
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "me", "arguments": {}}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "change", "arguments": {}}},
    ]
    resp = await gw.mcp.post(batch)
    assert resp.status == 403, await resp.text()
    assert resp.headers["WWW-Authenticate"].startswith('Bearer error="insufficient_scope"')
    assert "change" in (await resp.json())["error"]["message"]
    assert len(gw.gitlab.api_requests) == before  # not even the read ran
    # A batch of reads goes through.
    resp = await gw.mcp.post(batch[:1])
    assert resp.status == 200, await resp.text()
    [answer] = await resp.json()
    assert answer["result"]["structuredContent"] == {"username": "alice"}, answer
