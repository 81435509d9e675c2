"""Text no request may carry (lone UTF-16 surrogates, control characters) is refused at the edge
with a clear JSON-RPC error: never an HTTP 500, never a traceback, and nothing reaches a tool."""

from __future__ import annotations

import logging

import pytest

from tests.unit.mcp.helpers import Mcp, Probe

CALL = '{"jsonrpc": "2.0", "id": %s, "method": "tools/call", "params": {"name": %s, "arguments": %s}}'


@pytest.mark.parametrize(
    ("body", "echoed_id"),
    [
        (CALL % ('"\\ud800"', '"echo"', '{"text": "x"}'), None),  # the id itself
        (CALL % ("1", '"\\udc00"', "{}"), 1),  # the tool name
        (CALL % ("2", '"echo"', '{"text": "a\\ud83db"}'), 2),  # an argument
        (CALL % ("3", '"echo"', '{"\\ud800": "x"}'), 3),  # a key
        (CALL % ("4", '"echo"', '{"text": "a\\u0000b"}'), 4),  # NUL
        (CALL % ("5", '"echo"', '{"text": "\\u001b[31mred"}'), 5),  # ESC
        ('{"jsonrpc": "2.0", "id": 6, "method": "tools/\\u0000call"}', 6),  # the method
    ],
)
async def test_bad_text_is_a_clear_400(
    mcp: Mcp, probe: Probe, caplog: pytest.LogCaptureFixture, body: str, echoed_id: int | None
) -> None:
    caplog.set_level(logging.INFO)
    resp = await mcp.post(body.encode())
    assert resp.status == 400
    answer = await resp.json()
    assert answer["error"]["code"] == -32600
    assert answer.get("id") == echoed_id
    assert ("surrogate" in answer["error"]["message"]) or ("control character" in answer["error"]["message"])
    assert not probe.contexts
    assert not any(r.exc_info for r in caplog.records)
    # The connection and the session still work.
    assert (await mcp.call("echo", {"text": "ok"}))["result"]["structuredContent"] == {"text": "ok"}


async def test_tabs_and_line_breaks_are_fine(mcp: Mcp) -> None:
    body = await mcp.call("echo", {"text": "a\tb\nc\r\n"})
    assert body["result"]["structuredContent"] == {"text": "a\tb\nc\r\n"}
