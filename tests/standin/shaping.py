"""Faults that shape the stand-in's real answer instead of replacing it, and the TCP reset.

- ``graphql_partial``: the data GitLab computed, plus ``errors`` (GitLab does this when one field's
  resolver fails or times out: ``{"data": {...}, "errors": [{"message": "Internal server error",
  "path": [...]}]}``). The request is processed, so a mutation *is* applied.
- ``trickle``: the real status, headers and body, the body sent ``chunk`` bytes every ``seconds``
  (a slow proxy, a congested link): a per-read timeout never fires, only a deadline over the
  whole request does.
- ``reset``: the connection is aborted with a TCP RST (``SO_LINGER`` 0) instead of a FIN, as a
  load balancer or a crashed GitLab node does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from typing import Any

from aiohttp import web

SHAPING_KINDS = frozenset({"graphql_partial", "trickle"})


def reset_connection(request: web.Request) -> None:
    """Abort ``request``'s connection with a TCP RST."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def _with_errors(body: bytes, message: str) -> bytes:
    """``body`` (a GraphQL answer) with an error on its first top-level field; data kept."""
    try:
        payload: Any = json.loads(body)
    except ValueError:
        return body
    if not isinstance(payload, dict):
        return body
    data = payload.get("data")
    path = [next(iter(data))] if isinstance(data, dict) and data else []
    error = {"message": message, "locations": [{"line": 1, "column": 1}], "path": path}
    payload["errors"] = [*payload.get("errors", []), error]
    return json.dumps(payload).encode()


async def shape(
    request: web.Request,
    response: web.Response,
    kind: str,
    *,
    message: str | None,
    seconds: float,
    chunk: int,
) -> web.StreamResponse:
    """The shaped answer for ``kind`` (one of :data:`SHAPING_KINDS`)."""
    body = response.body if isinstance(response.body, bytes) else b""
    if kind == "graphql_partial":
        return web.Response(
            status=response.status,
            body=_with_errors(body, message or "Internal server error"),
            content_type="application/json",
        )
    stream = web.StreamResponse(status=response.status)
    for name in ("Content-Type",):
        if name in response.headers:
            stream.headers[name] = response.headers[name]
    stream.content_length = len(body)
    await stream.prepare(request)
    step = max(1, chunk)
    try:
        for start in range(0, len(body), step):
            await stream.write(body[start : start + step])
            await asyncio.sleep(seconds)
        await stream.write_eof()
    except (ConnectionResetError, RuntimeError):  # the client gave up: nothing more to send
        pass
    return stream
