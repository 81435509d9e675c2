"""``/oauth/authorize``: the consent page, then GitLab; ``/oauth/gitlab/callback``: back from
GitLab, the person checked against the allow-list, then back to the client with a code.

The consent page names the client, the host its answer goes to, the scopes and the broker role to
take. It is hardened as the console is: no framing (``frame-ancestors 'none'``), no script, a
form that posts only here, a CSRF token, and the post's ``Origin`` must be the gateway's own.
A sign-in is bound to the browser that started it by a cookie (a random nonce; the database keeps
its hash): the consent and GitLab's return are refused in any other browser, so nobody can make a
person finish a sign-in someone else started.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import logging
from urllib.parse import urlsplit

from aiohttp import web

from gateway.broker.store import StoreError
from gateway.signin.bounds import CONSENT
from gateway.signin.clients import Client, ClientUnknown
from gateway.signin.gitlab_oauth import GitLabRefused, GitLabUser
from gateway.signin.metadata import SCOPES
from gateway.signin.pending import CodeRow, TransactionRow
from gateway.signin.responses import NO_STORE, back_to_client, invalid_client
from gateway.signin.sealing import CODE_PREFIX, hashed, new_secret, same
from gateway.signin.service import CODE_SECONDS, TRANSACTION_SECONDS, SignIn
from gateway.signin.storage import GrantRow

log = logging.getLogger("gateway.signin")

COOKIE = "gateway_sign_in"
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; "
        "base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    **NO_STORE,
}


def _page(title: str, body: str, status: int = 200, form_targets: tuple[str, ...] = ()) -> web.Response:
    text = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;max-width:36em;margin:3em auto;line-height:1.5}</style>"
        f"</head><body><h1>{html.escape(title)}</h1>{body}</body></html>"
    )
    headers = dict(SECURITY_HEADERS)
    if form_targets:
        # Browsers hold a form's redirects to form-action too: the post goes on to GitLab (allow)
        # or back to the client (deny).
        headers["Content-Security-Policy"] = headers["Content-Security-Policy"].replace(
            "form-action 'self'", "form-action 'self' " + " ".join(form_targets)
        )
    return web.Response(text=text, status=status, content_type="text/html", headers=headers)


def _source(url: str) -> str:
    """A CSP source naming ``url``'s origin (its scheme alone for a private-use scheme)."""
    parts = urlsplit(url)
    if parts.scheme in ("http", "https") and parts.netloc:
        return f"{parts.scheme}://{parts.netloc}"
    return f"{parts.scheme}:"


def _problem(message: str, status: int = 400) -> web.Response:
    return _page("Sign-in refused", f"<p>{html.escape(message)}</p>", status)


def _csrf(sign_in: SignIn, transaction: str) -> str:
    return hmac.new(sign_in.csrf_key, transaction.encode(), hashlib.sha256).hexdigest()


def _scopes(asked: str | None) -> str | None:
    """The scopes granted for ``asked`` (both when none), None when it names one we do not have."""
    if not asked:
        return " ".join(SCOPES)
    names = asked.split()
    if not set(names) <= set(SCOPES):
        return None
    return " ".join(scope for scope in SCOPES if scope in names)


async def authorize_page(request: web.Request, sign_in: SignIn) -> web.Response:
    """``GET /oauth/authorize``: check the request, then show the consent page."""
    wait = sign_in.bounds.retry_after(CONSENT, request.remote)
    if wait is not None:
        # Before the client is looked up: that may fetch its Client ID Metadata Document.
        response = _problem(f"Too Many Requests: {sign_in.bounds.address_refusal(wait)}.", 429)
        response.headers["Retry-After"] = str(wait)
        return response
    query = request.query
    client_id = query.get("client_id", "")
    try:
        client = await sign_in.clients.find(client_id)
    except ClientUnknown as err:
        return invalid_client(str(err))
    redirect_uri = query.get("redirect_uri") or (
        client.redirect_uris[0] if len(client.redirect_uris) == 1 else ""
    )
    if not redirect_uri or not sign_in.clients.redirect_allowed(client, redirect_uri):
        return _problem(
            "The redirect_uri is not one this client registered; the sign-in cannot go back to it. "
            "The client must register it (or use the one it registered)."
        )
    config = sign_in.settings.sign_in
    state = query.get("state")

    def refuse(error: str, description: str) -> web.Response:
        return back_to_client(
            redirect_uri,
            {"error": error, "error_description": description, "state": state, "iss": config.issuer},
        )

    if query.get("response_type") != "code":
        return refuse("unsupported_response_type", "response_type must be code")
    challenge = query.get("code_challenge", "")
    if query.get("code_challenge_method") != "S256" or not 43 <= len(challenge) <= 128:
        return refuse(
            "invalid_request", "PKCE is required: send code_challenge with code_challenge_method=S256"
        )
    scopes = _scopes(query.get("scope"))
    if scopes is None:
        return refuse("invalid_scope", f"scope may name only {' '.join(SCOPES)}")
    resource = query.get("resource")
    if resource is not None and resource.rstrip("/") != config.resource:
        return refuse("invalid_target", f"this gateway signs in only for {config.resource}")
    transaction = new_secret()
    browser = request.cookies.get(COOKIE) or new_secret()
    try:
        full = await sign_in.bounds.pending_full()
        if full is not None:
            return refuse("temporarily_unavailable", full)
        await sign_in.storage.start(
            TransactionRow(
                id_hash=hashed(transaction),
                client_id=client.client_id,
                redirect_uri=redirect_uri,
                state=state,
                code_challenge=challenge,
                scopes=scopes,
                browser_hash=hashed(browser),
                role=None,
                gitlab_verifier=None,
                expires=sign_in.clock() + TRANSACTION_SECONDS,
            )
        )
    except StoreError:
        return _problem("The gateway's database does not answer right now; try again shortly.", 503)
    response = _page(
        "Sign in to the GitLab MCP gateway",
        _consent_form(sign_in, client, redirect_uri, scopes, transaction),
        form_targets=(_source(sign_in.gitlab.authorize_url("", "")), _source(redirect_uri)),
    )
    response.set_cookie(
        COOKIE,
        browser,
        max_age=int(TRANSACTION_SECONDS),
        path="/oauth",
        secure=config.issuer.startswith("https://"),
        httponly=True,
        samesite="Lax",
    )
    return response


def _consent_form(sign_in: SignIn, client: Client, redirect_uri: str, scopes: str, transaction: str) -> str:
    target = urlsplit(redirect_uri)
    where = target.hostname or f"{target.scheme}:"
    gitlab = html.escape(sign_in.gitlab.scope)
    roles = sign_in.settings.sign_in.offered_roles
    role_field = ""
    if roles:
        options = "".join(f"<option value='{html.escape(r)}'>{html.escape(r)}</option>" for r in roles)
        role_field = (
            "<p><label>Broker role to take: <select name='role'>"
            f"{options}</select></label> (only a role the operator gave you is accepted)</p>"
        )
    can = "read GitLab as you" + (" and change it as you" if "mcp:write" in scopes.split() else "")
    return (
        f"<p><strong>{html.escape(client.shown_name)}</strong> asks to use this gateway's tools as you: "
        f"it may {can} (scopes <code>{html.escape(scopes)}</code>; GitLab scope <code>{gitlab}</code>).</p>"
        f"<p>Its answer goes to <strong>{html.escape(where)}</strong>"
        f" (<code>{html.escape(redirect_uri[:300])}</code>).</p>"
        "<p>Allow only if you started this sign-in from that application. You then sign in at GitLab.</p>"
        '<form method="post" action="/oauth/authorize">'
        f'<input type="hidden" name="transaction" value="{html.escape(transaction)}">'
        f'<input type="hidden" name="csrf" value="{_csrf(sign_in, transaction)}">'
        f"{role_field}"
        '<button name="decision" value="allow">Allow and sign in with GitLab</button> '
        '<button name="decision" value="deny">Deny</button></form>'
    )


def _origin_problem(request: web.Request, sign_in: SignIn) -> str | None:
    own = urlsplit(sign_in.settings.sign_in.issuer)
    origin = request.headers.get("Origin")
    if origin is not None and origin.rstrip("/").lower() != f"{own.scheme}://{own.netloc}".lower():
        return f"the form was posted from {origin[:100]!r}, not from this gateway's own page"
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None and site not in ("same-origin", "none"):
        return "the form was posted from another site"
    return None


async def authorize_decision(request: web.Request, sign_in: SignIn) -> web.Response:
    """``POST /oauth/authorize``: the person's decision on the consent page."""
    problem = _origin_problem(request, sign_in)
    if problem is not None:
        return _problem(f"Forbidden: {problem}.", 403)
    form = await request.post()
    transaction = str(form.get("transaction") or "")
    csrf = str(form.get("csrf") or "")
    browser = request.cookies.get(COOKIE, "")
    if not transaction or not same(csrf, _csrf(sign_in, transaction)):
        return _problem("Forbidden: the form's CSRF token is missing or wrong. Start the sign-in again.", 403)
    try:
        row = await sign_in.storage.transaction(hashed(transaction))
    except StoreError:
        return _problem("The gateway's database does not answer right now; try again shortly.", 503)
    if row is None or not browser or not same(hashed(browser), row.browser_hash):
        return _problem(
            "This sign-in expired, was already decided, or was started in another browser. Start it again "
            "from your application."
        )
    iss = sign_in.settings.sign_in.issuer
    if form.get("decision") != "allow":
        await sign_in.storage.forget(row.id_hash)
        return back_to_client(
            row.redirect_uri,
            {
                "error": "access_denied",
                "error_description": "the person denied",
                "state": row.state,
                "iss": iss,
            },
        )
    roles = sign_in.settings.sign_in.offered_roles
    role = form.get("role")
    if roles and role not in roles:
        return _problem("Choose one of the roles offered.")
    gitlab_state, verifier = new_secret(), new_secret()
    moved = await sign_in.storage.to_gitlab(
        row.id_hash,
        role=str(role) if roles else None,
        gitlab_state_hash=hashed(gitlab_state),
        verifier=sign_in.sealer.seal(verifier, row.id_hash),
    )
    if not moved:
        return _problem("This sign-in was already decided. Start it again from your application.")
    return web.Response(
        status=302, headers={"Location": sign_in.gitlab.authorize_url(gitlab_state, verifier), **NO_STORE}
    )


def _allowed(sign_in: SignIn, user: GitLabUser) -> bool:
    config = sign_in.settings.sign_in
    if not config.allowed_users and not config.allowed_groups:
        return True
    if user.username in config.allowed_users:
        return True
    return any(g == a or g.startswith(a + "/") for g in user.groups for a in config.allowed_groups)


def _roles_of(sign_in: SignIn, user: GitLabUser) -> set[str]:
    roles: set[str] = set()
    for who, given in sign_in.settings.sign_in.roles.items():
        if who == user.username or any(g == who or g.startswith(who + "/") for g in user.groups):
            roles.update(given)
    return roles


async def gitlab_callback(request: web.Request, sign_in: SignIn) -> web.Response:
    """``GET /oauth/gitlab/callback``: GitLab's answer, then back to the client with a code."""
    state = request.query.get("state", "")
    try:
        row = await sign_in.storage.back_from_gitlab(hashed(state)) if state else None
    except StoreError:
        return _problem("The gateway's database does not answer right now; try again shortly.", 503)
    browser = request.cookies.get(COOKIE, "")
    if (
        row is None
        or row.gitlab_verifier is None
        or not browser
        or not same(hashed(browser), row.browser_hash)
    ):
        return _problem(
            "This sign-in is unknown, expired, already finished, or was started in another browser. Start it "
            "again from your application."
        )
    config = sign_in.settings.sign_in

    def refuse(error: str, description: str) -> web.Response:
        return back_to_client(
            row.redirect_uri,
            {"error": error, "error_description": description, "state": row.state, "iss": config.issuer},
        )

    code = request.query.get("code")
    if not code:
        return refuse(
            "access_denied", f"GitLab did not sign you in ({request.query.get('error', 'no code')[:100]})"
        )
    try:
        tokens = await sign_in.gitlab.exchange(code, sign_in.sealer.open(row.gitlab_verifier, row.id_hash))
        user = await sign_in.gitlab.user(
            tokens.access_token, with_groups=bool(config.allowed_groups or config.roles)
        )
    except GitLabRefused as err:
        if err.error == "invalid_client":
            # Every sign-in fails the same way until the operator fixes the settings: retrying
            # does not help the person, and the log must point at the settings to check.
            log.warning(
                "sign-in through GitLab failed: %s; check sign_in.gitlab_client_id and "
                "sign_in.gitlab_client_secret (GATEWAY_SIGN_IN__GITLAB_CLIENT_SECRET) against the "
                "GitLab application's id and secret",
                err,
            )
            return refuse(
                "server_error",
                "the gateway's GitLab application is misconfigured (GitLab refused its id or secret); "
                "tell the gateway's operator",
            )
        log.warning("sign-in through GitLab failed: %s", err)
        return refuse("server_error", "GitLab did not complete the sign-in; try again")
    if not _allowed(sign_in, user):
        log.info(
            "GitLab user %s is not allowed to sign in (sign_in.allowed_users, allowed_groups)", user.username
        )
        await sign_in.gitlab.revoke(tokens.access_token)
        sign_in.count("refused")
        return refuse("access_denied", f"GitLab user {user.username} may not use this gateway")
    if row.role is not None and row.role not in _roles_of(sign_in, user):
        log.info(
            "GitLab user %s may not take the role %s (sign_in.roles); sign-in refused",
            user.username,
            row.role,
        )
        await sign_in.gitlab.revoke(tokens.access_token)
        sign_in.count("refused")
        return refuse("access_denied", f"the role {row.role} is not one the operator gave {user.username}")
    grant_id = new_secret()
    code_out = new_secret(CODE_PREFIX)
    now = sign_in.clock()
    try:
        await sign_in.storage.grant_with_code(
            GrantRow(
                id=grant_id,
                client_id=row.client_id,
                gitlab_user_id=user.id,
                gitlab_username=user.username,
                role=row.role,
                scopes=row.scopes,
                gitlab_tokens=sign_in.sealer.seal(tokens.sealable(), grant_id),
                gitlab_expires=tokens.expires_at,
                expires=now + CODE_SECONDS,
                revoked=None,
            ),
            hashed(code_out),
            CodeRow(
                grant_id=grant_id,
                client_id=row.client_id,
                redirect_uri=row.redirect_uri,
                code_challenge=row.code_challenge,
                expires=now + CODE_SECONDS,
            ),
        )
    except StoreError:
        return _problem("The gateway's database does not answer right now; try again shortly.", 503)
    sign_in.count("signed_in")
    log.info(
        "GitLab user %s signed in (client %s, role %s)", user.username, row.client_id, row.role or "none"
    )
    response = back_to_client(row.redirect_uri, {"code": code_out, "state": row.state, "iss": config.issuer})
    response.del_cookie(COOKIE, path="/oauth")
    return response
