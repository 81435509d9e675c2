"""Handshake-era sessions (``Mcp-Session-Id``) that any replica can serve: sealed tokens.

Rules (MCP 2025-11-25 basic/transports#session-management; the sealed-id design of
zereight/gitlab-mcp's stateless mode):

- The id is an AES-256-GCM token (``cryptography``) holding what a session needs: the negotiated
  version, the client's capabilities (only their names when they are large, as the id travels in
  a header), an expiry, a random session number and the caller it was issued to, as an
  HMAC-SHA256 of :attr:`Caller.owner` under a key derived from the session key (HKDF-SHA256,
  its own label). Never the GitLab token. It is made of visible ASCII only (``v1.`` + URL-safe
  base64).
- The key comes from ``server.session_key`` (32 bytes, base64); without one a key is generated at
  start, said in one INFO log line (sessions then do not survive a restart nor span replicas).
  ``server.session_previous_key`` is still accepted while keys rotate. Everything a replica
  needs to serve a session is derived from the key, so any replica with it serves any session.
- Expired, tampered or foreign-credential ids, and ids sealed with an unknown key, are "not
  found" (HTTP 404): clients then initialize again. The owner is compared as it is, so an id
  issued where callers are not authenticated is foreign where they are.
- A session expires ``server.session_ttl_seconds`` after ``initialize``.
- DELETE ends a session: the broker's database keeps it ended for every replica until it would
  have expired (``gateway.broker.ended_sessions``); this module only seals and opens ids.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hmac
import json
import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cachetools import LRUCache

from gateway.observability.metrics import Metrics

log = logging.getLogger("gateway.mcp")

SESSION_HEADER = "Mcp-Session-Id"
_PREFIX = "v1."
_AAD = b"gitlab-mcp-gateway session v1"
_NONCE_BYTES = 12
#: Longest id worth decrypting; anything longer is not ours.
_MAX_ID_CHARS = 8192
#: Bound of the opened sessions kept by id (the characters of their ids: about 10,000 sessions
#: of a few hundred characters, a few MB at most).
OPENED_ID_CHARS = 2_000_000
#: Client capabilities kept whole up to this size (JSON); beyond it only their names.
_MAX_CAPABILITIES_CHARS = 1024
#: HKDF label of the key that binds a session to its owner (never used for anything else).
_OWNER_LABEL = b"gitlab-mcp-gateway session owner v1"


def _owner_key(key: bytes) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_OWNER_LABEL).derive(key)


class _Key:
    """One session key: its cipher and the key its owner hashes are made with."""

    def __init__(self, key: bytes) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self.cipher = AESGCM(key)
        self._owner = _owner_key(key)

    def owner_hash(self, owner: str) -> str:
        # hmac.digest: the one-shot C path, same bytes as hmac.new(...).digest() at a fraction of
        # the cost (this runs on every request of a session).
        return hmac.digest(self._owner, owner.encode(), "sha256").hex()[:32]


@dataclass(frozen=True)
class Session:
    """What a sealed session id says.

    Attributes:
        id: the ``Mcp-Session-Id`` value.
        number: random, unique per session (the deny-list and logs use it).
        protocol_version: the negotiated revision.
        capabilities: the client's ``capabilities`` from ``initialize``.
        expires: Unix seconds.
        owner: keyed hash of the caller it was issued to (:attr:`Caller.owner`).
        key: the key that sealed it (its owner hash is compared under that key).
    """

    id: str
    number: str
    protocol_version: str
    capabilities: dict[str, Any]
    expires: float
    owner: str
    key: _Key = field(repr=False, compare=False)

    @property
    def log_id(self) -> str:
        """A short, harmless handle for logs (the id itself is a bearer credential)."""
        return self.number[:8]


def _id_chars(session: Session) -> int:
    return len(session.id)


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
    """Issues and opens sealed session ids.

    Args:
        key: the current key (None: generate one, and say so at INFO when the first session is
            issued).
        previous_key: an older key still accepted (rotation).
        ttl_seconds: lifetime of a session.
        metrics: the app's metrics.
        clock: Unix seconds (tests pass their own).
    """

    def __init__(
        self,
        *,
        key: bytes | None,
        previous_key: bytes | None = None,
        ttl_seconds: float,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        #: Said once, at the first session issued: a gateway whose clients never open one (the
        #: 2026-07-28 era is stateless) has nothing to keep across restarts.
        self._say_generated = key is None
        if key is None:
            key = os.urandom(32)
        #: The keys themselves: other sealed values (a request's ``requestState``) derive their
        #: own keys from them, so they rotate with the session key and span the same replicas.
        self.root_keys: tuple[bytes, bytes | None] = (key, previous_key)
        self.ttl = ttl_seconds
        self._clock = clock
        #: Sessions opened lately, by id (:meth:`_unseal`); only ids that opened are kept.
        self._opened: LRUCache[str, Session] = LRUCache(maxsize=OPENED_ID_CHARS, getsizeof=_id_chars)
        self._metrics = metrics
        if metrics is not None:
            metrics.session_ttl_seconds.set(ttl_seconds)

    @functools.cached_property
    def _keys(self) -> list[_Key]:
        # Made at the first session (OpenSSL's ciphers, about 8 MiB, load then): a gateway whose
        # clients all speak 2026-07-28 never seals a session id.
        key, previous_key = self.root_keys
        return [_Key(key)] + ([_Key(previous_key)] if previous_key else [])

    @property
    def _current(self) -> _Key:
        return self._keys[0]

    def issue(self, protocol_version: str, capabilities: dict[str, Any], owner: str) -> Session:
        """A new session for ``owner`` (the caller's :attr:`Caller.owner`)."""
        if self._say_generated:
            self._say_generated = False
            # INFO, not WARNING: one gateway beside its agents (the default) needs nothing more.
            log.info(
                "MCP sessions are sealed with a key generated for this process: they end at a restart "
                "and other replicas refuse them; to keep them, set server.session_key "
                "(GATEWAY_SERVER__SESSION_KEY) to 32 random bytes in base64 on every replica"
            )
        if len(json.dumps(capabilities)) > _MAX_CAPABILITIES_CHARS:
            # The id travels in a header on every request: keep which capabilities were declared.
            capabilities = {str(key)[:64]: {} for key in list(capabilities)[:32]}
        number = secrets.token_urlsafe(12)
        expires = float(int(self._clock() + self.ttl))
        hashed = self._current.owner_hash(owner)
        claims = {"n": number, "v": protocol_version, "c": capabilities, "e": expires, "o": hashed}
        nonce = os.urandom(_NONCE_BYTES)
        plain = json.dumps(claims, separators=(",", ":")).encode()
        sealed = self._current.cipher.encrypt(nonce, plain, _AAD)
        token = _PREFIX + base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")
        if self._metrics is not None:
            self._metrics.sessions_issued.inc()
        return Session(token, number, protocol_version, capabilities, expires, hashed, self._current)

    def open(self, session_id: str, owner: str) -> Session | None:
        """The unexpired session ``session_id`` of ``owner``, or None (and why is counted): not
        ours or tampered (``invalid``), expired, or issued to another caller. Whether it was ended
        is the broker's record (``gateway.broker.ended_sessions``)."""
        session = self.unseal(session_id)
        return session if session is not None and self.owned_by(session, owner) else None

    def owned_by(self, session: Session, owner: str) -> bool:
        """True when ``session`` was issued to ``owner``."""
        if not hmac.compare_digest(session.owner, session.key.owner_hash(owner)):
            # Another caller's session: answered like an unknown one (MCP security best
            # practices, session hijacking).
            self._refuse("foreign")
            return False
        return True

    def unseal(self, session_id: str) -> Session | None:
        """The unexpired session ``session_id`` whoever holds it, or None (counted): not ours or
        tampered (``invalid``), or expired. Cheap: checked before any authentication work."""
        session = self._unseal(session_id)
        if session is None:
            return self._refuse("invalid")
        if session.expires <= self._clock():
            return self._refuse("expired")
        return session

    def refuse_ended(self) -> None:
        """Count a session refused because it was ended by DELETE."""
        self._refuse("ended")

    def _unseal(self, session_id: str) -> Session | None:
        # A session's id comes with every request of it: opened once (the AES-GCM decryption,
        # base64 and JSON are most of a session's per-request cost), then found by its id. The
        # keys never change in a process, so what an id opens to never does either; expiry,
        # owner and ended checks still run on every request.
        session = self._opened.get(session_id)
        if session is None:
            session = self._open_sealed(session_id)
            if session is not None:
                self._opened[session_id] = session
        return session

    def _open_sealed(self, session_id: str) -> Session | None:
        if not session_id.startswith(_PREFIX) or len(session_id) > _MAX_ID_CHARS:
            return None
        raw = session_id[len(_PREFIX) :]
        try:
            blob = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
        except (binascii.Error, ValueError):
            return None
        if base64.urlsafe_b64encode(blob).decode().rstrip("=") != raw:
            return None  # not how we wrote it: a changed character that decodes the same is refused too
        from cryptography.exceptions import InvalidTag

        nonce, sealed = blob[:_NONCE_BYTES], blob[_NONCE_BYTES:]
        for key in self._keys:
            try:
                plain = key.cipher.decrypt(nonce, sealed, _AAD)
            except (InvalidTag, ValueError):
                continue
            claims = json.loads(plain)
            owner = claims["o"]
            if not isinstance(owner, str):
                return None  # issued by an older gateway to anyone: not found, initialize again
            return Session(session_id, claims["n"], claims["v"], claims["c"], claims["e"], owner, key)
        return None

    def _refuse(self, reason: str) -> Session | None:
        if self._metrics is not None:
            self._metrics.session_rejections.labels(reason).inc()
        return None
