"""The broker console's "Sign in with GitLab": operators and viewers by GitLab user or group,
beside the console tokens."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from pydantic import ValidationError

from tests.unit.console.conftest import broker_of
from tests.unit.signin.conftest import GITLAB, PUBLIC, Gateway, MakeGateway

OPERATOR_TOKEN = "operator-token-0123456789"
#: alice is in the group team (and team/backend); bob in none.
LISTS = {"operators": ["team/backend"], "viewers": ["bob"], "operator_token": OPERATOR_TOKEN}


async def to_gitlab(gw: Gateway, user: str) -> tuple[str, str]:
    """The console's button, then GitLab: (code, state) GitLab sends the browser back with."""
    gw.gitlab.current_user = user
    login = await gw.http.get("/broker")
    assert 'href="/broker/gitlab/sign-in">Sign in with GitLab' in await login.text()
    start = await gw.http.get("/broker/gitlab/sign-in", allow_redirects=False)
    assert start.status == 302, await start.text()
    assert start.headers["Location"].startswith(f"{GITLAB}/oauth/authorize?")
    return gw.gitlab.approve(start.headers["Location"])


async def console_sign_in(gw: Gateway, user: str) -> Any:
    """The whole round trip; the console's answer to the browser's return."""
    code, state = await to_gitlab(gw, user)
    back = await gw.http.get(
        "/oauth/gitlab/callback", params={"code": code, "state": state}, allow_redirects=False
    )
    assert back.status == 302, await back.text()
    location = back.headers["Location"]
    assert location.startswith(f"{PUBLIC}/broker/gitlab/done?"), location
    return await gw.http.get(location.removeprefix(PUBLIC), allow_redirects=False)


async def csrf(gw: Gateway) -> str:
    page = await gw.http.get("/broker")
    found = re.search(r'name="csrf" value="([^"]+)"', await page.text())
    assert found is not None, await page.text()
    return found.group(1)


def own(gw: Gateway) -> str:
    """The console's origin, as the browser sees it (the test server's port)."""
    return f"http://{gw.http.host}:{gw.http.port}"


async def instruct(gw: Gateway, token: str) -> Any:
    return await gw.http.post(
        "/broker/actions/instruct",
        data={"text": "go on", "confirm": "yes", "csrf": token},
        headers={"Origin": own(gw)},
        allow_redirects=False,
    )


async def test_an_operator_signs_in_with_gitlab_by_group_and_acts_under_their_name(
    make_gateway: MakeGateway,
) -> None:
    gw = await make_gateway(console=LISTS)
    done = await console_sign_in(gw, "alice")
    assert done.status == 200 and "Signed in as <strong>alice</strong> (operator)" in await done.text()
    page = await gw.http.get("/broker")
    assert "alice@gitlab" in await page.text()
    acted = await instruct(gw, await csrf(gw))
    assert acted.status == 303 and acted.headers["Location"] == "/broker?done=instruct"
    log = await broker_of(gw.http).monitoring.activity_log("pipeline", 5)
    assert any("[operator:alice@gitlab] instruction" in line for line in log["lines"]), log
    # The console keeps no GitLab token: the sign-in's is revoked at GitLab at once.
    assert len(gw.gitlab.revoked) == 2


async def test_a_viewer_watches_but_may_not_act(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(console=LISTS)
    done = await console_sign_in(gw, "bob")
    assert done.status == 200 and "(viewer)" in await done.text()
    refused = await instruct(gw, await csrf(gw))
    assert refused.status == 403 and "read-only" in await refused.text()


async def test_a_person_in_neither_list_is_refused_with_a_clear_page(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(console={"operators": ["someone"], "viewers": ["team/frontend"]})
    done = await console_sign_in(gw, "alice")
    text = await done.text()
    assert done.status == 403
    assert "GitLab user alice may not use this console" in text and "console.operators" in text
    assert "gateway_console" not in done.cookies
    page = await gw.http.get("/broker")
    assert 'name="csrf"' not in await page.text()  # still signed out


async def test_the_sign_in_allow_list_refuses_before_the_console_lists(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(console=LISTS, sign_in={"allowed_users": ["bob"]})
    done = await console_sign_in(gw, "alice")
    assert done.status == 403 and "may not use this gateway" in await done.text()


async def test_a_return_with_another_state_or_without_the_flow_cookie_is_refused(
    make_gateway: MakeGateway,
) -> None:
    gw = await make_gateway(console=LISTS)
    code, state = await to_gitlab(gw, "alice")
    back = await gw.http.get(
        "/oauth/gitlab/callback", params={"code": code, "state": state}, allow_redirects=False
    )
    query = {k: v[0] for k, v in parse_qs(urlsplit(back.headers["Location"]).query).items()}
    forged = await gw.http.get("/broker/gitlab/done", params={**query, "state": "not-this-one"})
    assert forged.status == 403 and "Signing in with GitLab failed" in await forged.text()
    gw.http.session.cookie_jar.clear()  # another browser: no flow cookie
    other = await gw.http.get("/broker/gitlab/done", params=query)
    assert other.status == 403
    assert 'name="csrf"' not in await (await gw.http.get("/broker")).text()


async def test_gitlab_sessions_need_the_csrf_token_and_console_tokens_still_work(
    make_gateway: MakeGateway,
) -> None:
    gw = await make_gateway(console=LISTS)
    await console_sign_in(gw, "alice")
    forged = await instruct(gw, "not-the-token")
    assert forged.status == 403 and "CSRF" in await forged.text()
    gw.http.session.cookie_jar.clear()
    login = await gw.http.post(
        "/broker/login",
        data={"token": OPERATOR_TOKEN, "name": "alice@gitlab"},
        headers={"Origin": own(gw)},
        allow_redirects=False,
    )
    assert login.status == 303
    page = await gw.http.get("/broker")
    assert "alice@gitlab" not in await page.text()  # a token sign-in cannot take a GitLab name
    assert (await instruct(gw, await csrf(gw))).status == 303


def test_console_people_need_sign_in_on(make_settings: Any) -> None:
    with pytest.raises(ValidationError, match=r"set sign_in\.enabled"):
        make_settings(console={"operators": ["alice"]})
