"""Bounded bodies and a bounded history: a send over the cap is refused, history pages within a budget."""

from __future__ import annotations

from tests.unit.broker.conftest import EnvFactory


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
        page = await env.ok("pm", "get_message_history", args)
        pages += 1
        assert page["messages"], page
        size = sum(len(m["body"]["text"]) if m["body"] else len(m["bodyPreview"]) for m in page["messages"])
        assert size <= 40_000
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
