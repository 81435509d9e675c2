"""What one request or one caller may set going: batches bounded in size and in calls at a time,
GitLab tool calls in flight per caller, ended sessions recorded per caller; each refused past its
bound with a clear error, and nothing of a refused batch run."""

from __future__ import annotations

import asyncio
import tracemalloc
from typing import Any

from pydantic import Field

from gateway.gitlab.errors import GitLabUnauthorized
from gateway.tools.context import ToolContext
from gateway.tools.registry import READ_ONLY, Tool, ToolInput
from tests.unit.mcp.conftest import MakeMcp
from tests.unit.mcp.helpers import Mcp, modern_headers, modern_meta
from tests.unit.mcp.test_session_end import end, open_session, status

OLD = {"MCP-Protocol-Version": None}


class HoldInput(ToolInput):
    seconds: float = Field(0.05, description="How long to stay in flight")


class Counter:
    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self.ran = 0


def hold_tool(counter: Counter) -> Tool:
    async def hold(ctx: ToolContext, args: HoldInput) -> dict[str, Any]:
        counter.ran += 1
        counter.now += 1
        counter.most = max(counter.most, counter.now)
        try:
            await asyncio.sleep(args.seconds)
        finally:
            counter.now -= 1
        return {"held": True}

    return Tool(
        name="hold",
        description="Stay in flight a moment (a GitLab tool's toolset).",
        input_model=HoldInput,
        handler=hold,
        annotations=READ_ONLY,
        toolset="ci",
    )


def calls(n: int) -> list[dict[str, Any]]:
    return [
        {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "hold", "arguments": {}}}
        for i in range(n)
    ]


async def old_session(mcp_factory: MakeMcp, counter: Counter, **settings: Any) -> Mcp:
    client = await mcp_factory(tools=[hold_tool(counter)], **settings)
    await client.initialize("2025-03-26")
    return client


async def test_a_batch_past_the_cap_is_refused_whole_and_none_of_it_runs(mcp_factory: MakeMcp) -> None:
    counter = Counter()
    client = await old_session(mcp_factory, counter, server={"max_batch_messages": 5})
    resp = await client.post(calls(6), headers=OLD)  # type: ignore[arg-type]
    assert resp.status == 400
    body = await resp.json()
    assert body["error"]["code"] == -32600 and body["id"] is None
    assert "a batch of 6 messages" in body["error"]["message"]
    assert "server.max_batch_messages" in body["error"]["message"]
    assert counter.ran == 0
    resp = await client.post(calls(5), headers=OLD)  # type: ignore[arg-type]
    assert resp.status == 200 and len(await resp.json()) == 5 and counter.ran == 5


async def test_a_batch_of_countless_trivial_items_is_refused_holding_little(mcp_factory: MakeMcp) -> None:
    # 520,000 items in one body under the 1 MiB limit: refused by its size before anything is
    # made per item (the text check walks it without a path string per item).
    counter = Counter()
    client = await old_session(mcp_factory, counter)
    body = ("[" + ",".join(["0"] * 520_000) + "]").encode()
    assert len(body) < 1024 * 1024
    tracemalloc.start()
    try:
        resp = await client.post(body, headers=OLD)  # type: ignore[arg-type]
        answer = await resp.json()
        peak = tracemalloc.get_traced_memory()[1] / (1024 * 1024)
    finally:
        tracemalloc.stop()
    assert resp.status == 400 and answer["error"]["code"] == -32600
    assert "a batch of 520000 messages" in answer["error"]["message"]
    assert peak < 16, f"{peak:.1f} MiB held to refuse a 1 MiB batch"
    assert counter.ran == 0


async def test_a_batch_runs_a_few_calls_at_a_time(mcp_factory: MakeMcp) -> None:
    counter = Counter()
    client = await old_session(mcp_factory, counter, server={"batch_concurrency": 2})
    resp = await client.post(calls(8), headers=OLD)  # type: ignore[arg-type]
    answers = await resp.json()
    assert [a["id"] for a in answers] == list(range(8))
    assert not any(a["result"].get("isError") for a in answers)
    assert counter.ran == 8 and counter.most == 2


async def test_each_call_of_a_batch_counts_against_the_callers_calls_in_flight(
    mcp_factory: MakeMcp,
) -> None:
    counter = Counter()
    client = await old_session(
        mcp_factory, counter, server={"batch_concurrency": 5}, limits={"max_calls_in_flight": 2}
    )
    answers = await (await client.post(calls(5), headers=OLD)).json()  # type: ignore[arg-type]
    refused = [a["result"] for a in answers if a["result"].get("isError")]
    assert counter.most == 2 and len(refused) == 3
    error = refused[0]["structuredContent"]["error"]
    assert error["reason"] == "rate_limited" and error["limit"] == "gateway_calls_in_flight"
    assert "limits.max_calls_in_flight" in error["message"]
    # Once they have finished, the caller's calls go through again.
    answers = await (await client.post(calls(2), headers=OLD)).json()  # type: ignore[arg-type]
    assert not any(a["result"].get("isError") for a in answers)
    metrics = await (await client.client.get("/metrics")).text()
    assert 'gateway_rate_limited_total{agent="anonymous",limit="max_calls_in_flight"} 3.0' in metrics


async def test_ended_sessions_are_capped_per_caller_and_a_refused_one_stays_usable(
    mcp_factory: MakeMcp,
) -> None:
    client = await mcp_factory(server={"max_ended_sessions_per_caller": 2})
    first, second, third = [await open_session(client) for _ in range(3)]
    assert await end(client, first) == 204 and await end(client, second) == 204
    refused = await client.client.delete("/mcp", headers={"Mcp-Session-Id": third})
    assert refused.status == 429
    text = await refused.text()
    assert "server.max_ended_sessions_per_caller" in text and "stays open" in text
    # What was ended stays ended; the session refused an end is still the caller's own.
    assert await status(client, first) == 404 and await status(client, second) == 404
    assert await status(client, third) == 200


async def test_ended_sessions_ended_at_once_are_capped_as_one_after_another(mcp_factory: MakeMcp) -> None:
    # Each DELETE waits for the database: ones under way together must not each see the count
    # from before the others (an attack of 16 at a time ended 4,872 with a cap of 1,000).
    client = await mcp_factory(server={"max_ended_sessions_per_caller": 2})
    sessions = [await open_session(client) for _ in range(6)]
    statuses = await asyncio.gather(*(end(client, sid) for sid in sessions))
    assert sorted(statuses) == [204, 204, 429, 429, 429, 429]


async def test_ended_sessions_are_capped_in_all(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory(server={"max_ended_sessions": 1})
    first, second = await open_session(client), await open_session(client)
    assert await end(client, first) == 204
    assert await end(client, second) == 429
    assert await status(client, first) == 404  # never forgotten to make room


def unauthorized_tool() -> Tool:
    async def refuse(ctx: ToolContext, args: HoldInput) -> dict[str, Any]:
        token = ctx.call.caller.credential.token if ctx.call.caller.credential else ""
        if token.startswith("glpat-good"):
            return {"held": True}
        raise GitLabUnauthorized("GitLab rejected the token (401).", status=401)

    return Tool(
        name="hold",
        description="A GitLab tool: 401 unless the token is good.",
        input_model=HoldInput,
        handler=refuse,
        annotations=READ_ONLY,
        toolset="ci",
    )


async def test_rotated_passthrough_tokens_stop_reaching_gitlab_but_a_good_one_still_does(
    mcp_factory: MakeMcp,
) -> None:
    client = await mcp_factory(
        tools=[unauthorized_tool()],
        gitlab={"credential_mode": "passthrough", "token": None},
        limits={"passthrough_auth_failures": 3},
    )

    async def call(token: str) -> dict[str, Any]:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "hold", "arguments": {}, "_meta": modern_meta()},
        }
        headers = {
            "MCP-Protocol-Version": None,
            **modern_headers("tools/call", "hold"),
            "PRIVATE-TOKEN": token,
        }
        resp = await client.post(body, headers=headers, session=False)  # type: ignore[arg-type]
        result: dict[str, Any] = (await resp.json())["result"]
        return result

    good = "glpat-good-000000000000"
    assert not (await call(good)).get("isError")
    refusals = []
    for n in range(6):  # a new bogus token each time, from one address
        error = (await call(f"glpat-bad-{n:012d}"))["structuredContent"]["error"]
        refusals.append(error.get("limit", error["reason"]))
    assert refusals == ["unauthorized"] * 3 + ["gateway_passthrough_auth_failures"] * 3
    # A token GitLab accepted lately, from the same address, is never locked out.
    assert not (await call(good)).get("isError")


async def test_each_call_of_a_batch_counts_against_the_rate_limit_as_a_single_call(
    mcp_factory: MakeMcp,
) -> None:
    counter = Counter()
    client = await old_session(mcp_factory, counter, limits={"calls_per_second": 0.1, "burst": 3})
    answers = await (await client.post(calls(10), headers=OLD)).json()  # type: ignore[arg-type]
    refused = [a["result"]["structuredContent"]["error"] for a in answers if a["result"].get("isError")]
    assert counter.ran == 3 and len(refused) == 7  # the burst, then refusals: not ten GitLab calls
    assert {e["limit"] for e in refused} == {"gateway_agent_calls"}
