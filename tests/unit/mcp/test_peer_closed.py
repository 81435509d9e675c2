"""An answer whose delivery is acknowledged is not written to a client that already closed, even
when the event loop has not yet read that close (the process was busy, e.g. in a database call)."""

from __future__ import annotations

import socket
from typing import Any, cast

from aiohttp import web

from gateway.mcp.http.framing import _peer_closed


class _Transport:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def is_closing(self) -> bool:
        return False  # the loop has not seen the close yet

    def get_extra_info(self, name: str) -> Any:
        return self.sock if name == "socket" else None


class _Request:
    def __init__(self, sock: socket.socket) -> None:
        self.transport = _Transport(sock)


def _pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
    return accepted, client


def test_an_open_connection_is_open() -> None:
    served, client = _pair()
    with served, client:
        assert not _peer_closed(cast(web.Request, _Request(served)))


def test_a_pending_request_on_the_connection_is_left_unread() -> None:
    served, client = _pair()
    with served, client:
        client.sendall(b"POST /mcp HTTP/1.1\r\n")
        assert not _peer_closed(cast(web.Request, _Request(served)))
        assert served.recv(100) == b"POST /mcp HTTP/1.1\r\n"  # nothing was consumed


def test_a_client_that_closed_is_seen_before_the_loop_reads_it() -> None:
    served, client = _pair()
    with served:
        client.close()
        assert _peer_closed(cast(web.Request, _Request(served)))
