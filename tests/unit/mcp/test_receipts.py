"""A receipt tells a client that closed with the answer unread (a reset) from one that read it."""

from __future__ import annotations

import socket
import sys
import time
from typing import Any

import pytest

from gateway.mcp.receipts import Receipt

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
