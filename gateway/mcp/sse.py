"""Server-Sent Events responses to a POST: framing, serialized writes and keep-alive comments.

Rules (MCP 2025-11-25 basic/transports#sending-messages-to-the-server, ``mcp_protocol.md`` §1.2
and §4):

- Headers ``Content-Type: text/event-stream``, ``Cache-Control: no-cache`` and
  ``X-Accel-Buffering: no`` (proxies such as nginx must not buffer the stream).
- The first event primes the stream: an ``id`` and empty ``data``.
- Each JSON-RPC message is one ``event: message`` with one ``data:`` line (compact JSON never
  holds a raw newline) and its own ``id`` (``<stream>.<n>``, unique within the process).
- An SSE comment ``: keepalive`` every ``server.keepalive_seconds`` keeps proxies and clients'
  byte-level read timeouts from closing a quiet stream; clients ignore comments.
- Writes go through one lock so a keep-alive never interleaves with a message.
- A failed write means the client is gone: the stream is marked broken and ``on_broken`` runs
  (the call is then abandoned, §4.5).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
from collections.abc import Callable, Mapping

from aiohttp import web
from prometheus_client import Gauge

log = logging.getLogger("gateway.mcp")

SSE_HEADERS: Mapping[str, str] = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
KEEPALIVE = b": keepalive\n\n"
# Event ids: a per-process random prefix and a counter (unique, cheap, not guessable as a set).
_PREFIX = secrets.token_hex(4)
_counter = itertools.count(1)


class SseStream:
    """One ``text/event-stream`` response.

    Args:
        request: the POST being answered.
        keepalive_seconds: interval of ``: keepalive`` comments.
        headers: extra response headers (``X-Request-Id``).
        gauge: ``sse_streams_open``, incremented while the stream is open.
        on_broken: called once when a write fails (client gone).
    """

    def __init__(
        self,
        request: web.Request,
        *,
        keepalive_seconds: float,
        headers: Mapping[str, str],
        gauge: Gauge | None = None,
        on_broken: Callable[[], None] | None = None,
    ) -> None:
        self._request = request
        self._keepalive_seconds = keepalive_seconds
        self.response = web.StreamResponse(status=200, headers={**SSE_HEADERS, **headers})
        self._gauge = gauge
        self.on_broken = on_broken
        self._lock = asyncio.Lock()
        self._keepalive: asyncio.Task[None] | None = None
        self._stream_id = f"{_PREFIX}{next(_counter):x}"
        self._seq = 0
        self._open = False
        self._finished = False
        self.broken = False

    async def open(self) -> bool:
        """Send the headers and the priming event, start keep-alives. False if the client is gone."""
        try:
            await self.response.prepare(self._request)
        except OSError:
            self._mark_broken()
            return False
        self._open = True
        if self._gauge is not None:
            self._gauge.inc()
        ok = await self._write(f"id: {self._next_id()}\ndata: \n\n".encode())
        if ok:
            self._keepalive = asyncio.create_task(self._keepalive_loop())
        return ok

    async def send(self, message: bytes, *, final: bool = False) -> bool:
        """Write one JSON-RPC message (compact JSON). True when the write succeeded.

        ``final`` marks the response: nothing but keep-alives is written after it, so a progress
        notification racing with the response is dropped rather than sent after it.
        """
        frame = b"id: " + self._next_id().encode() + b"\nevent: message\ndata: " + message + b"\n\n"
        return await self._write(frame, final=final)

    async def close(self) -> None:
        """Stop keep-alives and end the response (idempotent)."""
        if self._keepalive is not None:
            self._keepalive.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keepalive
            self._keepalive = None
        if not self._open:
            return
        self._open = False
        if self._gauge is not None:
            self._gauge.dec()
        if not self.broken:
            with contextlib.suppress(OSError):
                await self.response.write_eof()

    def _next_id(self) -> str:
        self._seq += 1
        return f"{self._stream_id}.{self._seq}"

    async def _write(self, data: bytes, *, final: bool = False, comment: bool = False) -> bool:
        if self.broken:
            return False
        async with self._lock:
            if self._finished and not comment:
                return False
            try:
                await self.response.write(data)
            except OSError:
                self._mark_broken()
                return False
            if final:
                self._finished = True
        return True

    def _mark_broken(self) -> None:
        if not self.broken:
            self.broken = True
            log.debug("SSE client went away")
            if self.on_broken is not None:
                self.on_broken()

    async def _keepalive_loop(self) -> None:
        while not self.broken:
            await asyncio.sleep(self._keepalive_seconds)
            if not await self._write(KEEPALIVE, comment=True):
                return
