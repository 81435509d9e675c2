"""The broker console's "Sign in with GitLab": the gateway signs a person in as the account page
does (``own_flow``), asks GitLab who they are (username, groups) and ends the grant at once, here
and at GitLab: the console keeps its own session cookie, never a GitLab token.

It fits the console's ``ExternalSignIn`` (``gateway.console.external``) by shape; the server
layer hands it over, so neither package imports the other.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from gateway.broker.store import StoreError
from gateway.config import SignInSettings, decode_encryption_key
from gateway.signin.gitlab_oauth import GitLabRefused
from gateway.signin.grants import SignInEnded
from gateway.signin.own_flow import FlowFailed, redeem, to_gitlab, too_many
from gateway.signin.service import TRANSACTION_SECONDS, SignIn

log = logging.getLogger("gateway.signin")

CONSOLE_CLIENT = "gateway-console"
#: The scope of the console's short grant: never given a token, so never accepted anywhere.
CONSOLE_SCOPE = "console"
FLOW_COOKIE = "gateway_console_flow"


@dataclass(frozen=True)
class SignedInPerson:
    """Who signed in at GitLab (the console's ``Person``)."""

    username: str
    groups: tuple[str, ...]


class Refused(Exception):
    """The console's ``SignInRefused`` by shape: a message for the person and an HTTP status."""

    def __init__(self, message: str, status: int = 403) -> None:
        super().__init__(message)
        self.status = status


class ConsoleSignIn:
    """Signs people in to the console through GitLab.

    Args:
        config: ``[sign_in]`` (enabled).
        sign_in: returns the app's sign-in parts (open after start-up).
        refused: the exception class the console expects from :meth:`finish`.
    """

    name = "GitLab"

    def __init__(
        self,
        config: SignInSettings,
        sign_in: Callable[[], SignIn],
        refused: Callable[[str, int], Exception] = Refused,
    ) -> None:
        assert config.encryption_key is not None
        key = decode_encryption_key(config.encryption_key.get_secret_value())
        self.secret = hashlib.sha256(b"console sessions:" + key).digest()
        self._issuer = config.issuer
        self._sign_in = sign_in
        self._refused = refused

    async def start(self, request: web.Request, done_path: str) -> web.StreamResponse:
        try:
            response, flow = await to_gitlab(
                request,
                self._sign_in(),
                client_id=CONSOLE_CLIENT,
                redirect_uri=f"{self._issuer}{done_path}",
                scopes=CONSOLE_SCOPE,
            )
        except FlowFailed as err:
            return too_many(err)  # the sign-in bounds (sign_in.starts_per_address...)
        response.set_cookie(
            FLOW_COOKIE,
            flow,
            max_age=int(TRANSACTION_SECONDS),
            path=done_path,
            secure=self._issuer.startswith("https://"),
            httponly=True,
            # Lax: the browser comes back from GitLab, another site.
            samesite="Lax",
        )
        return response

    async def finish(self, request: web.Request) -> SignedInPerson:
        sign_in = self._sign_in()
        try:
            found = await redeem(request, sign_in, request.cookies.get(FLOW_COOKIE, ""), CONSOLE_CLIENT)
        except FlowFailed as err:
            raise self._refused(str(err), err.status) from None
        except StoreError:
            raise self._refused("the gateway's database does not answer right now", 503) from None
        try:
            token = await sign_in.grants.gitlab_token(found.grant_id)
            user = await sign_in.gitlab.user(token, with_groups=True)
        except (SignInEnded, GitLabRefused, StoreError) as err:
            log.warning("console sign-in: GitLab did not say who signed in (%s)", type(err).__name__)
            raise self._refused("GitLab did not say who you are right now", 503) from None
        finally:
            await sign_in.grants.sign_out(found.grant_id)
        return SignedInPerson(username=user.username, groups=user.groups)

    def forget(self, response: web.StreamResponse, done_path: str) -> None:
        response.del_cookie(FLOW_COOKIE, path=done_path)
