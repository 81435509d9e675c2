"""Streamable HTTP framing of answers to a POST (JSON or Server-Sent Events) and delivery
acknowledgement. Nothing else: which answer to give is the protocol core's business.

Framing (MCP basic/transports#sending-messages-to-the-server, 2025-11-25 and 2026-07-28):

- JSON: one ``application/json`` body.
- SSE: ``Content-Type: text/event-stream``, ``Cache-Control: no-cache``, ``X-Accel-Buffering: no``
  (proxies such as nginx must not buffer the stream). Each JSON-RPC message is one
  ``event: message`` with one ``data:`` line (compact JSON never holds a raw newline). A handshake-era
  stream starts with a priming event (an ``id`` and empty ``data``) and gives every event an id
  (``<stream>.<n>``); a stateless (2026-07-28) stream has no ids, as it cannot be resumed.
- An SSE comment ``: keepalive`` every ``server.keepalive_seconds`` keeps proxies and clients'
  read timeouts from closing a quiet stream; clients ignore comments.

Delivery acknowledgement — the interface a message broker relies on (``wait_for_message`` acks a
message only once an agent has it):

- :meth:`SseStream.send` and :func:`write_json` return True only when the whole response was
  handed to an open connection (``StreamResponse.write``/``write_eof`` returned), False when the
  client was gone or the write failed. Before a response they look at the socket itself, so a
  client that closed while the process was busy is not taken for one still there.
- The caller then awaits the tool result's ``on_delivered`` (True) or ``on_abandoned`` (False),
  through :func:`gateway.mcp.http.delivery.settle`; exactly one of them runs per result. A result that
  asks for a read check gets a :class:`~gateway.mcp.http.receipts.Receipt` of the connection
  (:func:`receipt`, :meth:`SseStream.receipt`), taken right after the write.
- A stream's response event goes out in one write with the end of the stream, so a client that
  read the response has nothing left unread that would make its close a reset.
- When the client closes a stream the call is cancelled (``on_broken``); a watcher notices a
  closed connection within :data:`WATCH_SECONDS` even between keep-alives.
- Every write waits at most ``server.write_timeout_seconds`` for the client to take it. A client
  that stops reading would otherwise hold the answer's buffers, and its handler, for as long as
  its connection stays open; past the timeout the connection is aborted and the answer counts as
  not delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import secrets
import socket
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web
from prometheus_client import Gauge

from gateway.mcp.http.receipts import Receipt

log = logging.getLogger("gateway.mcp")

SSE_HEADERS: Mapping[str, str] = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
KEEPALIVE = b": keepalive\n\n"
#: How often an open stream checks that its client is still connected.
WATCH_SECONDS = 0.1
# Event ids: a per-process random prefix and a counter (unique, cheap, not guessable as a set).
_PREFIX = secrets.token_hex(4)
_counter = itertools.count(1)


def json_response(body: bytes | None, headers: Mapping[str, str], status: int = 200) -> web.Response:
    """An ``application/json`` response (``body`` None: an empty one, e.g. 202)."""
    if body is None:
        return web.Response(status=status, headers=headers)
    return web.Response(body=body, status=status, content_type="application/json", headers=headers)


async def write_json(request: web.Request, response: web.StreamResponse, write_timeout: float) -> bool:
    """Send ``response`` now; True when it was handed in full to the open connection."""
    if _peer_closed(request):
        return False
    return await send(request, response, write_timeout) is None


async def send(request: web.Request, response: web.StreamResponse, write_timeout: float) -> str | None:
    """Write ``response`` whole within ``write_timeout`` seconds. None when it was handed to the
    connection; ``write_timeout`` when the client did not take it in time (the connection is then
    aborted); ``client_gone`` when the connection failed."""
    try:
        async with asyncio.timeout(write_timeout):
            await response.prepare(request)
            await response.write_eof()
    except TimeoutError:
        abort(request)
        return "write_timeout"
    except (OSError, ConnectionError):
        return "client_gone"
    return None


def abort(request: web.Request) -> None:
    """Drop ``request``'s connection at once, with whatever it still had to send."""
    log.info("client did not read its answer within the write timeout; connection dropped")
    if request.transport is not None:
        request.transport.abort()


def connection_closed(request: web.Request) -> bool:
    """True once the event loop saw ``request``'s connection close."""
    return not _connected(request)


def receipt(request: web.Request) -> Receipt | None:
    """A :class:`Receipt` of ``request``'s connection, to learn whether the client reads the
    response just written (None when that cannot be told)."""
    return Receipt.take(request.transport)


def _connected(request: web.Request) -> bool:
    transport = request.transport
    return transport is not None and not transport.is_closing()


def _peer_closed(request: web.Request) -> bool:
    """The client already closed the connection, even if the event loop has not read that yet.

    A close that reached the socket while this process was busy (a database round trip, say) is
    seen by the loop only after the current task yields: an answer written before then is
    accepted by the socket and lost. Peeking at the socket (``MSG_PEEK``, nothing is consumed)
    finds the end of stream at once (a client that only half-closes is no worse off: aiohttp
    closes the connection at the end of stream anyway). Used before an answer whose delivery is
    acknowledged.
    """
    if not _connected(request):
        return True
    sock = request.transport.get_extra_info("socket") if request.transport is not None else None
    if sock is None:
        return False
    try:
        with socket.socket(fileno=os.dup(sock.fileno())) as peek:
            return peek.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False  # open, nothing to read
    except OSError:
        return True  # reset


class SseStream:
    """One ``text/event-stream`` response: the protocol core's ``Events`` of a request. Nothing
    is built or sent until :meth:`open`, so a request answered as JSON costs no stream.

    Args:
        request: the POST being answered.
        keepalive_seconds: interval of ``: keepalive`` comments.
        headers: extra response headers (``X-Request-Id``).
        write_timeout: longest wait for the client to take one write, seconds.
        resumable: handshake-era streams carry event ids and a priming event; stateless ones do not.
        gauge: ``sse_streams_open``, incremented while the stream is open.
        on_broken: called once when the client goes away.
    """

    def __init__(
        self,
        request: web.Request,
        *,
        keepalive_seconds: float,
        headers: Mapping[str, str],
        write_timeout: float,
        resumable: bool = True,
        gauge: Gauge | None = None,
        on_broken: Callable[[], None] | None = None,
    ) -> None:
        self._request = request
        self._keepalive_seconds = keepalive_seconds
        self._write_timeout = write_timeout
        self._headers = headers
        self._resumable = resumable
        self._gauge = gauge
        self.on_broken = on_broken
        self._tasks: list[asyncio.Task[None]] = []
        self._seq = 0
        self._open = False
        self._finished = False
        self.broken = False
        #: :meth:`open` was called: the answer is this stream (its :attr:`response`).
        self.started = False

    def _start(self) -> None:
        self.started = True
        self.response = web.StreamResponse(status=200, headers={**SSE_HEADERS, **self._headers})
        self._lock = asyncio.Lock()
        self._stream_id = f"{_PREFIX}{next(_counter):x}"

    async def open(self) -> bool:
        """Send the headers (and a handshake-era stream's priming event), start keep-alives and the
        connection watcher. False if the client is gone."""
        if self._open:
            return not self.broken
        if not self.started:
            self._start()
        if not await self._within_write_timeout(self.response.prepare(self._request)):
            return False
        self._open = True
        if self._gauge is not None:
            self._gauge.inc()
        ok = True
        if self._resumable:
            ok = await self._write(f"id: {self._next_id()}\ndata: \n\n".encode())
        if ok:
            self._tasks = [asyncio.create_task(self._keepalive_loop()), asyncio.create_task(self._watch())]
        return ok

    async def send(self, message: bytes, *, final: bool = False) -> bool:
        """Write one JSON-RPC message; True when it was written in full (see the module docs).

        ``final`` marks the response: it ends the stream (in the same write), so a progress
        notification racing with the response is dropped rather than sent after it.
        """
        if not self._open and not await self.open():
            return False
        if final and _peer_closed(self._request):
            self._mark_broken()
            return False
        head = b"id: " + self._next_id().encode() + b"\n" if self._resumable else b""
        return await self._write(head + b"event: message\ndata: " + message + b"\n\n", final=final)

    def receipt(self) -> Receipt | None:
        """A :class:`Receipt` of the stream's connection (see :func:`receipt`)."""
        return receipt(self._request)

    async def close(self) -> None:
        """Stop keep-alives and the watcher, and end the response (idempotent)."""
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        if not self._open:
            return
        self._open = False
        if self._gauge is not None:
            self._gauge.dec()
        if not self.broken:
            try:
                async with asyncio.timeout(self._write_timeout):
                    await self.response.write_eof()
            except TimeoutError:
                abort(self._request)
            except (OSError, ConnectionError):
                pass

    def _next_id(self) -> str:
        self._seq += 1
        return f"{self._stream_id}.{self._seq}"

    async def _write(self, data: bytes, *, final: bool = False) -> bool:
        if self.broken:
            return False
        async with self._lock:
            if self._finished:
                return False
            write = self.response.write_eof(data) if final else self.response.write(data)
            if not await self._within_write_timeout(write):
                return False
            if final:
                self._finished = True
        return True

    async def _within_write_timeout(self, write: Awaitable[object]) -> bool:
        """Await ``write`` within the write timeout; False, the stream marked broken (and the
        connection aborted on a timeout), when the client did not take it."""
        try:
            async with asyncio.timeout(self._write_timeout):
                await write
        except TimeoutError:
            abort(self._request)
            self._mark_broken()
            return False
        except (OSError, ConnectionError):
            self._mark_broken()
            return False
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
            if not await self._write(KEEPALIVE):
                return

    async def _watch(self) -> None:
        # A client that closed its stream is noticed here, not only at the next write: for the
        # stateless era closing the stream is how a call is cancelled.
        while not self.broken:
            await asyncio.sleep(WATCH_SECONDS)
            if not _connected(self._request):
                self._mark_broken()
