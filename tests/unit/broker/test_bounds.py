"""Bounded bodies and a bounded history: a send over the cap (or nested too deep to deliver) is
refused, history pages within a budget."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from gateway.broker.messages.sending import MAX_BODY_DEPTH
from gateway.mcp.protocol import wire
from tests.unit.broker.conftest import Env, EnvFactory


async def test_body_over_the_cap_is_refused_with_the_cap_named(make_env: EnvFactory) -> None:
    env = await make_env(broker={"max_message_bytes": 4096})
    await env.ok("pm", "send_message", {"to": "dev", "subject": "small", "body": {"text": "x" * 3000}})
    error = await env.err("pm", "send_message", {"to": "dev", "subject": "big", "body": {"text": "x" * 5000}})
    assert error["reason"] == "bad_request"
    assert "4096" in error["message"] and "broker.max_message_bytes" in error["message"]
    history = (await env.ok("pm", "get_message_history"))["messages"]
    assert [m["subject"] for m in history] == ["small"]


async def test_history_pages_within_a_byte_budget(make_env: EnvFactory) -> None:
    env = await make_env(
        broker={"max_message_bytes": 200_000, "history_page_bytes": 40_000, "history_item_bytes": 8192}
    )
    for i in range(12):
        text = ("y" if i % 3 == 0 else "s") * (100_000 if i % 3 == 0 else 2000)
        await env.ok("pm", "send_message", {"to": "dev", "subject": f"m{i}", "body": {"text": text}})

    seen: list[str] = []
    pages, after = 0, None
    while True:
        args: dict[str, object] = {"limit": 1000}
        if after:
            args["after"] = after
        result = await env.call("pm", "get_message_history", args)
        page = result.structured
        pages += 1
        assert page["messages"], page
        # The whole answer, structuredContent and its JSON text block, within the budget.
        answer = json.dumps({"jsonrpc": "2.0", "id": 1, "result": result.to_mcp()}, ensure_ascii=False)
        assert len(answer.encode()) <= 40_000
        for m in page["messages"]:
            big = int(m["subject"][1:]) % 3 == 0
            assert m["bodyTruncated"] is big
            if big:
                assert m["body"] is None and 0 < len(m["bodyPreview"]) <= 8192
        seen = [m["subject"] for m in page["messages"]] + seen
        if not page["page_info"]["has_next_page"]:
            assert page["page_info"]["end_cursor"] is None
            break
        after = page["page_info"]["end_cursor"]
    assert pages > 1
    assert seen == [f"m{i}" for i in range(12)]

    small = await env.ok("pm", "get_message_history", {"limit": 2})
    assert [m["subject"] for m in small["messages"]] == ["m10", "m11"]
    rest = await env.ok("pm", "get_message_history", {"limit": 2, "after": small["page_info"]["end_cursor"]})
    assert [m["subject"] for m in rest["messages"]] == ["m8", "m9"]

    error = await env.err("pm", "get_message_history", {"after": "bm90LWEtY3Vyc29y"})
    assert error["reason"] == "bad_request" and "end_cursor" in error["message"]
    assert error["invalid_arguments"] == ["after"]


_FAST_TIMER = {"timer_poll_seconds": 0.05, "purge_interval_seconds": 0.05}


async def _purged(env: Env, expected: float) -> float:
    """The purged counter once the timer loop has reached ``expected`` (or after 5 s)."""
    for _ in range(100):
        value = env.metrics.registry.get_sample_value("gateway_broker_messages_purged_total") or 0.0
        if value >= expected:
            return value
        await asyncio.sleep(0.05)
    return value


async def test_retention_purges_delivered_messages_by_count(make_env: EnvFactory) -> None:
    env = await make_env(broker={"retain_delivered_count": 2, **_FAST_TIMER})
    for i in range(5):
        await env.ok("pm", "send_message", {"to": "dev", "subject": f"m{i}", "body": {}})
    for _ in range(4):
        assert (await env.wait("dev"))["message"]
    assert await _purged(env, 2) == 2  # by the timer loop
    history = (await env.ok("pm", "get_message_history"))["messages"]
    # the two newest delivered are kept, and the queued one is never purged
    assert [(m["subject"], m["delivered"]) for m in history] == [("m2", True), ("m3", True), ("m4", False)]
    assert (await env.wait("dev"))["message"]["subject"] == "m4"


async def test_retention_purges_delivered_messages_by_age(make_env: EnvFactory) -> None:
    env = await make_env(broker={"retain_delivered_seconds": 0, **_FAST_TIMER})
    for i in range(3):
        await env.ok("pm", "send_message", {"to": "dev", "subject": f"m{i}", "body": {}})
    assert (await env.wait("dev"))["message"]["subject"] == "m0"
    # delivery times are stored to the second: purged within about a second
    assert await _purged(env, 1) == 1
    history = (await env.ok("pm", "get_message_history"))["messages"]
    assert [m["subject"] for m in history] == ["m1", "m2"]


def _nested(depth: int) -> dict[str, Any]:
    body: dict[str, Any] = {"leaf": True}
    for _ in range(depth - 1):
        body = {"a": body}
    return body


async def test_a_body_too_deep_to_deliver_is_refused_and_the_deepest_allowed_is_delivered(env: Env) -> None:
    error = await env.err(
        "pm", "send_message", {"to": "dev", "subject": "deep", "body": _nested(MAX_BODY_DEPTH + 1)}
    )
    assert error["reason"] == "bad_request" and error["limit"] == MAX_BODY_DEPTH
    assert error["message"].startswith(f"`body`: nested more than {MAX_BODY_DEPTH} objects or arrays deep")
    error = await env.err(
        "pm", "send_message", {"to": "dev", "subject": "deep", "body": {"list": [_nested(300)]}}
    )
    assert error["reason"] == "bad_request"
    deepest = _nested(MAX_BODY_DEPTH)
    await env.ok("pm", "send_message", {"to": "dev", "subject": "deepest", "body": deepest})
    result = await env.call("dev", "wait_for_message", {"timeout_sec": 0})
    assert result.structured["message"]["body"] == deepest
    # The answer the transport writes: a body that deep still encodes (255 levels at most).
    answer = json.loads(wire.response(1, {"structuredContent": result.structured, "isError": False}))
    assert answer["result"]["structuredContent"]["message"]["body"] == deepest
    history = (await env.ok("pm", "get_message_history"))["messages"]
    assert [m["subject"] for m in history] == ["deepest"]
