"""Sign-ins abandoned after GitLab's callback (the code never redeemed, or burnt by a wrong
code_verifier): the periodic prune revokes their GitLab tokens at GitLab and deletes them, and
leaves a redeemed sign-in alone."""

from __future__ import annotations

import logging
import secrets
import time
from urllib.parse import parse_qs, urlsplit

import pytest
import sqlalchemy as sa

from gateway.signin import SIGN_IN
from gateway.signin.grants import Grants
from gateway.signin.service import CODE_SECONDS
from gateway.signin.storage import PRUNE_GRACE_SECONDS, SignInStorage
from tests.unit.signin.conftest import REDIRECT, MakeGateway, register, sign_in, through_gitlab, whoami


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
async def test_a_sign_in_never_redeemed_is_revoked_at_gitlab_and_forgotten(
    make_gateway: MakeGateway, caplog: pytest.LogCaptureFixture, request: pytest.FixtureRequest, database: str
) -> None:
    url = request.getfixturevalue("postgres_url_at_head") if database == "postgres" else None
    gw = await make_gateway(url)
    kept = await sign_in(gw)
    client = await register(gw)
    await through_gitlab(gw, client["client_id"], secrets.token_urlsafe(48))  # the tab was closed
    burnt = await through_gitlab(gw, client["client_id"], secrets.token_urlsafe(48))
    code = parse_qs(urlsplit(burnt.headers["Location"]).query)["code"][0]
    wrong = await gw.http.post(
        "/oauth/token",
        data={
            "grant_type": "authorization_code",
            "code": code,
            "code_verifier": secrets.token_urlsafe(48),
            "client_id": client["client_id"],
            "redirect_uri": REDIRECT,
        },
    )
    assert wrong.status == 400
    live_at_gitlab = set(gw.gitlab.refresh)
    assert len(live_at_gitlab) == 3
    assert gw.gitlab.revoked == []

    service = gw.mcp.app[SIGN_IN]
    store = service.storage._store
    # Still within the grace after the codes' expiry: nothing is touched yet.
    soon = SignInStorage(store, lambda: time.time() + CODE_SECONDS + 1)
    await Grants(soon, service.sealer, service.gitlab).prune()
    assert gw.gitlab.revoked == []

    later = SignInStorage(store, lambda: time.time() + CODE_SECONDS + PRUNE_GRACE_SECONDS + 1)
    with caplog.at_level(logging.INFO, logger="gateway.signin"):
        await Grants(later, service.sealer, service.gitlab).prune()

    # Both abandoned sign-ins' GitLab tokens (refresh and access) were revoked at GitLab...
    revoked = [parse_qs(body)["token"][0] for body in gw.gitlab.revoked]
    assert len(revoked) == 4
    assert len(live_at_gitlab & set(revoked)) == 2
    assert all(parse_qs(body)["client_secret"] == ["gitlab-app-secret"] for body in gw.gitlab.revoked)
    # ...and the database keeps no GitLab token but the redeemed sign-in's.
    async with store.connection() as conn:
        rows = (await conn.execute(sa.text("SELECT gitlab_username FROM sign_in_grants"))).all()
    assert [row.gitlab_username for row in rows] == ["alice"]
    lines = [r.getMessage() for r in caplog.records if "abandoned" in r.getMessage()]
    assert lines == ["revoked at GitLab the abandoned sign-in of alice"] * 2
    assert not any("glrt-" in r.getMessage() or "glpat-" in r.getMessage() for r in caplog.records)

    # The redeemed sign-in is untouched: its token works and GitLab's tokens are live.
    assert (await whoami(gw, kept.access_token)).status == 200
    await Grants(later, service.sealer, service.gitlab).prune()
    assert len(gw.gitlab.revoked) == 4
