"""A message whose answer the client never read stays queued, for agents that do not acknowledge
(broker.md "Delivery"): a client that closes its connection with the answer unread resets it,
and the gateway takes the message back; one that read the answer and closed has it delivered.

The app serves on a real loopback socket (aiohttp's test server, handlers not cancelled on a
disconnect, as ``web.run_app`` serves): the reset is the kernel's, as with the installed gateway.
The raw socket's blocking reads run in a thread, so the app keeps serving on this event loop.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
import pytest

from gateway.tools import broker as broker_tools
from tests.e2e.broker_agent import BrokerAgent
from tests.unit.mcp.conftest import MakeMcp

pytestmark = pytest.mark.timeout(60)


def _open_wait(url: str, agent: BrokerAgent) -> socket.socket:
    """A raw connection carrying one ``wait_for_message``, its stream open (headers received)."""
    parts = urlsplit(url)
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 99,
            "method": "tools/call",
            "params": {"name": "wait_for_message", "arguments": {"timeout_sec": 20}},
        }
    ).encode()
    head = f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Length: {len(body)}\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in agent.headers.items())
    sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
    sock.sendall(head.encode() + b"\r\n" + body)
    _peek_until(sock, b"\r\n\r\n")
    return sock


def _peek_until(sock: socket.socket, needle: bytes) -> bytes:
    """What the connection received so far, left unread, once it holds ``needle``."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        seen = sock.recv(1 << 16, socket.MSG_PEEK)
        if needle in seen:
            return seen
        if not seen:
            break
        time.sleep(0.01)
    raise AssertionError(f"{needle!r} not received")


async def _send(url: str, http: httpx.AsyncClient) -> str:
    pm = await BrokerAgent(url, "pm").open(http)
    out = await pm.call(http, "send_message", {"to": "dev", "subject": "work", "body": {"n": 1}})
    return str(out["messageId"])


async def _next(url: str, http: httpx.AsyncClient, timeout: float) -> dict[str, object] | None:
    dev = await BrokerAgent(url, "dev").open(http)
    message = (await dev.call(http, "wait_for_message", {"timeout_sec": timeout}))["message"]
    return dict(message) if message else None


@dataclass
class Waiting:
    """dev's ``wait_for_message`` open on a raw connection, and the message pm sent it."""

    url: str
    http: httpx.AsyncClient
    sock: socket.socket
    sent: str


@pytest.fixture
async def waiting(mcp_factory: MakeMcp, broker_database_at_head: str | None) -> AsyncIterator[Waiting]:
    mcp = await mcp_factory(
        tools=broker_tools.TOOLS,
        broker={"read_check_seconds": 1, "database_url": broker_database_at_head},
    )
    url = str(mcp.client.make_url("/mcp"))
    async with httpx.AsyncClient(timeout=30, trust_env=False) as http:
        dev = await BrokerAgent(url, "dev").open(http)
        sock = await asyncio.to_thread(_open_wait, url, dev)
        try:
            yield Waiting(url, http, sock, await _send(url, http))
        finally:
            sock.close()


async def test_an_answer_left_unread_is_delivered_again(waiting: Waiting) -> None:
    assert waiting.sent.encode() in await asyncio.to_thread(_peek_until, waiting.sock, b'"messageId"')
    waiting.sock.close()  # the answer is still unread: the client's kernel resets the connection
    message = await _next(waiting.url, waiting.http, 10)
    assert message is not None
    assert message["messageId"] == waiting.sent
    assert message["deliveryAttempt"] == 2


async def test_an_answer_read_before_the_close_is_delivered_once(waiting: Waiting) -> None:
    received = b""
    while b"\r\n0\r\n\r\n" not in received:  # the event and the end of the stream: all of it
        chunk = await asyncio.to_thread(waiting.sock.recv, 1 << 16)
        assert chunk, received
        received += chunk
    waiting.sock.close()
    assert waiting.sent.encode() in received
    assert await _next(waiting.url, waiting.http, 3) is None  # past the read check and more
