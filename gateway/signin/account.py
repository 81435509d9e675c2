"""The account page, ``/oauth/account``: a person signs in with GitLab (the same application, no
MCP client involved) and mints, lists and revokes named agent tokens for headless agents, or
signs out everywhere.

Its session is a gateway access token of scope ``account`` in an HttpOnly cookie (refused on
``/mcp``); the sign-in is the consent flow's (``consent``) with the gateway itself as the
client: PKCE verifier and ``state`` in a short cookie, the code redeemed here. Every post is
checked as the consent page's are (Origin, CSRF bound to the session).
"""

from __future__ import annotations

import hashlib
import hmac
import html
import logging
import re
import time
from typing import Any

from aiohttp import web

from gateway.broker.store import StoreError
from gateway.signin.agent_tokens import AgentTokens, TooManyTokens
from gateway.signin.consent import _origin_problem, _page, _problem, _roles_of
from gateway.signin.gitlab_oauth import GitLabRefused
from gateway.signin.grants import ACCOUNT_SCOPE, GitLabUnavailable, SignedIn
from gateway.signin.own_flow import FlowFailed, redeem, to_gitlab, too_many
from gateway.signin.responses import NO_STORE
from gateway.signin.sealing import ACCESS_PREFIX, hashed, new_secret, same
from gateway.signin.service import TRANSACTION_SECONDS, SignIn

log = logging.getLogger("gateway.signin")

ACCOUNT_CLIENT = "gateway-account"
SESSION_COOKIE = "gateway_account"
FLOW_COOKIE = "gateway_account_flow"
PATH = "/oauth/account"
#: How long an account page session lasts.
SESSION_SECONDS = 12 * 3600
_NAME = re.compile(r"[A-Za-z0-9 ._-]{1,60}")


def _cookie(response: web.StreamResponse, sign_in: SignIn, name: str, value: str, seconds: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=seconds,
        path=PATH,
        secure=sign_in.settings.sign_in.issuer.startswith("https://"),
        httponly=True,
        samesite="Lax",
    )


def _csrf(sign_in: SignIn, session: str) -> str:
    return hmac.new(sign_in.csrf_key, f"account:{hashed(session)}".encode(), hashlib.sha256).hexdigest()


async def _who(request: web.Request, sign_in: SignIn) -> tuple[str, SignedIn] | None:
    session = request.cookies.get(SESSION_COOKIE, "")
    if not session.startswith(ACCESS_PREFIX):
        return None
    who = await sign_in.grants.signed_in(session, account=True)
    return None if who is None else (session, who)


async def start(request: web.Request, sign_in: SignIn) -> web.Response:
    """``GET /oauth/account/sign-in``: on to GitLab."""
    try:
        response, flow = await to_gitlab(
            request,
            sign_in,
            client_id=ACCOUNT_CLIENT,
            redirect_uri=f"{sign_in.settings.sign_in.issuer}{PATH}/done",
            scopes=ACCOUNT_SCOPE,
        )
    except FlowFailed as err:
        return too_many(err)
    except StoreError:
        return _problem("The gateway's database does not answer right now; try again shortly.", 503)
    _cookie(response, sign_in, FLOW_COOKIE, flow, int(TRANSACTION_SECONDS))
    return response


async def done(request: web.Request, sign_in: SignIn) -> web.Response:
    """``GET /oauth/account/done``: back from GitLab (through the callback); the session starts."""
    try:
        found = await redeem(request, sign_in, request.cookies.get(FLOW_COOKIE, ""), ACCOUNT_CLIENT)
    except FlowFailed as err:
        if err.status == 403:
            return _problem(f"Signing in to your account failed: {err}. Try again.", 403)
        return _problem("This sign-in expired or was already used. Sign in again.")
    session = new_secret(ACCESS_PREFIX)
    await sign_in.storage.issue_access(
        found.grant_id, ACCOUNT_SCOPE, hashed(session), sign_in.clock() + SESSION_SECONDS
    )
    response = web.Response(status=303, headers={"Location": PATH, **NO_STORE})
    _cookie(response, sign_in, SESSION_COOKIE, session, SESSION_SECONDS)
    response.del_cookie(FLOW_COOKIE, path=PATH)
    return response


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(seconds))


async def page(request: web.Request, sign_in: SignIn, *, minted: str | None = None) -> web.Response:
    """``GET /oauth/account``: the person's agent tokens, or a link to sign in."""
    found = await _who(request, sign_in)
    if found is None:
        return _page(
            "Your gateway account",
            "<p>Sign in with GitLab to manage agent tokens.</p>"
            f'<p><a href="{PATH}/sign-in">Sign in with GitLab</a></p>',
        )
    session, who = found
    tokens = await sign_in.agents.listed(who.gitlab_user_id)
    csrf = _csrf(sign_in, session)
    rows = "".join(
        f"<tr><td>{html.escape(t.name)}</td><td>{html.escape(t.role or '-')}</td>"
        f"<td>{html.escape(t.scopes)}</td>"
        f'<td>{_when(t.expires)}</td><td><form method="post" action="{PATH}">'
        f'<input type="hidden" name="csrf" value="{csrf}"><input type="hidden" name="token" value="{t.id}">'
        '<button name="action" value="revoke">Revoke</button></form></td></tr>'
        for t in tokens
    )
    roles = sign_in.settings.sign_in.offered_roles
    role_field = (
        "<label>Role <select name='role'>"
        + "".join(f"<option value='{html.escape(r)}'>{html.escape(r)}</option>" for r in roles)
        + "</select></label> "
        if roles
        else ""
    )
    shown = (
        "<p><strong>Your new agent token</strong> (shown once; the agent sends it as "
        f"<code>Authorization: Bearer …</code>):</p><pre>{html.escape(minted)}</pre>"
        if minted
        else ""
    )
    body = (
        f"<p>Signed in as <strong>{html.escape(who.gitlab_username)}</strong> (GitLab).</p>{shown}"
        "<h2>Agent tokens</h2><table>"
        "<tr><th>Name</th><th>Role</th><th>Scopes</th><th>Expires</th><th></th></tr>"
        f"{rows}</table><h2>New agent token</h2>"
        f'<form method="post" action="{PATH}"><input type="hidden" name="csrf" value="{csrf}">'
        "<label>Name <input name='name' required maxlength='60'></label> "
        f"{role_field}<label>Days <input name='days' type='number' min='1' "
        f"max='{sign_in.settings.sign_in.refresh_token_days}' value='30'></label> "
        "<label><input type='checkbox' name='write' value='1' checked> may change GitLab (mcp:write)</label> "
        '<button name="action" value="mint">Create</button></form>'
        f'<h2>Sign out everywhere</h2><form method="post" action="{PATH}">'
        f'<input type="hidden" name="csrf" value="{csrf}">'
        "<p>Ends every sign-in of yours on this gateway (every client, every agent token) and revokes "
        "them at GitLab.</p>"
        '<button name="action" value="sign-out">Sign out everywhere</button></form>'
    )
    response = _page("Your gateway account", body)
    return response


async def act(request: web.Request, sign_in: SignIn) -> web.Response:
    """``POST /oauth/account``: mint, revoke, or sign out everywhere."""
    problem = _origin_problem(request, sign_in)
    if problem is not None:
        return _problem(f"Forbidden: {problem}.", 403)
    try:
        found = await _who(request, sign_in)
    except (StoreError, GitLabUnavailable):
        return _problem("The gateway cannot do this right now; try again shortly.", 503)
    if found is None:
        return web.Response(status=303, headers={"Location": PATH, **NO_STORE})
    session, who = found
    form = await request.post()
    if not same(str(form.get("csrf") or ""), _csrf(sign_in, session)):
        return _problem("Forbidden: the form's CSRF token is missing or wrong. Reload the page.", 403)
    action = form.get("action")
    agents = sign_in.agents
    if action == "revoke":
        token_id = str(form.get("token") or "")
        if await agents.revoke(who.gitlab_user_id, token_id):
            # The id, never the token: the row holds only the token's hash.
            log.info("GitLab user %s revoked agent token %s", who.gitlab_username, token_id)
        sign_in.grants.forget()
        return web.Response(status=303, headers={"Location": PATH, **NO_STORE})
    if action == "sign-out":
        ended = await sign_in.grants.sign_out_everywhere(who.gitlab_user_id)
        log.info("GitLab user %s signed out everywhere (%d sign-ins ended)", who.gitlab_username, ended)
        response = _page("Signed out everywhere", f"<p>{ended} sign-ins ended, here and at GitLab.</p>")
        response.del_cookie(SESSION_COOKIE, path=PATH)
        return response
    if action != "mint":
        return _problem("Unknown action.")
    return await _mint(request, sign_in, agents, who, form)


async def _mint(
    request: web.Request, sign_in: SignIn, agents: AgentTokens, who: SignedIn, form: Any
) -> web.Response:
    config = sign_in.settings.sign_in
    name = str(form.get("name") or "").strip()
    if not _NAME.fullmatch(name):
        return _problem("A token's name is 1 to 60 letters, digits, spaces, dots, dashes or underscores.")
    try:
        days = int(str(form.get("days") or "30"))
    except ValueError:
        days = 0
    if not 1 <= days <= config.refresh_token_days:
        return _problem(
            f"Days must be between 1 and {config.refresh_token_days} (sign_in.refresh_token_days)."
        )
    role = str(form.get("role") or "") or None
    if role is not None or config.offered_roles:
        try:
            user = await sign_in.gitlab.user(who.gitlab_token, with_groups=True)
        except GitLabRefused:
            return _problem("GitLab did not say who you are right now; try again shortly.", 503)
        if role not in _roles_of(sign_in, user):
            return _problem(f"The role {role or '(none)'} is not one the operator gave you.", 403)
    token = new_secret(ACCESS_PREFIX)
    try:
        await agents.mint(
            grant_id=who.grant_id,
            gitlab_user_id=who.gitlab_user_id,
            name=name,
            role=role,
            scopes="mcp:read mcp:write" if form.get("write") else "mcp:read",
            token_hash=hashed(token),
            days=days,
        )
    except TooManyTokens:
        return _problem("You hold the most agent tokens one person may; revoke some first.")
    log.info("GitLab user %s created agent token %r (role %s)", who.gitlab_username, name, role or "none")
    return await page(request, sign_in, minted=token)
