"""Asking the client for input during a call, in both eras: input-required results with a sealed
request state (MCP 2026-07-28, SEP-2322) and requests on the call's stream (2025-11-25)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from gateway.mcp.protocol.input_required import StateSealer, request_digest
from gateway.mcp.protocol.wire import RpcError
from gateway.tools.context import ToolContext
from gateway.tools.input_requests import CannotAsk, elicit, sample
from gateway.tools.registry import Annotations, Tool
from tests.tampering import tampered
from tests.unit.mcp.conftest import MakeMcp
from tests.unit.mcp.helpers import Mcp, messages_of, modern_headers, modern_meta, parse_sse

ALL: dict[str, dict[str, object]] = {"elicitation": {}, "sampling": {}, "roots": {}}
YES = {"action": "accept", "content": {"ok": True}}


class AnyInput(BaseModel):
    model_config = ConfigDict(extra="allow")


def asking_tools(actions: list[str], onces: list[str | None] | None = None) -> list[Tool]:
    """``act``: asks a bound yes/no (its answers' ``once`` kept in ``onces``); ``greet``: an unbound question;
    ``two``: two rounds; ``sampled``: needs sampling."""
    form = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}

    async def act(ctx: ToolContext, args: AnyInput) -> dict[str, Any]:
        try:
            answers = await ctx.ask({"go": elicit("Go ahead?", form)})
        except CannotAsk as err:
            return {"refused": err.capability}
        actions.append("act")
        if onces is not None:
            onces.append(answers.once)
        return {"acted": True, "answer": answers["go"]}

    async def greet(ctx: ToolContext, args: AnyInput) -> dict[str, Any]:
        answers = await ctx.ask({"name": elicit("Name?", form, bound=False)})
        return {"answer": answers["name"]}

    async def two(ctx: ToolContext, args: AnyInput) -> dict[str, Any]:
        first = await ctx.ask({"a": elicit("A?", form)})
        second = await ctx.ask({"b": elicit("B?", form)})
        return {"a": first["a"], "b": second["b"]}

    async def sampled(ctx: ToolContext, args: AnyInput) -> dict[str, Any]:
        try:
            answers = await ctx.ask({"s": sample("Say hi", 10)})
        except CannotAsk as err:
            return {"refused": err.capability}
        return {"answer": answers["s"]}

    change = Annotations(read_only=False)
    return [
        Tool(name=n, description=n, input_model=AnyInput, handler=h, annotations=change, toolset="ci")
        for n, h in (("act", act), ("greet", greet), ("two", two), ("sampled", sampled))
    ]


async def call(
    client: Mcp, name: str, capabilities: dict[str, Any] | None = None, rpc_id: int = 1, **params: Any
) -> dict[str, Any]:
    meta = modern_meta()
    meta["io.modelcontextprotocol/clientCapabilities"] = ALL if capabilities is None else capabilities
    body = {
        "jsonrpc": "2.0",
        "id": rpc_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": params.pop("arguments", {"x": 1}), "_meta": meta, **params},
    }
    headers: dict[str, str | None] = {"MCP-Protocol-Version": None, **modern_headers("tools/call", name)}
    resp = await client.post(body, headers=headers, session=False)  # type: ignore[arg-type]  # None drops the header
    if resp.headers.get("Content-Type", "").startswith("text/event-stream"):
        return next(m for m in messages_of(parse_sse(await resp.text())) if "id" in m)
    return dict(await resp.json())


@pytest.fixture
def actions() -> list[str]:
    return []


@pytest.fixture
def onces() -> list[str | None]:
    return []


@pytest.fixture
async def client(mcp_factory: MakeMcp, actions: list[str], onces: list[str | None]) -> Mcp:
    return await mcp_factory(tools=asking_tools(actions, onces))


async def test_a_question_ends_the_call_input_required_and_the_retry_completes_it(
    client: Mcp, actions: list[str]
) -> None:
    first = (await call(client, "act"))["result"]
    assert first["resultType"] == "input_required"
    assert first["inputRequests"] == {
        "go": {
            "method": "elicitation/create",
            "params": {
                "message": "Go ahead?",
                "mode": "form",
                "requestedSchema": {
                    "type": "object",
                    "properties": {"ok": {"type": "boolean"}},
                    "required": ["ok"],
                },
            },
        }
    }
    assert isinstance(first["requestState"], str) and actions == []
    done = await call(client, "act", rpc_id=2, inputResponses={"go": YES}, requestState=first["requestState"])
    assert done["result"]["resultType"] == "complete"
    assert done["result"]["structuredContent"] == {"acted": True, "answer": YES}
    assert actions == ["act"]


async def test_the_same_answered_request_again_carries_the_same_once(
    client: Mcp, onces: list[str | None]
) -> None:
    """An action keys its "only once" on ``Answers.once`` (tests/unit/mcp/test_confirmations.py
    shows a confirmation acting once): a replay carries the same, a new question another."""
    state = (await call(client, "act"))["result"]["requestState"]
    for rpc_id in (2, 3):
        await call(client, "act", rpc_id=rpc_id, inputResponses={"go": YES}, requestState=state)
    other = (await call(client, "act", rpc_id=4))["result"]["requestState"]
    await call(client, "act", rpc_id=5, inputResponses={"go": YES}, requestState=other)
    assert onces[0] is not None and onces[0] == onces[1] != onces[2]


@pytest.mark.parametrize("change", ["tampered", "other_arguments", "garbage"])
async def test_a_state_altered_or_for_another_request_is_invalid_params(
    client: Mcp, actions: list[str], change: str
) -> None:
    state = (await call(client, "act"))["result"]["requestState"]
    arguments = {"x": 1}
    if change == "tampered":
        state = tampered(state, -4)
    elif change == "other_arguments":
        arguments = {"x": 2}
    else:
        state = "not-a-state"
    body = await call(
        client, "act", rpc_id=2, arguments=arguments, inputResponses={"go": YES}, requestState=state
    )
    assert body["error"]["code"] == -32602
    assert "requestState" in body["error"]["message"]
    assert actions == []


async def test_an_unasked_answer_to_a_bound_question_does_not_count(client: Mcp, actions: list[str]) -> None:
    body = await call(client, "act", inputResponses={"go": YES})
    assert body["result"]["resultType"] == "input_required"
    assert actions == []


async def test_an_unbound_question_takes_an_answer_sent_before_and_ignores_extra_keys(client: Mcp) -> None:
    answer = {"action": "accept", "content": {"ok": True}}
    body = await call(client, "greet", inputResponses={"name": answer, "extra": answer})
    assert body["result"]["resultType"] == "complete"
    assert body["result"]["structuredContent"] == {"answer": answer}


async def test_a_missing_answer_is_asked_again(client: Mcp) -> None:
    state = (await call(client, "act"))["result"]["requestState"]
    again = (await call(client, "act", rpc_id=2, inputResponses={"other": YES}, requestState=state))["result"]
    assert again["resultType"] == "input_required" and list(again["inputRequests"]) == ["go"]


async def test_answers_of_earlier_rounds_ride_in_the_state(client: Mcp) -> None:
    r1 = (await call(client, "two"))["result"]
    r2 = (await call(client, "two", rpc_id=2, inputResponses={"a": YES}, requestState=r1["requestState"]))[
        "result"
    ]
    assert list(r2["inputRequests"]) == ["b"] and r2["requestState"] != r1["requestState"]
    r3 = (await call(client, "two", rpc_id=3, inputResponses={"b": YES}, requestState=r2["requestState"]))[
        "result"
    ]
    assert r3["resultType"] == "complete" and r3["structuredContent"] == {"a": YES, "b": YES}


async def test_a_client_is_asked_only_what_it_declared(client: Mcp) -> None:
    body = await call(client, "sampled", capabilities={"elicitation": {}})
    assert body["result"]["structuredContent"] == {"refused": "sampling"}


def test_the_sealed_state_is_bound_to_caller_request_key_and_time() -> None:
    now = [1000.0]
    key, other_key = b"k" * 32, b"o" * 32
    sealer = StateSealer(key, ttl_seconds=60, clock=lambda: now[0])
    digest = request_digest("tools/call", "act", {"x": 1})
    state = sealer.seal("client-token:dev", digest, {"a": 1}, frozenset({"b"}))
    opened = sealer.open(state, "client-token:dev", digest)
    assert opened.answers == {"a": 1} and opened.asked == {"b"}
    assert "client-token" not in state and '"a"' not in state  # sealed, not just signed
    with pytest.raises(RpcError):
        sealer.open(state, "client-token:pm", digest)  # another caller
    with pytest.raises(RpcError):
        sealer.open(state, "client-token:dev", request_digest("tools/call", "act", {"x": 2}))
    with pytest.raises(RpcError):
        StateSealer(other_key).open(state, "client-token:dev", digest)  # another key
    assert StateSealer(other_key, key, clock=lambda: now[0]).open(
        state, "client-token:dev", digest
    )  # rotation
    now[0] += 61
    with pytest.raises(RpcError) as expired:
        sealer.open(state, "client-token:dev", digest)
    assert "expired" in expired.value.message


# -- 2025-11-25: a request on the call's stream ---------------------------------------------------


async def initialize(client: Mcp, capabilities: dict[str, Any]) -> None:
    resp = await client.post(
        {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": capabilities,
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
        headers={"MCP-Protocol-Version": None},  # type: ignore[dict-item]
        session=False,
    )
    client.session_id = resp.headers["Mcp-Session-Id"]
    client.version = "2025-11-25"


async def read_message(resp: Any) -> dict[str, Any]:
    """The next JSON-RPC message of an open SSE response."""
    data = b""
    while True:
        line = await asyncio.wait_for(resp.content.readline(), 5)
        assert line, "the stream ended"
        if line.startswith(b"data: ") and line.strip() != b"data:":
            data = line[len(b"data: ") :]
        elif line == b"\n" and data:
            return dict(json.loads(data))


@pytest.mark.parametrize("answer", ["yes", "error"])
async def test_a_session_is_asked_on_the_calls_stream_and_answers_by_post(
    client: Mcp, actions: list[str], answer: str
) -> None:
    await initialize(client, {"elicitation": {}})
    resp = await client.post(
        {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "act", "arguments": {}}}
    )
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    asked = await read_message(resp)
    assert asked["method"] == "elicitation/create" and asked["params"]["message"] == "Go ahead?"
    assert actions == []
    reply: dict[str, Any] = {"jsonrpc": "2.0", "id": asked["id"]}
    if answer == "yes":
        reply["result"] = YES
    else:
        reply["error"] = {"code": -32601, "message": "no elicitation here"}
    posted = await client.post(reply)
    assert posted.status == 202
    final = await read_message(resp)
    assert final["id"] == 7
    if answer == "yes":
        assert final["result"]["structuredContent"] == {"acted": True, "answer": YES}
        assert actions == ["act"]
    else:  # no answer: the tool is told it cannot ask
        assert final["result"]["structuredContent"] == {"refused": "elicitation"}
        assert actions == []


async def test_a_session_that_declared_no_elicitation_is_not_asked(client: Mcp, actions: list[str]) -> None:
    await initialize(client, {})
    body = await client.call("act", {})
    assert body["result"]["structuredContent"] == {"refused": "elicitation"}
