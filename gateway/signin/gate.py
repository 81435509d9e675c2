"""What ``/mcp`` asks of sign-in (``gateway.mcp.http.auth.SignInGate``): is this request's bearer a
live gateway access token, and whose.

Refused with 401 and the challenge that names the Protected Resource Metadata (RFC 9728 §5.1): a
``PRIVATE-TOKEN`` header (GitLab tokens are never passed through once sign-in is on), and a gateway
access token that expired or was revoked (the client refreshes or signs in again). Neither reaches
GitLab. Any other bearer goes on to the client tokens, and is refused there when it is none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gateway.broker.store import StoreError
from gateway.config import SignInSettings
from gateway.mcp.http.auth import SignedInCaller, unauthorized
from gateway.mcp.http.statuses import HttpRefusal, unavailable
from gateway.mcp.protocol.wire import FORBIDDEN
from gateway.signin.grants import GitLabUnavailable, Grants, SignedIn, SignInEnded
from gateway.signin.metadata import challenge


class Gate:
    """Bound to the app's :class:`~gateway.signin.grants.Grants` once its services are open."""

    def __init__(
        self, settings: SignInSettings, grants: Callable[[], Grants], changes_things: Callable[[str], bool]
    ) -> None:
        self.challenge = challenge(settings)
        self._expired = challenge(settings, "invalid_token")
        self._step_up = challenge(settings, "insufficient_scope")
        self._grants = grants
        self._changes_things = changes_things

    def check_call(self, who: SignedInCaller | None, params: Mapping[str, object] | None) -> None:
        if who is None or who.can_write:
            return
        name = (params or {}).get("name")
        if isinstance(name, str) and self._changes_things(name):
            raise self._insufficient_scope(
                f"{name} changes GitLab or broker state and your sign-in has the scope mcp:read only: sign "
                "in again with the scope mcp:write."
            )

    def _insufficient_scope(self, message: str) -> HttpRefusal:
        return HttpRefusal(FORBIDDEN, message, status=403, headers={"WWW-Authenticate": self._step_up})

    async def renew(self, who: SignedInCaller) -> str:
        return await self._grants().after_gitlab_401(who)

    async def refused_by_gitlab(self, who: SignedInCaller, refusals: list[str]) -> None:
        if "insufficient_scope" in refusals:
            raise self._insufficient_scope(
                "GitLab refused the call for lack of scope: sign in again with the scope mcp:write."
            )
        if "401" not in refusals:
            return  # a 403 for lack of permission in GitLab: the tool error says so
        try:
            await self._grants().after_gitlab_401(who)
        except SignInEnded:
            raise unauthorized("GitLab revoked your sign-in: sign in again.", self._expired) from None
        except (GitLabUnavailable, StoreError):
            raise unavailable(
                "Service Unavailable: GitLab refused your token and it could not be refreshed right now; "
                "send the request again in a moment."
            ) from None
        raise unauthorized(
            "GitLab refused your token, and it was refreshed: refresh your access token and send the "
            "request again.",
            self._expired,
        )

    async def check(self, headers: Mapping[str, str]) -> SignedIn | None:
        if "PRIVATE-TOKEN" in headers:
            raise unauthorized(
                "This gateway signs people in with GitLab and does not pass GitLab tokens through: "
                "remove the PRIVATE-TOKEN header and sign in through your MCP client (OAuth).",
                self.challenge,
            )
        scheme, _, bearer = headers.get("Authorization", "").strip().partition(" ")
        bearer = bearer.strip()
        if scheme.lower() != "bearer" or not Grants.is_ours(bearer):
            return None
        try:
            who = await self._grants().signed_in(bearer)
        except StoreError:
            raise unavailable(
                "Service Unavailable: the gateway's database does not answer right now; send the "
                "request again in a moment."
            ) from None
        except GitLabUnavailable:
            raise unavailable(
                "Service Unavailable: your GitLab sign-in needs refreshing and GitLab does not answer "
                "right now; send the request again in a moment."
            ) from None
        if who is None:
            raise unauthorized(
                "Your access token expired or was revoked (or your GitLab sign-in was revoked): refresh "
                "it or sign in again.",
                self._expired,
            )
        return who
