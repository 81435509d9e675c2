"""A receipt tells a client that closed with the answer unread (a reset) from one that read it."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.mcp.http.framing import _peer_closed
from gateway.mcp.http.receipts import Receipt

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="TCP_INFO is read on Linux only")


class _Transport:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str) -> Any:
        return self.sock if name == "socket" else None


def _pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
    return accepted, client


def _written(served: socket.socket) -> Receipt:
    served.sendall(b"answer")
    receipt = Receipt.take(_Transport(served))
    assert receipt is not None
    return receipt


async def test_a_client_still_connected_has_not_reset() -> None:
    served, client = _pair()
    with served, client:
        assert not await _written(served).reset_within(0.05)


async def test_a_client_that_read_the_answer_and_closed_has_not_reset() -> None:
    served, client = _pair()
    with served:
        receipt = _written(served)
        assert client.recv(100) == b"answer"
        client.close()
        assert not await receipt.reset_within(0.05)


async def test_a_client_that_closed_with_the_answer_unread_has_reset() -> None:
    served, client = _pair()
    with served:
        receipt = _written(served)
        time.sleep(0.02)  # the answer reached the client's buffer
        client.close()
        assert await receipt.reset_within(0.05)


async def test_an_answer_arriving_after_the_close_is_a_reset_even_once_the_server_let_go() -> None:
    served, client = _pair()
    client.close()
    time.sleep(0.02)
    receipt = _written(served)
    served.close()  # the server's own descriptor: the receipt keeps the connection readable
    assert await receipt.reset_within(0.05)


async def test_a_reset_after_the_client_sent_its_next_request_is_not_counted() -> None:
    served, client = _pair()
    with served:
        receipt = _written(served)
        assert client.recv(100) == b"answer"
        client.sendall(b"POST /mcp HTTP/1.1\r\n")  # its next request: it had read the answer
        served.sendall(b"next answer")
        time.sleep(0.02)
        client.close()  # the next answer unread: a reset, which is about that one
        assert not await receipt.reset_within(0.05)


def test_no_receipt_for_a_closed_transport_or_a_unix_socket() -> None:
    class Closing(_Transport):
        def is_closing(self) -> bool:
            return True

    served, client = _pair()
    with served, client:
        assert Receipt.take(Closing(served)) is None
    left, right = socket.socketpair()
    with left, right:
        assert Receipt.take(_Transport(left)) is None


class _Accepted(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Future[asyncio.BaseTransport] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport.set_result(transport)


@contextlib.asynccontextmanager
async def _served_by_the_loop() -> AsyncIterator[tuple[Any, socket.socket]]:
    """A connection accepted by the running event loop (the transport aiohttp would answer on,
    whose ``socket`` is uvloop's stand-in object under uvloop) and its client's socket."""
    accepted = _Accepted()
    server = await asyncio.get_running_loop().create_server(lambda: accepted, "127.0.0.1", 0)
    client = socket.create_connection(server.sockets[0].getsockname()[:2])
    client.settimeout(5)
    try:
        transport = await asyncio.wait_for(accepted.transport, 5)
        try:
            assert transport.get_extra_info("socket").family == socket.AF_INET
            yield transport, client
        finally:
            transport.close()
    finally:
        client.close()
        server.close()
        await server.wait_closed()


@pytest.mark.both_loops
async def test_an_event_loop_transport_tells_a_read_answer_from_an_unread_one() -> None:
    async with _served_by_the_loop() as (transport, client):
        transport.write(b"answer")
        receipt = Receipt.take(transport)
        assert receipt is not None
        assert client.recv(100) == b"answer"
        client.close()
        assert not await receipt.reset_within(0.05)
    async with _served_by_the_loop() as (transport, client):
        transport.write(b"answer")
        receipt = Receipt.take(transport)
        assert receipt is not None
        time.sleep(0.02)  # the answer reached the client's buffer
        client.close()
        assert await receipt.reset_within(0.05)


@pytest.mark.both_loops
async def test_an_event_loop_transport_shows_a_close_the_loop_has_not_read_yet() -> None:
    class Request:
        def __init__(self, transport: Any) -> None:
            self.transport = transport

    async with _served_by_the_loop() as (transport, client):
        assert not _peer_closed(Request(transport))  # type: ignore[arg-type]
        client.close()
        time.sleep(0.02)  # the close reached the server's socket; the loop has not run since
        assert _peer_closed(Request(transport))  # type: ignore[arg-type]
