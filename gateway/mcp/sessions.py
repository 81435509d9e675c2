"""MCP sessions (``Mcp-Session-Id``): creation at ``initialize``, an idle TTL and a cap.

Rules (MCP 2025-11-25 basic/transports#session-management, ``mcp_protocol.md`` §1.2):

- The id is random (``secrets``, 256 bits) and made of visible ASCII only (``[A-Za-z0-9_-]``).
- A session expires after ``server.session_ttl_seconds`` without a request; a session with a
  call in flight does not expire (a long ``wait_for_message`` is activity).
- At ``server.max_sessions`` a new ``initialize`` first drops expired sessions, then evicts the
  least recently used idle session (its client gets 404 and initializes again, as the spec asks
  of clients); when every session has a call in flight, the new one is refused
  (:class:`SessionsFull` → HTTP 503).
- A session remembers its owner (the authenticated caller, see ``auth.Principal`` keys) so an
  id presented by another caller is "not found" (MCP security best practices, session hijacking).

Expiry is checked lazily on each lookup and creation (an ``OrderedDict`` kept in last-use order,
so the sweep stops at the first live session): no background task.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from prometheus_client import Gauge


class Cancellable(Protocol):
    """A call in flight that the session can stop (``tools/call`` runs, see ``calls``)."""

    def cancel(self, reason: str) -> None:
        """Stop the call; ``reason`` says why (``client``, ``session_closed``, ...)."""


class SessionsFull(Exception):
    """Every session slot holds a session with a call in flight."""


@dataclass(eq=False)
class Session:
    """One MCP session.

    Attributes:
        id: the ``Mcp-Session-Id`` value.
        protocol_version: the negotiated revision.
        owner: key of the caller that created it (None when callers are not authenticated).
        client_info: the client's ``clientInfo`` from ``initialize`` (name, version), for logs.
        initialized: ``notifications/initialized`` arrived.
        last_seen: monotonic seconds of the last request.
        inflight: JSON-RPC id → running ``tools/call`` (for ``notifications/cancelled``).
    """

    id: str
    protocol_version: str
    owner: str | None
    client_info: dict[str, Any] | None
    last_seen: float
    initialized: bool = False
    inflight: dict[str | int, Cancellable] = field(default_factory=dict)

    @property
    def log_id(self) -> str:
        """A prefix of the id for logs: enough to correlate, too short to reuse the session."""
        return self.id[:8]


class SessionStore:
    """All open sessions of one app.

    Args:
        ttl_seconds: idle time after which a session is gone (``server.session_ttl_seconds``).
        max_sessions: cap on open sessions (``server.max_sessions``).
        gauge: ``sessions_open`` metric, kept equal to the number of sessions.
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        *,
        ttl_seconds: float,
        max_sessions: int,
        gauge: Gauge | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl_seconds
        self.max_sessions = max_sessions
        self.clock = clock
        self._gauge = gauge
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def create(
        self, protocol_version: str, *, owner: str | None, client_info: dict[str, Any] | None
    ) -> Session:
        """Open a session.

        Raises:
            SessionsFull: the cap is reached and every session has a call in flight.
        """
        now = self.clock()
        self._sweep(now)
        if len(self._sessions) >= self.max_sessions:
            victim = next((s for s in self._sessions.values() if not s.inflight), None)
            if victim is None:
                raise SessionsFull
            self._drop(victim)
        session = Session(
            id=secrets.token_urlsafe(32),
            protocol_version=protocol_version,
            owner=owner,
            client_info=client_info,
            last_seen=now,
        )
        self._sessions[session.id] = session
        self._update_gauge()
        return session

    def get(self, session_id: str) -> Session | None:
        """The live session ``session_id`` (and mark it used), or None if unknown or expired."""
        now = self.clock()
        self._sweep(now)
        session = self._sessions.get(session_id)
        if session is None:
            return None
        session.last_seen = now
        self._sessions.move_to_end(session_id)
        return session

    def touch(self, session: Session) -> None:
        """Mark ``session`` used now (a call in it just ended)."""
        if self._sessions.get(session.id) is session:
            session.last_seen = self.clock()
            self._sessions.move_to_end(session.id)

    def close(self, session_id: str) -> Session | None:
        """End a session (DELETE); its calls in flight are cancelled. Returns it, or None."""
        session = self._sessions.get(session_id)
        if session is not None:
            self._drop(session)
        return session

    def close_all(self) -> None:
        """End every session (app shutdown)."""
        for session in list(self._sessions.values()):
            self._drop(session)

    def _sweep(self, now: float) -> None:
        # Oldest first; stops at the first session used within the TTL.
        while self._sessions:
            session = next(iter(self._sessions.values()))
            if now - session.last_seen <= self.ttl:
                return
            if session.inflight:
                # A call still runs: that is activity, not idleness.
                session.last_seen = now
                self._sessions.move_to_end(session.id)
                continue
            self._drop(session)

    def _drop(self, session: Session) -> None:
        del self._sessions[session.id]
        for call in list(session.inflight.values()):
            call.cancel("session_closed")
        self._update_gauge()

    def _update_gauge(self) -> None:
        if self._gauge is not None:
            self._gauge.set(len(self._sessions))
