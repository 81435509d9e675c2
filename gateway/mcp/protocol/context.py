"""What the protocol core takes with a message and gives back, free of any transport.

- :class:`RequestContext`: who asks (the :class:`~gateway.tools.caller.Caller`), in which era and
  revision, within which session, how the client's going away is seen (cancellation) and where
  events before the reply go (:class:`Events`: progress, log messages).
- :class:`Reply`: the answer to one request: an encoded JSON-RPC result or error, or nothing (a
  cancelled call), with the tool result whose delivery the transport settles.
- :class:`Report`: what the request's log line and metrics say (tool, outcome); the core fills
  it in, the transport reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.mcp.protocol.eras import Era
from gateway.mcp.protocol.wire import RpcError
from gateway.tools.caller import Caller
from gateway.tools.registry import ToolResult


class Events(Protocol):
    """Where a request's notifications go before its reply (an SSE stream over HTTP).

    ``open`` says the reply will follow events (a transport then answers with a stream); False
    when the client is gone. ``send`` writes one notification and says whether it reached the
    client. ``on_broken`` runs once when the client goes away; in the stateless era that is how
    a call is cancelled.
    """

    on_broken: Callable[[], None] | None

    async def open(self) -> bool: ...

    async def send(self, message: bytes) -> bool: ...


@dataclass(slots=True)
class Report:
    """What one request's log line and metrics say.

    Attributes:
        tool: the tool's declared name for ``tools/call``.
        outcome: ``ok``, ``error``, ``rejected``, a tool error reason, ``cancelled``...
    """

    tool: str | None = None
    outcome: str = "ok"


#: Opens a handshake session: ``(negotiated version, client capabilities) -> the session's
#: handle for logs``. The transport keeps sessions; the core only says when one begins.
OpenSession = Callable[[str, dict[str, Any]], str]


@dataclass(slots=True)
class RequestContext:
    """One request as the protocol core sees it.

    Attributes:
        request_id: the gateway's id of the request (logs, errors, GitLab's ``X-Request-Id``).
        caller: who asks, authenticated by the transport.
        era: the request's era.
        version: the revision it speaks (None: an ``initialize`` that is to negotiate it).
        client_capabilities: what the client declared (in ``_meta``, or at ``initialize``).
        session: the handshake session's number (cancellation reaches calls by it), else None.
        session_log_id: the session's handle for logs and spans.
        trace_carrier: where the caller's trace context may be (HTTP headers here).
        events: where notifications go before the reply; None: the reply only (batches).
        disconnected: whether the client went away, where that cancels a call answered without
            events (the stateless era); None elsewhere.
        open_session: opens a handshake session on ``initialize``.
        report: what the log line says, filled in by the core.
    """

    request_id: str
    caller: Caller
    era: Era
    version: str | None
    client_capabilities: Mapping[str, Any] = field(default_factory=dict)
    session: str | None = None
    session_log_id: str | None = None
    trace_carrier: Mapping[str, str] = field(default_factory=dict)
    events: Events | None = None
    disconnected: Callable[[], bool] | None = None
    open_session: OpenSession | None = None
    report: Report = field(default_factory=Report)


@dataclass(slots=True)
class Reply:
    """The answer to one request.

    Attributes:
        message: the encoded JSON-RPC response (result or error); None: no answer (cancelled).
        error: the error it carries, whose status a transport looks up; None for a result.
        result: the tool result it carries, whose ``on_delivered``/``on_abandoned`` the
            transport runs once it knows whether the message reached the client.
    """

    message: bytes | None
    error: RpcError | None = None
    result: ToolResult | None = None
