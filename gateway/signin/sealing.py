"""The secrets of sign-in: new random tokens, the hashes the database keeps of them, and GitLab's
tokens sealed with AES-GCM (``sign_in.encryption_key``) before they reach the database.

The database never holds a secret that works: the gateway's tokens, codes, client secrets and
browser bindings as SHA-256 hashes (they are 256-bit random, so a hash is as good as a keyed
one); GitLab's tokens as ciphertext bound to their grant (the grant id is the associated data,
so a ciphertext copied onto another row does not open).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

#: Prefixes that tell a gateway token apart at a glance (and in secret scanners).
ACCESS_PREFIX = "gwat_"
REFRESH_PREFIX = "gwrt_"
CODE_PREFIX = "gwac_"
_SEALED = "v1."


def new_secret(prefix: str = "") -> str:
    """A new random secret: 256 bits, URL-safe."""
    return prefix + secrets.token_urlsafe(32)


def hashed(secret: str) -> str:
    """What the database keeps of ``secret``."""
    return hashlib.sha256(secret.encode()).hexdigest()


def same(a: str, b: str) -> bool:
    """Constant-time comparison."""
    return hmac.compare_digest(a.encode(), b.encode())


class SealError(Exception):
    """A ciphertext does not open with this key (another key, another row, or altered)."""


class Sealer:
    """AES-GCM with the deployment's key."""

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)

    def seal(self, plaintext: str, bound_to: str) -> str:
        """``plaintext`` encrypted, opening only with ``bound_to`` (its row's id)."""
        nonce = os.urandom(12)
        sealed = self._aead.encrypt(nonce, plaintext.encode(), bound_to.encode())
        return _SEALED + base64.urlsafe_b64encode(nonce + sealed).decode()

    def open(self, ciphertext: str, bound_to: str) -> str:
        """The plaintext of :meth:`seal`.

        Raises:
            SealError: another key (``encryption_key`` changed), another row, or altered.
        """
        if not ciphertext.startswith(_SEALED):
            raise SealError("not a sealed value")
        try:
            raw = base64.urlsafe_b64decode(ciphertext[len(_SEALED) :])
            return self._aead.decrypt(raw[:12], raw[12:], bound_to.encode()).decode()
        except (InvalidTag, ValueError) as err:
            raise SealError("the value does not open with sign_in.encryption_key") from err
