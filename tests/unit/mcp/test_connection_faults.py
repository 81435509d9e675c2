"""Clients that go away or stop reading: an upload cut short, a reader that stalls, a 2026-07-28
call whose connection closes before its JSON answer."""

from __future__ import annotations

import asyncio
import json
import logging
import socket

import pytest

from tests.unit.mcp.conftest import MakeMcp
from tests.unit.mcp.helpers import ACCEPT, Mcp, Probe, modern_headers, modern_meta


async def connect(
    client: Mcp, *, receive_buffer: int | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    sock = socket.socket()
    if receive_buffer is not None:  # set before connecting, so the window stays small
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", client.client.port))
    return await asyncio.open_connection(sock=sock)


def head(length: int, headers: dict[str, str] | None = None) -> bytes:
    lines = [
        "POST /mcp HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        f"Accept: {ACCEPT}",
        f"Content-Length: {length}",
        *(f"{k}: {v}" for k, v in (headers or {}).items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def access_line(caplog: pytest.LogCaptureFixture, seconds: float = 5.0) -> logging.LogRecord:
    for _ in range(int(seconds / 0.02)):
        found = [r for r in caplog.records if r.getMessage() == "mcp request"]
        if found:
            return found[0]
        await asyncio.sleep(0.02)
    raise AssertionError("no access line")


async def test_a_client_that_closes_in_the_middle_of_its_body_is_one_info_line(
    mcp_factory: MakeMcp, caplog: pytest.LogCaptureFixture
) -> None:
    client = await mcp_factory()
    caplog.set_level(logging.INFO, logger="gateway")
    for _ in range(2):  # once per aborted upload, every time
        caplog.clear()
        _, writer = await connect(client)
        writer.write(head(1000) + b'{"jsonrpc": "2.0", "id": 1,')
        await writer.drain()
        writer.close()
        line = await access_line(caplog)
        await asyncio.sleep(0.1)  # anything else it would log
        assert [(r.levelname, r.getMessage()) for r in caplog.records] == [("INFO", "mcp request")]
        assert line.outcome == "client_closed"  # type: ignore[attr-defined]
        assert line.exc_info is None
    metrics = await (await client.client.get("/metrics")).text()
    counted = [m for m in metrics.splitlines() if m.startswith("gateway_mcp_requests_total{")]
    assert next(m for m in counted if 'outcome="client_closed"' in m).endswith(" 2.0")
    assert not [m for m in counted if 'outcome="error"' in m]


async def test_an_answer_to_a_reader_that_stopped_reading_is_dropped_after_the_write_timeout(
    mcp_factory: MakeMcp, caplog: pytest.LogCaptureFixture
) -> None:
    client = await mcp_factory(server={"write_timeout_seconds": 0.5, "max_request_bytes": 4 * 1024 * 1024})
    await client.initialize()
    caplog.set_level(logging.INFO, logger="gateway")
    await client.rpc("ping")  # the test client's connection is open, and stays
    caplog.clear()
    # About 14 MB of answer (the text three times, in content and in structuredContent): more
    # than the kernel's buffers hold for a reader with a 4 KiB window.
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "x" * 2_400_000, "times": 3}},
        }
    ).encode()
    headers = {"Mcp-Session-Id": client.session_id or "", "MCP-Protocol-Version": client.version}
    _, writer = await connect(client, receive_buffer=4096)
    writer.write(head(len(body), headers) + body)
    await writer.drain()  # then never read
    runner = client.client.server.runner
    assert runner is not None and runner.server is not None
    server = runner.server
    try:
        for _ in range(250):
            if len(server.connections) == 1:  # the test client's own
                break
            await asyncio.sleep(0.02)
        assert len(server.connections) == 1  # ours dropped, with what it held
        line = await access_line(caplog)
        assert line.outcome == "write_timeout"  # type: ignore[attr-defined]
    finally:
        writer.close()


async def test_a_2026_call_answered_in_json_is_cancelled_when_its_connection_closes(
    mcp_factory: MakeMcp, probe: Probe, caplog: pytest.LogCaptureFixture
) -> None:
    client = await mcp_factory()
    caplog.set_level(logging.INFO, logger="gateway")
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "deliver_json", "arguments": {"wait": True}, "_meta": modern_meta()},
        }
    ).encode()
    _, writer = await connect(client)
    writer.write(head(len(body), modern_headers("tools/call", "deliver_json")) + body)
    await writer.drain()
    try:
        await asyncio.wait_for(probe.started.wait(), 5)
        writer.close()
        line = await access_line(caplog, seconds=3)
        assert line.outcome == "cancelled"  # type: ignore[attr-defined]
        assert "abandoned" not in probe.events and "delivered" not in probe.events
    finally:
        probe.release.set()
        writer.close()
