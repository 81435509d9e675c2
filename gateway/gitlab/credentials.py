"""GitLab credentials: which token a call sends, and a cache key that never reveals it.

Modes (README, "Point it at your GitLab"; ``docs/operations.md``):

- ``service``: the gateway's own ``GITLAB_TOKEN`` (or none: anonymous reads of public projects).
- ``passthrough``: the caller's ``PRIVATE-TOKEN: <t>`` or ``Authorization: Bearer <t>`` header is
  forwarded unchanged. When the gateway has client tokens configured, ``Authorization`` carries
  the caller's gateway secret, so the GitLab token must then come in ``PRIVATE-TOKEN``.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

#: A per-process secret for keyed hashes of tokens, so cache keys and logs never carry a token
#: or a plain hash that could be checked against a guessed token.
_HASH_KEY = secrets.token_bytes(32)
#: What an HTTP header can carry as a token: visible ASCII, no spaces (RFC 9110 §5.5, token68).
_TOKEN = re.compile(r"[\x21-\x7e]+")


@dataclass(frozen=True)
class Credential:
    """One GitLab credential.

    Attributes:
        header: ``PRIVATE-TOKEN`` or ``Authorization`` (then ``token`` is sent as ``Bearer <token>``).
        token: the secret; empty for anonymous access.
        source: ``service`` or ``passthrough``.
        renew: a person signed in through GitLab (``gateway.signin``): returns their refreshed
            credential after GitLab answered 401 to this one (it did nothing then, so the request
            is sent once more with the new one: ``GitLabSession``); None for every other credential.
    """

    header: Literal["PRIVATE-TOKEN", "Authorization"]
    token: str = field(repr=False)
    source: Literal["service", "passthrough"] = "service"
    renew: Callable[[], Awaitable[Credential]] | None = field(default=None, repr=False, compare=False)

    @functools.cached_property
    def cache_key(self) -> str:
        """A keyed hash (HMAC-SHA256, 16 hex chars) that partitions caches by credential.

        Computed once per credential (read on every cached lookup); ``cached_property`` stores it
        in the instance ``__dict__``, which a frozen dataclass without slots still has.
        """
        if not self.token:
            return "anonymous"
        return hmac.new(_HASH_KEY, self.token.encode(), hashlib.sha256).hexdigest()[:16]

    def headers(self) -> dict[str, str]:
        """The HTTP header to send to GitLab (none when anonymous)."""
        if not self.token:
            return {}
        if self.header == "Authorization":
            return {"Authorization": f"Bearer {self.token}"}
        return {"PRIVATE-TOKEN": self.token}


ANONYMOUS = Credential(header="PRIVATE-TOKEN", token="", source="service")


def service_credential(token: str | None) -> Credential:
    """The gateway's own credential in ``service`` mode (anonymous when ``token`` is empty).

    Sent as ``PRIVATE-TOKEN`` (GitLab REST docs "Personal/project/group access tokens"); GitLab
    accepts the same header on ``/api/graphql``.
    """
    token = (token or "").strip()
    if not token:
        return ANONYMOUS
    return Credential(header="PRIVATE-TOKEN", token=token, source="service")


def passthrough_credential(
    headers: Mapping[str, str], *, authorization_is_gateway_secret: bool
) -> Credential | None:
    """The caller's own GitLab token from request headers, or None when it sent none.

    ``PRIVATE-TOKEN: <t>`` is forwarded as ``PRIVATE-TOKEN: <t>``; ``Authorization: Bearer <t>``
    as ``Authorization: Bearer <t>``. A value that cannot be a token (spaces, control or
    non-ASCII characters) counts as none, so it is never sent on.

    Args:
        headers: a case-insensitive mapping of the MCP request's headers (aiohttp's
            ``CIMultiDictProxy``; a plain dict must use canonical names).
        authorization_is_gateway_secret: True when client tokens are configured, so
            ``Authorization`` is the caller's gateway secret and not a GitLab token.
    """
    private = (headers.get("PRIVATE-TOKEN") or "").strip()
    if private:
        if not _TOKEN.fullmatch(private):
            return None
        return Credential(header="PRIVATE-TOKEN", token=private, source="passthrough")
    if authorization_is_gateway_secret:
        return None
    scheme, _, value = (headers.get("Authorization") or "").strip().partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer" and _TOKEN.fullmatch(value):
        return Credential(header="Authorization", token=value, source="passthrough")
    return None
