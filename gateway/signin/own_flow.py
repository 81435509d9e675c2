"""The gateway as its own client of the sign-in: the account page and the broker console send a
person to GitLab and take the answer back on one of their own pages.

The same transaction as an MCP client's (``consent``), without the consent page: PKCE verifier and
``state`` for the page's own short cookie, the sign-in bound to the browser by the consent cookie,
GitLab's return through ``/oauth/gitlab/callback`` and on to ``redirect_uri`` exactly, with a
code redeemed here.
"""

from __future__ import annotations

from aiohttp import web

from gateway.signin.consent import COOKIE, _problem
from gateway.signin.gitlab_oauth import s256
from gateway.signin.pending import CodeRow, TransactionRow
from gateway.signin.responses import NO_STORE
from gateway.signin.sealing import hashed, new_secret, same
from gateway.signin.service import TRANSACTION_SECONDS, SignIn


class FlowFailed(Exception):
    """The return from GitLab does not finish a sign-in; the message says why, for the person."""

    def __init__(self, message: str, status: int, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


def too_many(err: FlowFailed) -> web.Response:
    """The page of a sign-in :func:`to_gitlab` refused (``sign_in.bounds``), with ``Retry-After``."""
    response = _problem(f"Too Many Requests: {err}.", err.status)
    if err.retry_after is not None:
        response.headers["Retry-After"] = str(err.retry_after)
    return response


async def to_gitlab(
    request: web.Request, sign_in: SignIn, *, client_id: str, redirect_uri: str, scopes: str
) -> tuple[web.Response, str]:
    """The redirect to GitLab (with the browser's consent cookie), and the flow's secret
    (``state.verifier``) for the caller's own cookie on ``redirect_uri``'s page.

    Raises:
        FlowFailed: 429, a budget or cap of ``sign_in.bounds`` is spent (:func:`too_many`).
        StoreError: the database does not answer.
    """
    refusal = await sign_in.bounds.own_flow_refusal(request.remote)
    if refusal is not None:
        raise FlowFailed(refusal[0], 429, refusal[1])
    transaction, verifier, state = new_secret(), new_secret(), new_secret()
    browser = request.cookies.get(COOKIE) or new_secret()
    gitlab_state, gitlab_verifier = new_secret(), new_secret()
    id_hash = hashed(transaction)
    await sign_in.storage.start(
        TransactionRow(
            id_hash=id_hash,
            client_id=client_id,
            redirect_uri=redirect_uri,
            state=state,
            code_challenge=s256(verifier),
            scopes=scopes,
            browser_hash=hashed(browser),
            role=None,
            gitlab_verifier=None,
            expires=sign_in.clock() + TRANSACTION_SECONDS,
        )
    )
    await sign_in.storage.to_gitlab(
        id_hash,
        role=None,
        gitlab_state_hash=hashed(gitlab_state),
        verifier=sign_in.sealer.seal(gitlab_verifier, id_hash),
    )
    response = web.Response(
        status=302,
        headers={"Location": sign_in.gitlab.authorize_url(gitlab_state, gitlab_verifier), **NO_STORE},
    )
    response.set_cookie(
        COOKIE,
        browser,
        max_age=int(TRANSACTION_SECONDS),
        path="/oauth",
        httponly=True,
        samesite="Lax",
        secure=sign_in.settings.sign_in.issuer.startswith("https://"),
    )
    return response, f"{state}.{verifier}"


async def redeem(request: web.Request, sign_in: SignIn, flow: str, client_id: str) -> CodeRow:
    """The code GitLab's return brought, checked against the flow's cookie (``state``, PKCE).

    Raises:
        FlowFailed: no code, another ``state`` (a return this browser did not start), or a code
            expired, used already or not this client's.
    """
    state, _, verifier = flow.partition(".")
    query = request.query
    code = query.get("code", "")
    if not state or not code or not same(query.get("state", ""), state):
        why = query.get("error_description", "the sign-in did not finish")
        raise FlowFailed(why[:200], 403)
    found = await sign_in.storage.redeem(hashed(code))
    if found is None or found.client_id != client_id or not same(s256(verifier), found.code_challenge):
        raise FlowFailed("this sign-in expired or was already used", 400)
    return found
