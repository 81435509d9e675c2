"""What the dispatcher and the HTTP side share about one request, free of aiohttp.

- :class:`Exchange`: one POST to ``/mcp`` as the MCP layer sees it (era, session, caller) and
  what its log line and metrics report.
- :class:`Reply`: the answer the dispatcher gives back when it is a single JSON message.
- :class:`EventStream`: the interface of the response stream the dispatcher writes to when a
  request is answered with events (progress, then the result). ``gateway.mcp.streamable_http``
  implements it as Server-Sent Events.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from gateway.mcp.auth import Identity
from gateway.mcp.eras import Envelope, Era
from gateway.mcp.receipts import Receipt
from gateway.mcp.sessions import Session
from gateway.tools.registry import ToolResult


@dataclass
class Exchange:
    """One HTTP request to ``/mcp``.

    Attributes:
        request_id: the gateway's request id (``X-Request-Id``).
        headers: the request's headers (case-insensitive mapping).
        remote: the peer address, for logs.
        response_headers: headers every response to it carries (``X-Request-Id``,
            ``Mcp-Session-Id``).
        era: the protocol era it speaks.
        envelope: a modern request's ``_meta`` (None in the legacy era).
        session: the legacy session, once known.
        identity: the caller, once authenticated.
        method: the JSON-RPC method (``batch`` for an array), for logs and metrics.
        rpc_id: the JSON-RPC id once the body parsed (errors echo it).
        tool: the tool's declared name for ``tools/call``.
        outcome: ``ok``, ``error``, ``rejected``, a tool error reason, ``cancelled``...
        counted: the messages were already counted in ``mcp_requests`` (batches count each).
        connection_closed: whether the client closed the connection, where that cancels the
            request (the 2026-07-28 era); None elsewhere.
    """

    request_id: str
    headers: Mapping[str, str]
    remote: str = ""
    response_headers: dict[str, str] = field(default_factory=dict)
    era: Era = Era.LEGACY
    envelope: Envelope | None = None
    session: Session | None = None
    identity: Identity | None = None
    method: str | None = None
    rpc_id: str | int | None = None
    tool: str | None = None
    outcome: str = "ok"
    counted: bool = False
    connection_closed: Callable[[], bool] | None = None

    @property
    def version(self) -> str:
        """The protocol revision of this request."""
        if self.envelope is not None:
            return self.envelope.protocol_version
        assert self.session is not None, "a legacy request is served within a session"
        return self.session.protocol_version


@dataclass
class Reply:
    """A JSON answer (or none: ``body`` None is an empty 202).

    Attributes:
        body: the encoded JSON-RPC message.
        status: the HTTP status.
        result: the tool result it carries, whose ``on_delivered``/``on_abandoned`` the writer
            runs once it knows whether the body was written (see ``streamable_http``).
    """

    body: bytes | None
    status: int = 200
    result: ToolResult | None = None


class EventStream(Protocol):
    """A response stream of one request: notifications about it, then its response.

    ``open`` sends the headers; ``send`` writes one message and says whether it was written in
    full to the open connection (False: the client is gone); ``final`` marks the response, which
    ends the stream. ``receipt`` takes a hold on the connection right after the response, to learn
    whether the client read it. ``on_broken`` runs once when the client goes away; for the modern
    era that is how a call is cancelled.
    """

    on_broken: Callable[[], None] | None

    async def open(self) -> bool: ...

    async def send(self, message: bytes, *, final: bool = False) -> bool: ...

    def receipt(self) -> Receipt | None: ...

    async def close(self) -> None: ...


StreamFactory = Callable[[], EventStream]
