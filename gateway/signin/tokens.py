"""``POST /oauth/token`` (authorization code with PKCE S256, refresh token with rotation) and
``POST /oauth/revoke`` (RFC 7009), and how a client authenticates at both.

A client registered with a secret sends it (``client_secret_post`` or ``client_secret_basic``); a
public client sends only its ``client_id``. An unknown client gets 401 ``invalid_client`` so that
it registers again. Tokens are bound to the one resource, ``<public_url>/mcp`` (RFC 8707): a
``resource`` naming anything else is ``invalid_target``.
"""

from __future__ import annotations

import base64
import binascii
import logging
from urllib.parse import unquote

from aiohttp import web

from gateway.broker.store import StoreError
from gateway.signin.clients import Client, ClientUnknown
from gateway.signin.gitlab_oauth import s256
from gateway.signin.grants import GitLabUnavailable
from gateway.signin.responses import invalid_client, json_answer, oauth_error
from gateway.signin.sealing import ACCESS_PREFIX, REFRESH_PREFIX, hashed, new_secret, same
from gateway.signin.service import SignIn
from gateway.signin.storage import NewTokens

log = logging.getLogger("gateway.signin")


class _Refused(Exception):
    def __init__(self, answer: web.Response) -> None:
        self.answer = answer


async def _client(request: web.Request, form: dict[str, str], sign_in: SignIn) -> Client:
    client_id, secret = form.get("client_id"), form.get("client_secret")
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "basic":
        try:
            user, _, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise _Refused(invalid_client("the Basic credentials cannot be read")) from None
        client_id, secret = unquote(user), unquote(password)
    if not client_id:
        raise _Refused(invalid_client("client_id is missing"))
    try:
        client = await sign_in.clients.find(client_id)
    except ClientUnknown as err:
        raise _Refused(invalid_client(str(err))) from None
    if client.secret_hash is not None and (secret is None or not same(hashed(secret), client.secret_hash)):
        raise _Refused(invalid_client("the client secret is missing or wrong"))
    return client


def _new_tokens(sign_in: SignIn) -> tuple[str, str, NewTokens]:
    config = sign_in.settings.sign_in
    access, refresh = new_secret(ACCESS_PREFIX), new_secret(REFRESH_PREFIX)
    now = sign_in.clock()
    return (
        access,
        refresh,
        NewTokens(
            access_hash=hashed(access),
            access_expires=now + config.access_token_seconds,
            refresh_hash=hashed(refresh),
            refresh_expires=now + config.refresh_token_days * 86400,
        ),
    )


def _answer(sign_in: SignIn, access: str, refresh: str, scopes: str) -> web.Response:
    return json_answer(
        {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": sign_in.settings.sign_in.access_token_seconds,
            "refresh_token": refresh,
            "scope": scopes,
        }
    )


async def _form(request: web.Request) -> dict[str, str]:
    posted = await request.post()
    return {key: value for key, value in posted.items() if isinstance(value, str)}


async def token(request: web.Request, sign_in: SignIn) -> web.Response:
    """The token endpoint."""
    try:
        form = await _form(request)
        client = await _client(request, form, sign_in)
        resource = form.get("resource")
        if resource is not None and resource.rstrip("/") != sign_in.settings.sign_in.resource:
            return oauth_error(
                "invalid_target", f"this gateway issues tokens only for {sign_in.settings.sign_in.resource}"
            )
        grant_type = form.get("grant_type")
        if grant_type == "authorization_code":
            return await _code(form, client, sign_in)
        if grant_type == "refresh_token":
            return await _refresh(form, client, sign_in)
        return oauth_error("unsupported_grant_type", "grant_type must be authorization_code or refresh_token")
    except _Refused as refused:
        return refused.answer
    except StoreError:
        return oauth_error(
            "temporarily_unavailable", "the gateway's database does not answer; try again", 503
        )


async def _code(form: dict[str, str], client: Client, sign_in: SignIn) -> web.Response:
    code, verifier = form.get("code", ""), form.get("code_verifier", "")
    if not code or not verifier:
        return oauth_error("invalid_request", "code and code_verifier are required (PKCE S256)")
    found = await sign_in.storage.redeem(hashed(code))
    if (
        found is None
        or found.client_id != client.client_id
        or form.get("redirect_uri", found.redirect_uri) != found.redirect_uri
        or not same(s256(verifier), found.code_challenge)
    ):
        return oauth_error(
            "invalid_grant",
            "the code is unknown, used, expired, another client's, or the redirect_uri or "
            "code_verifier do not match",
        )
    grant = await sign_in.storage.grant(found.grant_id)
    if grant is None or grant.revoked is not None:
        return oauth_error("invalid_grant", "the sign-in was ended")
    access, refresh, tokens = _new_tokens(sign_in)
    await sign_in.storage.issue(grant.id, grant.scopes, tokens)
    return _answer(sign_in, access, refresh, grant.scopes)


async def _refresh(form: dict[str, str], client: Client, sign_in: SignIn) -> web.Response:
    presented = form.get("refresh_token", "")
    if not presented:
        return oauth_error("invalid_request", "refresh_token is required")
    made: list[tuple[str, str]] = []

    def make() -> NewTokens:
        access, refresh, tokens = _new_tokens(sign_in)
        made.append((access, refresh))
        return tokens

    grant = await sign_in.storage.rotate(hashed(presented), client.client_id, make)
    if grant is None or not made:
        return oauth_error(
            "invalid_grant",
            "the refresh token is unknown, expired, replaced, revoked or another client's: sign in again",
        )
    asked = form.get("scope")
    if asked is not None and not set(asked.split()) <= set(grant.scopes.split()):
        return oauth_error(
            "invalid_scope", f"this sign-in allows only {grant.scopes}; sign in again for more"
        )
    return _answer(sign_in, made[0][0], made[0][1], grant.scopes)


async def revoke(request: web.Request, sign_in: SignIn) -> web.Response:
    """RFC 7009: 200 whether or not the token was known."""
    try:
        form = await _form(request)
        client = await _client(request, form, sign_in)
        presented = form.get("token", "")
        if not presented:
            return oauth_error("invalid_request", "token is required")
        grant_id = await sign_in.storage.revoke_token(hashed(presented), client.client_id)
        sign_in.grants.forget()
        if grant_id is not None:
            await sign_in.grants.revoke_at_gitlab(grant_id)
    except _Refused as refused:
        return refused.answer
    except StoreError:
        return oauth_error(
            "temporarily_unavailable", "the gateway's database does not answer; try again", 503
        )
    return json_answer({})


async def sign_out_everywhere(request: web.Request, sign_in: SignIn) -> web.Response:
    """``POST /oauth/sign-out``: the bearer's person ends every sign-in of theirs (every client,
    every device), here and at GitLab; 200 ``{"signed_out": n}``."""
    scheme, _, bearer = request.headers.get("Authorization", "").strip().partition(" ")
    bearer = bearer.strip()
    challenge = {"WWW-Authenticate": 'Bearer error="invalid_token"'}
    if scheme.lower() != "bearer" or not sign_in.grants.is_ours(bearer):
        return oauth_error(
            "invalid_token", "send Authorization: Bearer <your gateway access token>", 401, challenge
        )
    try:
        who = await sign_in.grants.signed_in(bearer)
        if who is None:
            return oauth_error("invalid_token", "the access token expired or was revoked", 401, challenge)
        ended = await sign_in.grants.sign_out_everywhere(who.gitlab_user_id)
    except (StoreError, GitLabUnavailable):
        return oauth_error("temporarily_unavailable", "the gateway cannot do this right now; try again", 503)
    log.info("GitLab user %s signed out everywhere (%d sign-ins ended)", who.gitlab_username, ended)
    return json_answer({"signed_out": ended})
