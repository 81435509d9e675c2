"""Legacy-era sessions (``Mcp-Session-Id``) that any replica can serve: sealed tokens.

Rules (MCP 2025-11-25 basic/transports#session-management; the sealed-id design of
zereight/gitlab-mcp's stateless mode):

- The id is an AES-256-GCM token (``cryptography``) holding what a session needs: the negotiated
  version, the client's capabilities (only their names when they are large, as the id travels in
  a header), an expiry, a random session number and a SHA-256 hash of the credential key it was
  issued to. Never the GitLab token. It is made of visible ASCII only
  (``v1.`` + URL-safe base64).
- The key comes from ``server.session_key`` (32 bytes, base64); without one a key is generated at
  start, said in one INFO log line (sessions then do not survive a restart nor span replicas).
  ``server.session_previous_key`` is still accepted while keys rotate.
- Expired, tampered or foreign-credential ids, and ids sealed with an unknown key, are "not
  found" (HTTP 404): clients then initialize again.
- A session expires ``server.session_ttl_seconds`` after ``initialize``.
- DELETE ends a session: its number goes on a deny-list until the session would have expired.
  The list holds at most ``server.max_sessions`` entries; when full, the entry closest to its
  expiry goes first (counted in ``gateway_mcp_session_denylist_evictions_total``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import heapq
import itertools
import json
import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from gateway.observability.metrics import Metrics

log = logging.getLogger("gateway.mcp")

SESSION_HEADER = "Mcp-Session-Id"
_PREFIX = "v1."
_AAD = b"gitlab-mcp-gateway session v1"
_NONCE_BYTES = 12
#: Longest id worth decrypting; anything longer is not ours.
_MAX_ID_CHARS = 8192
#: Client capabilities kept whole up to this size (JSON); beyond it only their names.
_MAX_CAPABILITIES_CHARS = 1024


def owner_hash(owner: str | None) -> str | None:
    """The hash a session keeps of the credential key it was issued to (None: unauthenticated)."""
    return None if owner is None else hashlib.sha256(owner.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Session:
    """What a sealed session id says.

    Attributes:
        id: the ``Mcp-Session-Id`` value.
        number: random, unique per session (the deny-list and logs use it).
        protocol_version: the negotiated revision.
        capabilities: the client's ``capabilities`` from ``initialize``.
        expires: Unix seconds.
        owner: hash of the credential key it was issued to (None: unauthenticated callers).
    """

    id: str
    number: str
    protocol_version: str
    capabilities: dict[str, Any]
    expires: float
    owner: str | None

    @property
    def log_id(self) -> str:
        """A short, harmless handle for logs (the id itself is a bearer credential)."""
        return self.number[:8]


def decode_key(value: str) -> bytes:
    """A 32-byte AES key from base64 (standard or URL-safe).

    Raises:
        ValueError: not base64 of exactly 32 bytes.
    """
    try:
        text = value.strip().replace("-", "+").replace("_", "/")
        key = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(
            "a session key is 32 random bytes in base64 (e.g. `openssl rand -base64 32`)"
        ) from None
    if len(key) != 32:
        raise ValueError(f"a session key is 32 bytes in base64; this one decodes to {len(key)} bytes")
    return key


class SessionSealer:
    """Issues and opens sealed session ids; keeps the deny-list of ended sessions.

    Args:
        key: the current key (None: generate one, and say so at INFO).
        previous_key: an older key still accepted (rotation).
        ttl_seconds: lifetime of a session.
        max_ended: cap of the deny-list.
        metrics: the app's metrics.
        clock: Unix seconds (tests pass their own).
    """

    def __init__(
        self,
        *,
        key: bytes | None,
        previous_key: bytes | None = None,
        ttl_seconds: float,
        max_ended: int,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if key is None:
            # INFO, not WARNING: one gateway beside its agents (the default) needs nothing more.
            log.info(
                "MCP sessions are sealed with a key generated for this process: they end at a restart "
                "and other replicas refuse them; to keep them, set GATEWAY_SERVER__SESSION_KEY to 32 "
                "random bytes in base64 on every replica"
            )
            key = os.urandom(32)
        self._current = AESGCM(key)
        self._keys = [self._current] + ([AESGCM(previous_key)] if previous_key else [])
        self.ttl = ttl_seconds
        self.max_ended = max_ended
        self._clock = clock
        self._metrics = metrics
        self._ended: dict[str, float] = {}
        # (expiry, order of ending, number): ties go in the order sessions were ended.
        self._expiries: list[tuple[float, int, str]] = []
        self._ends = itertools.count()
        if metrics is not None:
            metrics.session_ttl_seconds.set(ttl_seconds)
            metrics.session_denylist_capacity.set(max_ended)

    def issue(self, protocol_version: str, capabilities: dict[str, Any], owner: str | None) -> Session:
        """A new session for ``owner`` (the caller's :attr:`Identity.owner`)."""
        if len(json.dumps(capabilities)) > _MAX_CAPABILITIES_CHARS:
            # The id travels in a header on every request: keep which capabilities were declared.
            capabilities = {str(key)[:64]: {} for key in list(capabilities)[:32]}
        number = secrets.token_urlsafe(12)
        expires = float(int(self._clock() + self.ttl))
        hashed = owner_hash(owner)
        claims = {"n": number, "v": protocol_version, "c": capabilities, "e": expires, "o": hashed}
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._current.encrypt(nonce, json.dumps(claims, separators=(",", ":")).encode(), _AAD)
        token = _PREFIX + base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")
        if self._metrics is not None:
            self._metrics.sessions_issued.inc()
        return Session(token, number, protocol_version, capabilities, expires, hashed)

    def open(self, session_id: str, owner: str | None) -> Session | None:
        """The live session ``session_id`` of ``owner``, or None (and why is counted): not ours or
        tampered (``invalid``), expired, ended by DELETE, or issued to another credential."""
        session = self.unseal(session_id)
        return session if session is not None and self.owned_by(session, owner) else None

    def owned_by(self, session: Session, owner: str | None) -> bool:
        """True when ``session`` was issued to ``owner`` (or to unauthenticated callers)."""
        if session.owner is not None and session.owner != owner_hash(owner):
            # Another caller's session: answered like an unknown one (MCP security best
            # practices, session hijacking).
            self._refuse("foreign")
            return False
        return True

    def unseal(self, session_id: str) -> Session | None:
        """The live session ``session_id`` whoever holds it, or None (counted): not ours or
        tampered (``invalid``), expired, or ended by DELETE. Cheap: checked before any
        authentication work."""
        session = self._unseal(session_id)
        if session is None:
            return self._refuse("invalid")
        now = self._clock()
        if session.expires <= now:
            return self._refuse("expired")
        self._sweep(now)
        if session.number in self._ended:
            return self._refuse("ended")
        return session

    def end(self, session: Session) -> None:
        """Deny ``session`` from now until it would have expired (DELETE)."""
        now = self._clock()
        self._sweep(now)
        if session.number in self._ended:
            return
        if len(self._ended) >= self.max_ended and self._expiries:
            _, _, oldest = heapq.heappop(self._expiries)
            self._ended.pop(oldest, None)
            if self._metrics is not None:
                self._metrics.session_denylist_evictions.inc()
        self._ended[session.number] = session.expires
        heapq.heappush(self._expiries, (session.expires, next(self._ends), session.number))
        self._update_gauge()

    def __len__(self) -> int:
        """Sessions on the deny-list."""
        return len(self._ended)

    def _unseal(self, session_id: str) -> Session | None:
        if not session_id.startswith(_PREFIX) or len(session_id) > _MAX_ID_CHARS:
            return None
        raw = session_id[len(_PREFIX) :]
        try:
            blob = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
        except (binascii.Error, ValueError):
            return None
        if base64.urlsafe_b64encode(blob).decode().rstrip("=") != raw:
            return None  # not how we wrote it: a changed character that decodes the same is refused too
        nonce, sealed = blob[:_NONCE_BYTES], blob[_NONCE_BYTES:]
        for key in self._keys:
            try:
                plain = key.decrypt(nonce, sealed, _AAD)
            except (InvalidTag, ValueError):
                continue
            claims = json.loads(plain)
            return Session(session_id, claims["n"], claims["v"], claims["c"], claims["e"], claims["o"])
        return None

    def _refuse(self, reason: str) -> Session | None:
        if self._metrics is not None:
            self._metrics.session_rejections.labels(reason).inc()
        return None

    def _sweep(self, now: float) -> None:
        while self._expiries and self._expiries[0][0] <= now:
            _, _, number = heapq.heappop(self._expiries)
            self._ended.pop(number, None)
        self._update_gauge()

    def _update_gauge(self) -> None:
        if self._metrics is not None:
            self._metrics.sessions_ended.set(len(self._ended))
