"""Whether a client that was written an answer closed its connection without reading it.

Writing an answer into an open connection does not mean the client read it: the client may be
closing at that very moment, or close with the answer still unread in its receive buffer. In
both cases the client's TCP stack answers with a reset (RFC 9293 §3.6.1: a close while received
data is pending, or data arriving after the close, sends a RST to show that data was lost),
whereas a client that read what it was sent and then closed sends an orderly FIN, and one still
connected stays established.

:class:`Receipt` holds a duplicate of the connection's socket taken right after the write, so
the kernel socket stays alive (and its state readable) even when the server closes its own
descriptor; a short grace period later it reads the TCP state (``TCP_INFO``, Linux): ``CLOSE``
means the connection was reset. A client that sent anything after the answer (its next request
on a keep-alive connection) had read it, whatever ends that next exchange: a reset then does not
count. Elsewhere, and for non-TCP sockets, no receipt is taken and the answer counts as read once
written.

The check sees the TCP peer: behind a proxy that is the proxy, which usually reads everything
it is sent, so a client dropping its side there is not seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
from typing import Any

#: ``tcpi_state`` of a socket whose connection was reset (``TCP_CLOSE`` in linux/tcp_states.h).
TCP_CLOSE = 7
_TCP_INFO: int | None = getattr(socket, "TCP_INFO", None)
#: ``struct tcp_info`` (linux/tcp.h) up to ``tcpi_bytes_received``, a u64 at this offset (Linux 4.1+).
_BYTES_RECEIVED = struct.Struct("=Q")
_BYTES_RECEIVED_AT = 128
_INFO_LENGTH = _BYTES_RECEIVED_AT + _BYTES_RECEIVED.size


class Receipt:
    """A hold on the connection an answer was just written to (see the module docs)."""

    __slots__ = ("_received", "_sock")

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._received = self._info()[1]

    @classmethod
    def take(cls, transport: Any) -> Receipt | None:
        """A receipt for ``transport``'s connection (an asyncio transport), or None when its
        state cannot be read (not TCP, not Linux, already closed)."""
        if _TCP_INFO is None or transport is None or transport.is_closing():
            return None
        sock = transport.get_extra_info("socket")
        if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
            return None
        try:
            return cls(socket.socket(fileno=os.dup(sock.fileno())))
        except OSError:
            return None

    def _info(self) -> tuple[int | None, int | None]:
        """The connection's TCP state and bytes received from the client (None: unknown)."""
        assert _TCP_INFO is not None
        try:
            info = self._sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _INFO_LENGTH)
        except OSError:
            return None, None
        received = (
            _BYTES_RECEIVED.unpack_from(info, _BYTES_RECEIVED_AT)[0] if len(info) >= _INFO_LENGTH else None
        )
        return (info[0] if info else None), received

    def reset(self) -> bool:
        """True when the connection was reset and the client sent nothing since the answer: it
        never read what it was last sent."""
        state, received = self._info()
        return state == TCP_CLOSE and (received is None or received == self._received)

    async def reset_within(self, seconds: float) -> bool:
        """Wait ``seconds``, then :meth:`reset`; the receipt is closed afterwards (also when
        cancelled), which lets the kernel close a connection the server already let go."""
        try:
            await asyncio.sleep(seconds)
            return self.reset()
        finally:
            self.close()

    def close(self) -> None:
        """Let go of the connection."""
        with contextlib.suppress(OSError):
            self._sock.close()
