"""The account page: a person signs in with GitLab, mints named agent tokens for headless agents,
lists and revokes them, and signs out everywhere."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest

from tests.unit.signin.conftest import PUBLIC, Gateway, MakeGateway, whoami


async def account_session(gw: Gateway) -> None:
    """Sign in to the account page, as a browser does (the cookies stay in the test client)."""
    start = await gw.http.get("/oauth/account/sign-in", allow_redirects=False)
    assert start.status == 302, await start.text()
    code, state = gw.gitlab.approve(start.headers["Location"])
    back = await gw.http.get(
        "/oauth/gitlab/callback", params={"code": code, "state": state}, allow_redirects=False
    )
    assert back.status == 302 and back.headers["Location"].startswith(f"{PUBLIC}/oauth/account/done?")
    done = await gw.http.get(back.headers["Location"].removeprefix(PUBLIC), allow_redirects=False)
    assert done.status == 303, await done.text()


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found, page
    return found.group(1)


async def post(gw: Gateway, **form: Any) -> Any:
    return await gw.http.post("/oauth/account", data=form, headers={"Origin": PUBLIC}, allow_redirects=False)


async def test_a_person_mints_uses_and_revokes_an_agent_token(
    make_gateway: MakeGateway, caplog: pytest.LogCaptureFixture
) -> None:
    gw = await make_gateway(sign_in={"roles": {"team": ["dev"]}})
    before = await (await gw.http.get("/oauth/account")).text()
    assert "Sign in with GitLab" in before
    await account_session(gw)
    page = await (await gw.http.get("/oauth/account")).text()
    assert "Signed in as <strong>alice</strong>" in page
    csrf = csrf_of(page)
    minted = await post(gw, csrf=csrf, action="mint", name="ci bot", role="dev", days="7", write="1")
    text = await minted.text()
    token = re.search(r"<pre>(gwat_[^<]+)</pre>", text)
    assert token, text
    assert "ci bot" in text
    # The agent uses it as a static bearer: the person's GitLab user, the token's role.
    assert (await whoami(gw, token.group(1))).status == 200
    caller = gw.probe.contexts[-1].call.caller
    assert caller.agent_id == "dev" and caller.gitlab_user == "alice"
    # The account session itself is refused on /mcp.
    session = gw.http.session.cookie_jar.filter_cookies(gw.http.make_url("/oauth/account"))[
        "gateway_account"
    ].value
    assert (await whoami(gw, session)).status == 401
    token_id = re.search(r'name="token" value="([0-9a-f]+)"', text)
    assert token_id
    with caplog.at_level(logging.INFO, logger="gateway"):
        revoked = await post(gw, csrf=csrf, action="revoke", token=token_id.group(1))
    assert revoked.status == 303
    assert f"GitLab user alice revoked agent token {token_id.group(1)}" in caplog.text
    assert (await whoami(gw, token.group(1))).status == 401
    assert "ci bot" not in await (await gw.http.get("/oauth/account")).text()


async def test_the_account_page_refuses_forged_posts_and_foreign_roles(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(sign_in={"roles": {"bob": ["pm"], "team": ["dev"]}})
    await account_session(gw)
    csrf = csrf_of(await (await gw.http.get("/oauth/account")).text())
    assert (await post(gw, csrf="0" * 64, action="mint", name="x", role="dev", days="1")).status == 403
    other = await gw.http.post(
        "/oauth/account",
        data={"csrf": csrf, "action": "mint", "name": "x", "role": "dev", "days": "1"},
        headers={"Origin": "https://evil.example"},
    )
    assert other.status == 403
    assert (
        await post(gw, csrf=csrf, action="mint", name="x", role="pm", days="1")
    ).status == 403  # bob's role
    assert (await post(gw, csrf=csrf, action="mint", name="x", role="dev", days="999")).status == 400


async def test_sign_out_everywhere_from_the_account_page(make_gateway: MakeGateway) -> None:
    gw = await make_gateway()
    await account_session(gw)
    csrf = csrf_of(await (await gw.http.get("/oauth/account")).text())
    text = await (await post(gw, csrf=csrf, action="mint", name="agent", days="3")).text()
    token = re.search(r"<pre>(gwat_[^<]+)</pre>", text)
    assert token
    assert (await whoami(gw, token.group(1))).status == 200
    out = await post(gw, csrf=csrf, action="sign-out")
    assert out.status == 200 and "sign-ins ended" in await out.text()
    assert (await whoami(gw, token.group(1))).status == 401
    assert "Sign in with GitLab" in await (await gw.http.get("/oauth/account")).text()
    assert gw.gitlab.revoked
