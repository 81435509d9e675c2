"""A GitLab stand-in at the socket level on 127.0.0.1, for what only a real connection shows:
a refused connection, a connection dropped after the request was read, a body trickled a byte at
a time, redirects and cookies. Each behaviour is an async function of the parsed request."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field


@dataclass
class Received:
    """One request as the server read it."""

    line: str
    headers: dict[str, str]
    body: bytes


Behaviour = Callable[[Received, asyncio.StreamWriter], Awaitable[bool]]
"""Answers one request on ``writer``; returns False to close the connection afterwards."""


def free_port() -> int:
    """A port with nothing listening on it (yet)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_response(status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> bytes:
    head = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}", "Content-Type: application/json"]
    head += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


@dataclass
class SocketGitLab:
    """Serves ``behaviour`` on 127.0.0.1:``port`` once :meth:`start` ran; records every request."""

    behaviour: Behaviour
    port: int = field(default_factory=free_port)
    received: list[Received] = field(default_factory=list)
    server: asyncio.Server | None = None
    connections: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        key, value = line.split(":", 1)
                        headers[key.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                request = Received(lines[0], headers, body)
                self.received.append(request)
                if not await self.behaviour(request, writer):
                    return
        finally:
            writer.close()
