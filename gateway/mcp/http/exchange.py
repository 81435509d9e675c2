"""One POST, GET or DELETE to ``/mcp`` as the transport sees it: what its answer carries and what
its access line reports."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gateway.mcp.http.sessions import Session
from gateway.mcp.protocol.context import Report
from gateway.mcp.protocol.eras import Envelope, Era
from gateway.tools.caller import Caller


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
        envelope: a stateless request's ``_meta`` (None in the handshake era).
        session: the handshake session, once known.
        caller: the caller, once authenticated.
        method: the JSON-RPC method (``batch`` for an array), for logs and metrics.
        rpc_id: the JSON-RPC id once the body parsed (errors echo it).
        report: the tool and outcome, which the protocol core fills in.
        counted: the messages were already counted in ``mcp_requests`` (batches count each).
    """

    request_id: str
    headers: Mapping[str, str]
    remote: str = ""
    response_headers: dict[str, str] = field(default_factory=dict)
    era: Era = Era.HANDSHAKE
    envelope: Envelope | None = None
    session: Session | None = None
    caller: Caller | None = None
    method: str | None = None
    rpc_id: str | int | None = None
    report: Report = field(default_factory=Report)
    counted: bool = False
