"""``[sign_in]``: people and agents sign in to ``/mcp`` through GitLab (OAuth 2.1), off by default.

The gateway then is the OAuth authorization server of its own ``/mcp`` resource
(https://modelcontextprotocol.io/specification/2025-11-25/basic/authorization) and signs people
in with one GitLab application the operator registers (``gateway.signin``).
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator

from gateway.config.base import _Section, is_loopback
from gateway.config.clients import AgentAccess

_MAKE_KEY = (
    'python -c "import secrets,base64;print(base64.urlsafe_b64encode(secrets.token_bytes(32)).decode())"'
)
_CLIENT_ID = re.compile(r"[A-Za-z0-9._~:/@+-]{1,200}")


def decode_encryption_key(value: str) -> bytes:
    """The 32 bytes of ``encryption_key`` (URL-safe base64, padding optional).

    Raises:
        ValueError: not base64, or not 32 bytes once decoded.
    """
    text = value.strip()
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise ValueError(f"is not URL-safe base64; make one with {_MAKE_KEY}") from None
    if len(raw) != 32:
        raise ValueError(f"decodes to {len(raw)} bytes, not 32; make one with {_MAKE_KEY}")
    return raw


class SignInClient(_Section):
    """A client registered by the operator: its id and the redirect URIs it may use."""

    client_id: str
    redirect_uris: tuple[str, ...] = Field(min_length=1)
    #: Shown on the consent page; the client id when unset.
    name: str | None = None

    @field_validator("client_id")
    @classmethod
    def _client_id(cls, value: str) -> str:
        if not _CLIENT_ID.fullmatch(value):
            raise ValueError("must be 1 to 200 visible characters (letters, digits, ._~:/@+-)")
        return value


class SignInSettings(_Section):
    """``[sign_in]``: OAuth sign-in to ``/mcp`` through one GitLab application (off by default)."""

    enabled: bool = False
    #: The gateway's public base URL (``https://mcp.example.com``): the issuer, and ``<public_url>/mcp``
    #: the resource. ``http`` only for a loopback host (development, tests).
    public_url: str | None = None
    #: The GitLab application's id and secret; its redirect URI is ``<public_url>/oauth/gitlab/callback``.
    gitlab_client_id: str | None = None
    gitlab_client_secret: SecretStr | None = None
    #: 32 random bytes, URL-safe base64: encrypts GitLab's tokens in the broker database (AES-GCM).
    encryption_key: SecretStr | None = None
    #: GitLab usernames allowed to sign in; with ``allowed_groups`` also empty, any user may.
    allowed_users: tuple[str, ...] = ()
    #: Full paths of GitLab groups whose members may sign in.
    allowed_groups: tuple[str, ...] = ()
    #: Username or group full path → the broker roles (``broker.agents``) that person may take.
    roles: dict[str, tuple[str, ...]] = {}
    #: Broker role → the tools and limits of the people signed in with it, as a client token's
    #: (``toolsets``, ``tools``, ``read_only``, ``confirm_destructive``, ``structured_text``,
    #: ``calls_per_second``, ``burst``); a role without an entry, and no role, get the deployment's.
    role_access: dict[str, AgentAccess] = {}
    #: Lifetime of the gateway's access tokens, seconds.
    access_token_seconds: int = Field(3600, ge=60, le=86400)
    #: Lifetime of the gateway's refresh tokens (and of a sign-in without use), days.
    refresh_token_days: int = Field(30, ge=1, le=365)
    #: Clients registered by the operator.
    clients: tuple[SignInClient, ...] = ()
    #: Accept OAuth Dynamic Client Registration (RFC 7591) at ``/oauth/register``.
    dynamic_registration: bool = True
    #: Accept client ids that are HTTPS URLs of Client ID Metadata Documents.
    client_metadata_documents: bool = True
    #: Client registrations and consent pages (each writes a row) one client address may open,
    #: refilled evenly over ``starts_window_seconds``; past it, HTTP 429.
    starts_per_address: int = Field(30, ge=1)
    starts_window_seconds: float = Field(600.0, gt=0)
    #: Sign-ins under way (consent page to GitLab's return, 10 minutes at most) across replicas.
    max_pending_sign_ins: int = Field(1000, ge=1)
    #: Clients registered dynamically, kept for good; past it, registration answers 429.
    max_registered_clients: int = Field(10_000, ge=1)
    #: Fetch Client ID Metadata Documents from private and loopback addresses too: for tests and
    #: local development only; never in production (it lets a client id reach internal hosts).
    allow_loopback_client_metadata: bool = False

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        url = value.strip().rstrip("/")
        parts = urlsplit(url)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ValueError(f"{value!r} is not an http(s) URL; write it as https://mcp.example.com")
        if parts.query or parts.fragment:
            raise ValueError(f"{value!r} has a query or fragment; give the gateway's base URL only")
        if parts.scheme == "http" and not is_loopback(parts.hostname):
            raise ValueError(
                f"{value!r} is http on a host that is not loopback: OAuth needs https (http is accepted "
                "only for 127.0.0.1 or localhost, for development)"
            )
        return url

    @field_validator("encryption_key")
    @classmethod
    def _key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value().strip():
            return None
        decode_encryption_key(value.get_secret_value())
        return SecretStr(value.get_secret_value().strip())

    @field_validator("roles", mode="before")
    @classmethod
    def _roles(cls, value: Any) -> Any:
        if isinstance(value, dict):
            # One role may be written as a string (``alice = "dev"``).
            return {who: [roles] if isinstance(roles, str) else roles for who, roles in value.items()}
        return value

    @model_validator(mode="after")
    def _complete(self) -> SignInSettings:
        if not self.enabled:
            return self
        missing = [
            f"sign_in.{name} (GATEWAY_SIGN_IN__{name.upper()})"
            for name in ("public_url", "gitlab_client_id", "gitlab_client_secret", "encryption_key")
            if getattr(self, name) is None
        ]
        if missing:
            raise ValueError(
                f"sign-in is enabled but {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not "
                "set (docs/operations.md, 'Signing in with GitLab', says where each comes from)"
            )
        ids = [client.client_id for client in self.clients]
        if len(set(ids)) != len(ids):
            raise ValueError("sign_in.clients: two clients have the same client_id")
        return self

    @property
    def issuer(self) -> str:
        """The authorization server's issuer: exactly ``public_url``."""
        assert self.public_url is not None
        return self.public_url

    @property
    def resource(self) -> str:
        """The protected resource: ``<public_url>/mcp``."""
        return f"{self.issuer}/mcp"

    @property
    def public_hosts(self) -> tuple[str, ...]:
        """The ``Host`` clients send to ``public_url`` (``name`` or ``name:port``), when sign-in is
        on: the gateway answers to it without a ``server.allowed_hosts`` entry, since the metadata
        sends every signed-in client there."""
        if not self.enabled or self.public_url is None:
            return ()
        parts = urlsplit(self.public_url)
        name = parts.hostname or ""
        name = f"[{name}]" if ":" in name else name
        return (name if parts.port is None else f"{name}:{parts.port}",)

    @property
    def offered_roles(self) -> tuple[str, ...]:
        """Every role the mapping gives anyone, in the mapping's order (the consent page's choice)."""
        return tuple(dict.fromkeys(role for roles in self.roles.values() for role in roles))
