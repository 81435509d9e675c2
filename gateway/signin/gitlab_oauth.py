"""The gateway as a client of GitLab's OAuth 2 provider (https://docs.gitlab.com/api/oauth2/):
the authorize URL (authorization code with PKCE), the code exchange, the refresh, the revocation,
and who signed in (``/api/v4/user``, ``/api/v4/groups``).

GitLab's tokens pass only through here and the sealed column of their grant: never into a log
line, an error message or an answer (``register_secret`` redacts them from log lines anyway).
Requests go through the GitLab client's HTTP client: the configured GitLab only, its TLS settings,
no redirects, no cookies.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import httpx

from gateway.observability.logging import register_secret

log = logging.getLogger("gateway.signin")

#: GitLab's answer when a refresh token was used already, revoked or expired (RFC 6749 §5.2).
INVALID_GRANT = "invalid_grant"


def s256(verifier: str) -> str:
    """The PKCE S256 challenge of ``verifier`` (RFC 7636 §4.2)."""
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


@dataclass(frozen=True)
class GitLabTokens:
    """GitLab's tokens of one grant."""

    access_token: str
    refresh_token: str
    expires_at: float

    def sealable(self) -> str:
        """As the grant's sealed column holds them."""
        return json.dumps({"a": self.access_token, "r": self.refresh_token})

    @classmethod
    def unsealed(cls, text: str, expires_at: float) -> GitLabTokens:
        """From the grant's sealed column."""
        data = json.loads(text)
        register_secret(data["a"])
        register_secret(data["r"])
        return cls(access_token=data["a"], refresh_token=data["r"], expires_at=expires_at)


@dataclass(frozen=True)
class GitLabUser:
    """Who signed in at GitLab."""

    id: int
    username: str
    groups: tuple[str, ...]


class GitLabRefused(Exception):
    """GitLab refused a token request. ``error`` is its OAuth error code (``invalid_grant``: the
    grant is gone, the person must sign in again); the message never holds a token."""

    def __init__(self, error: str, message: str) -> None:
        super().__init__(message)
        self.error = error


class GitLabOAuth:
    """GitLab's OAuth endpoints, for the one application the operator registered.

    Args:
        http: the GitLab client's HTTP client.
        base_url: GitLab's base URL (``https://gitlab.example.com``, with its sub-path).
        client_id, client_secret: the GitLab application.
        redirect_uri: ``<public_url>/oauth/gitlab/callback``.
        scope: ``api``, or ``read_api`` on a read-only gateway.
        clock: Unix seconds.
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        base_url: str,
        client_id: str,
        client_secret: str,
        redirect_uri: str,
        scope: str,
        clock: Any,
    ) -> None:
        self._http = http
        self._base = base_url.rstrip("/")
        self._client_id = client_id
        self._secret = client_secret
        self._redirect_uri = redirect_uri
        self.scope = scope
        self._clock = clock
        register_secret(client_secret)

    def authorize_url(self, state: str, verifier: str) -> str:
        """Where the browser goes to sign in at GitLab."""
        query = urlencode(
            {
                "client_id": self._client_id,
                "redirect_uri": self._redirect_uri,
                "response_type": "code",
                "state": state,
                "scope": self.scope,
                "code_challenge": s256(verifier),
                "code_challenge_method": "S256",
            }
        )
        return f"{self._base}/oauth/authorize?{query}"

    async def exchange(self, code: str, verifier: str) -> GitLabTokens:
        """The tokens for GitLab's authorization code."""
        return await self._token(
            {
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": self._redirect_uri,
                "code_verifier": verifier,
            }
        )

    async def refresh(self, refresh_token: str) -> GitLabTokens:
        """New tokens for a refresh token (GitLab rotates both)."""
        return await self._token({"grant_type": "refresh_token", "refresh_token": refresh_token})

    async def _token(self, form: dict[str, str]) -> GitLabTokens:
        form = {**form, "client_id": self._client_id, "client_secret": self._secret}
        try:
            response = await self._http.post(f"{self._base}/oauth/token", data=form)
        except httpx.HTTPError as err:
            raise GitLabRefused(
                "temporarily_unavailable", f"GitLab could not be reached ({type(err).__name__})"
            ) from None
        try:
            body = response.json()
        except ValueError:
            body = {}
        if response.status_code != 200 or not isinstance(body, dict) or "access_token" not in body:
            error = str(body.get("error", "")) if isinstance(body, dict) else ""
            if not error:
                error = "server_error" if response.status_code >= 500 else "invalid_request"
            raise GitLabRefused(
                error, f"GitLab refused the token request (HTTP {response.status_code}, {error})"
            )
        access, refresh = str(body["access_token"]), str(body.get("refresh_token") or "")
        register_secret(access)
        if refresh:
            register_secret(refresh)
        # From this gateway's clock, not GitLab's created_at: a clock skew between the two must not
        # make every new token look expired (and be refreshed again at each call).
        expires_at = self._clock() + float(body.get("expires_in") or 7200)
        return GitLabTokens(access_token=access, refresh_token=refresh, expires_at=expires_at)

    async def revoke(self, token: str) -> None:
        """Revoke a token at GitLab (best effort: a failure is logged, not raised)."""
        try:
            response = await self._http.post(
                f"{self._base}/oauth/revoke",
                data={"token": token, "client_id": self._client_id, "client_secret": self._secret},
            )
            if response.status_code != 200:
                log.warning("GitLab did not revoke a signed-in token (HTTP %s)", response.status_code)
        except httpx.HTTPError as err:
            log.warning("GitLab could not be reached to revoke a signed-in token (%s)", type(err).__name__)

    async def user(self, access_token: str, *, with_groups: bool) -> GitLabUser:
        """Who the token belongs to, and (``with_groups``) the full paths of their groups."""
        headers = {"Authorization": f"Bearer {access_token}", "Accept": "application/json"}
        response = await self._http.get(f"{self._base}/api/v4/user", headers=headers)
        if response.status_code != 200:
            raise GitLabRefused(
                "access_denied", f"GitLab did not say who signed in (HTTP {response.status_code})"
            )
        body = response.json()
        groups: list[str] = []
        if with_groups:
            page = 1
            while page:
                listed = await self._http.get(
                    f"{self._base}/api/v4/groups",
                    params={"min_access_level": "10", "per_page": "100", "page": str(page)},
                    headers=headers,
                )
                if listed.status_code != 200:
                    raise GitLabRefused(
                        "access_denied", f"GitLab did not list the groups (HTTP {listed.status_code})"
                    )
                groups += [str(g["full_path"]) for g in listed.json()]
                following = listed.headers.get("X-Next-Page", "")
                page = int(following) if following.isdigit() and page < 50 else 0
        return GitLabUser(id=int(body["id"]), username=str(body["username"]), groups=tuple(groups))
