"""SSE answers, keep-alives, progress, cancellation, delivery callbacks and shutdown
(MCP 2025-11-25 basic/transports, basic/utilities/progress and cancellation)."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any

import pytest

from gateway.mcp.protocol.calls import ToolCall, await_call
from gateway.tools.registry import ToolResult
from tests.unit.mcp.conftest import MakeMcp
from tests.unit.mcp.helpers import (
    Mcp,
    Probe,
    SseEvent,
    make_tools,
    messages_of,
    modern_headers,
    modern_meta,
    parse_sse,
)


def call_body(
    rpc_id: int | str, name: str, arguments: dict[str, Any] | None = None, token: object = None
) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
    if token is not None:
        params["_meta"] = {"progressToken": token}
    return {"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": params}


async def read_event(resp: Any, timeout: float = 5.0) -> SseEvent:
    """The next SSE block (an event or a comment) of a streaming response."""
    raw = await asyncio.wait_for(resp.content.readuntil(b"\n\n"), timeout)
    assert raw, "stream ended"
    events = parse_sse(raw.decode())
    assert len(events) == 1
    return events[0]


async def cancel(client: Mcp, request_id: int | str) -> None:
    resp = await client.post(
        {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": request_id, "reason": "t"},
        }
    )
    assert resp.status == 202


async def metrics_text(client: Mcp) -> str:
    return str(await (await client.client.get("/metrics")).text())


# -- SSE framing ---------------------------------------------------------------------------


async def test_long_running_tool_answers_with_sse(mcp: Mcp, probe: Probe) -> None:
    probe.release.set()
    resp = await mcp.post(call_body(1, "wait"), headers={"X-Request-Id": "sse-1"})
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "text/event-stream"
    assert resp.headers["Cache-Control"] == "no-cache"
    assert resp.headers["X-Accel-Buffering"] == "no"
    assert resp.headers["X-Request-Id"] == "sse-1"
    events = parse_sse(await resp.text())
    priming = events[0]
    assert priming.id and priming.data == ""
    final = events[-1]
    assert final.event == "message"
    assert final.id and final.id != priming.id
    assert final.json() == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "content": [{"type": "text", "text": '{"done":true}'}],
            "structuredContent": {"done": True},
        },
    }


async def test_keepalive_comments_while_waiting(mcp_factory: MakeMcp, probe: Probe) -> None:
    client = await mcp_factory(server={"keepalive_seconds": 0.05})
    await client.initialize()
    resp = await client.post(call_body(1, "wait"))
    assert (await read_event(resp)).id  # priming
    comments = 0
    while comments < 2:
        event = await read_event(resp)
        assert event.comments == ["keepalive"] and not event.data
        comments += 1
    probe.release.set()
    rest = parse_sse(await resp.text())
    assert messages_of(rest)[-1]["result"]["structuredContent"] == {"done": True}
    assert "gateway_mcp_sse_streams_open 0.0" in await metrics_text(client)


async def test_sse_streams_open_gauge_counts_open_streams(mcp: Mcp, probe: Probe) -> None:
    resp = await mcp.post(call_body(1, "wait"))
    await read_event(resp)
    assert "gateway_mcp_sse_streams_open 1.0" in await metrics_text(mcp)
    probe.release.set()
    await resp.text()
    assert "gateway_mcp_sse_streams_open 0.0" in await metrics_text(mcp)


# -- progress ------------------------------------------------------------------------------


async def test_progress_only_with_a_token_strictly_increasing_then_the_response(mcp: Mcp) -> None:
    resp = await mcp.post(call_body(4, "progress", token="tok-1"))
    assert resp.headers["Content-Type"] == "text/event-stream"
    messages = messages_of(parse_sse(await resp.text()))
    notes = [m for m in messages if m.get("method") == "notifications/progress"]
    assert [n["params"] for n in notes] == [
        {"progressToken": "tok-1", "progress": 1},
        {"progressToken": "tok-1", "progress": 2},
        {"progressToken": "tok-1", "progress": 3.5},
    ]
    assert messages[-1]["id"] == 4
    assert messages[-1]["result"]["structuredContent"] == {"has_token": True}
    assert messages.index(messages[-1]) == len(messages) - 1


async def test_no_token_means_json_and_no_progress(mcp: Mcp) -> None:
    resp = await mcp.post(call_body(5, "progress"))
    assert resp.headers["Content-Type"].startswith("application/json")
    body = await resp.json()
    assert body["result"]["structuredContent"] == {"has_token": False}


async def test_progress_carries_total_and_message_and_integer_token(mcp: Mcp, probe: Probe) -> None:
    probe.release.set()
    resp = await mcp.post(call_body(6, "wait", {"steps": 2}, token=77))
    notes = [m for m in messages_of(parse_sse(await resp.text())) if "method" in m]
    assert [n["params"] for n in notes] == [
        {"progressToken": 77, "progress": 1, "total": 2, "message": "step 1"},
        {"progressToken": 77, "progress": 2, "total": 2, "message": "step 2"},
    ]


# -- cancellation --------------------------------------------------------------------------


async def test_cancelled_call_stops_and_gets_no_response(mcp: Mcp, probe: Probe) -> None:
    resp = await mcp.post(call_body("c-1", "wait"))
    await read_event(resp)
    await asyncio.wait_for(probe.started.wait(), 5)
    await cancel(mcp, "c-1")
    rest = await asyncio.wait_for(resp.text(), 5)
    assert messages_of(parse_sse(rest)) == []
    assert probe.events == ["wait cancelled"]
    text = await metrics_text(mcp)
    assert (
        'gateway_tool_calls_total{agent="anonymous",outcome="cancelled"'
        ',source="tool",tool="wait",toolset="broker"} 1.0' in text
    )
    assert 'gateway_mcp_requests_total{method="notifications/cancelled",outcome="ok"} 1.0' in text


async def test_cancelled_json_call_gets_an_empty_stream_not_202(mcp: Mcp, probe: Probe) -> None:
    task = asyncio.create_task(mcp.post(call_body(9, "deliver_json", {"wait": True})))
    await asyncio.wait_for(probe.started.wait(), 5)
    await cancel(mcp, 9)
    resp = await asyncio.wait_for(task, 5)
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "text/event-stream"
    assert await resp.read() == b""
    assert probe.events == []  # cancelled before any result: nothing to deliver or abandon


async def test_cancel_of_unknown_or_other_sessions_request_is_ignored(
    mcp_factory: MakeMcp, probe: Probe
) -> None:
    first = await mcp_factory()
    await first.initialize()
    other = Mcp(first.client, first.app)
    await other.initialize()
    resp = await first.post(call_body(1, "wait"))
    await read_event(resp)
    await cancel(other, 1)  # same JSON-RPC id, another session
    await cancel(first, 12345)  # unknown id
    probe.release.set()
    assert messages_of(parse_sse(await resp.text()))[-1]["result"]["structuredContent"] == {"done": True}


async def test_request_id_already_in_flight_is_refused(mcp: Mcp, probe: Probe) -> None:
    resp = await mcp.post(call_body(3, "wait"))
    await read_event(resp)
    dup = await mcp.post(call_body(3, "echo", {"text": "x"}))
    assert dup.status == 400
    assert "already in flight" in (await dup.json())["error"]["message"]
    probe.release.set()
    await resp.text()


async def test_delete_session_cancels_its_calls(mcp: Mcp, probe: Probe) -> None:
    resp = await mcp.post(call_body(1, "wait"))
    await read_event(resp)
    await asyncio.wait_for(probe.started.wait(), 5)
    assert (await mcp.client.delete("/mcp", headers={"Mcp-Session-Id": mcp.session_id or ""})).status == 204
    assert messages_of(parse_sse(await asyncio.wait_for(resp.text(), 5))) == []
    assert probe.events == ["wait cancelled"]


# -- delivery callbacks --------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["deliver", "deliver_json"])
async def test_on_delivered_after_the_response_was_written(mcp: Mcp, probe: Probe, tool: str) -> None:
    body = await mcp.call(tool, {})
    assert body["result"]["structuredContent"] == {"message": "hi"}
    assert probe.events == ["delivered"]


async def test_on_abandoned_when_the_client_went_away(mcp: Mcp, probe: Probe) -> None:
    resp = await mcp.post(call_body(1, "deliver", {"wait": True}))
    await read_event(resp)
    await asyncio.wait_for(probe.started.wait(), 5)
    resp.close()
    await asyncio.sleep(0.05)  # let the server see the closed connection
    probe.release.set()
    for _ in range(100):
        if probe.events:
            break
        await asyncio.sleep(0.01)
    assert probe.events == ["abandoned"]


async def test_client_gone_is_noticed_by_keepalive_and_cancels_the_wait(
    mcp_factory: MakeMcp, probe: Probe
) -> None:
    client = await mcp_factory(server={"keepalive_seconds": 0.02})
    await client.initialize()
    resp = await client.post(call_body(1, "wait"))
    await read_event(resp)
    await asyncio.wait_for(probe.started.wait(), 5)
    resp.close()
    for _ in range(200):
        if probe.events:
            break
        await asyncio.sleep(0.01)
    assert probe.events == ["wait cancelled"]


async def test_client_gone_with_aiohttp_handler_cancellation_cancels_the_wait(
    mcp_factory: MakeMcp, probe: Probe
) -> None:
    client = await mcp_factory(handler_cancellation=True)
    await client.initialize()
    resp = await client.post(call_body(1, "wait"))
    await read_event(resp)
    await asyncio.wait_for(probe.started.wait(), 5)
    resp.close()
    for _ in range(200):
        if probe.events:
            break
        await asyncio.sleep(0.01)
    assert probe.events == ["wait cancelled"]
    assert "gateway_mcp_sse_streams_open 0.0" in await metrics_text(client)


async def test_result_that_races_with_cancel_is_abandoned() -> None:
    """The handler finished just as notifications/cancelled arrived: no response, on_abandoned."""
    events: list[str] = []

    async def abandoned() -> None:
        events.append("abandoned")

    async def handler() -> ToolResult:
        return ToolResult(structured={"m": 1}, on_abandoned=abandoned)

    task = asyncio.create_task(handler())
    await task
    call = ToolCall(make_tools(Probe())[0], 1, task)
    call.cancel("client")
    outcome = await await_call(call, "rid")
    assert outcome.message is None
    assert outcome.outcome == "cancelled"
    assert outcome.result is task.result()


async def test_result_returned_while_the_handler_unwinds_a_server_cancel_is_abandoned() -> None:
    """aiohttp cancelled the HTTP handler; the tool, cancelled in turn, still returns a result
    (a message it had already taken): that result reaches on_abandoned before the cancel goes on."""
    events: list[str] = []
    started = asyncio.Event()

    async def abandoned() -> None:
        await asyncio.sleep(0)  # a real callback awaits (re-queues a message)
        events.append("abandoned")

    async def handler() -> ToolResult:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await asyncio.sleep(0.01)  # unwinding takes a moment
        return ToolResult(structured={"m": 1}, on_abandoned=abandoned)

    call = ToolCall(make_tools(Probe())[0], 1, asyncio.create_task(handler()))
    waiter = asyncio.create_task(await_call(call, "rid"))
    await asyncio.wait_for(started.wait(), 5)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert call.cancel_reason == "server"
    assert events == ["abandoned"]


# -- shutdown ------------------------------------------------------------------------------


async def test_shutdown_ends_long_running_streams_at_once(mcp: Mcp, probe: Probe) -> None:
    resp = await mcp.post(call_body(1, "wait"))
    await read_event(resp)
    await asyncio.wait_for(probe.started.wait(), 5)
    started = time.monotonic()
    await mcp.app.shutdown()
    messages = messages_of(parse_sse(await asyncio.wait_for(resp.text(), 5)))
    assert time.monotonic() - started < 1.0
    assert messages == [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "error": {
                "code": -32000,
                "message": "The gateway is shutting down and stopped wait; call it again in a few seconds, "
                "once the gateway is back.",
            },
        }
    ]
    assert probe.events == ["wait cancelled"]


# -- read checks -----------------------------------------------------------------------------


async def _raw_call(mcp: Mcp, tool: str, modern: bool) -> socket.socket:
    """A ``tools/call`` of ``tool`` with a 0.5 s read check, sent on a raw connection."""
    params: dict[str, Any] = {"name": tool, "arguments": {"check": 0.5}}
    headers = mcp.request_headers()
    if modern:
        params["_meta"] = modern_meta()
        headers = {k: v for k, v in headers.items() if k != "Mcp-Session-Id"}
        headers.update(modern_headers("tools/call", tool))
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}).encode()
    server = mcp.client.server
    head = f"POST /mcp HTTP/1.1\r\nHost: {server.host}:{server.port}\r\nContent-Length: {len(body)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    sock = socket.create_connection((server.host, server.port), timeout=5)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_sendall(sock, head.encode() + b"\r\n" + body)
    return sock


async def _answered(sock: socket.socket) -> None:
    """Until the answer's first byte has arrived (a fixed sleep lost the race on a loaded machine:
    the close came before the answer, so nothing was abandoned)."""
    for _ in range(1000):
        try:
            if sock.recv(1, socket.MSG_PEEK):
                return
        except BlockingIOError:
            pass
        await asyncio.sleep(0.01)
    raise AssertionError("no answer within 10 s")


async def _settled(probe: Probe) -> list[str]:
    for _ in range(1000):
        if probe.events:
            break
        await asyncio.sleep(0.01)
    return probe.events


@pytest.mark.parametrize("modern", [False, True], ids=["legacy", "modern"])
@pytest.mark.parametrize("tool", ["deliver", "deliver_json"])
async def test_an_answer_left_unread_by_a_closing_client_is_abandoned(
    mcp: Mcp, probe: Probe, tool: str, modern: bool
) -> None:
    sock = await _raw_call(mcp, tool, modern)
    await _answered(sock)  # and unread: peeked, left in the socket's buffer
    sock.close()  # which resets the connection
    assert await _settled(probe) == ["abandoned"]


@pytest.mark.parametrize("modern", [False, True], ids=["legacy", "modern"])
@pytest.mark.parametrize("tool", ["deliver", "deliver_json"])
async def test_an_answer_read_before_the_close_is_delivered_after_the_check(
    mcp: Mcp, probe: Probe, tool: str, modern: bool
) -> None:
    sock = await _raw_call(mcp, tool, modern)
    loop = asyncio.get_running_loop()
    received = b""
    while b'"hi"' not in received or (tool == "deliver" and not received.endswith(b"0\r\n\r\n")):
        chunk = await asyncio.wait_for(loop.sock_recv(sock, 1 << 16), 5)
        assert chunk, received
        received += chunk
    sock.close()
    await asyncio.sleep(0.2)
    assert probe.events == []  # settled only once the check is over
    assert await _settled(probe) == ["delivered"]


async def test_shutdown_finishes_the_read_checks_under_way(mcp: Mcp, probe: Probe) -> None:
    sock = await _raw_call(mcp, "deliver_json", modern=False)
    loop = asyncio.get_running_loop()
    received = b""
    while b'"hi"' not in received:
        received += await asyncio.wait_for(loop.sock_recv(sock, 1 << 16), 5)
    with sock:
        await mcp.client.close()  # while the client is still connected, within the check
        assert probe.events == ["delivered"]  # settled before the app's services closed
