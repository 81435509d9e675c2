"""Registration and the consent page write rows before anyone signed in: each address has a
budget and the database a cap, past which the gateway answers 429 ``temporarily_unavailable``."""

from __future__ import annotations

import secrets
from urllib.parse import parse_qs, urlsplit

from tests.unit.signin.conftest import REDIRECT, MakeGateway, consent_page, register
from tests.unit.signin.test_console_sign_in import LISTS


async def test_an_address_past_its_budget_may_not_register_or_open_consent_pages(
    make_gateway: MakeGateway,
) -> None:
    gw = await make_gateway(sign_in={"starts_per_address": 2, "starts_window_seconds": 600})
    client = await register(gw)
    await register(gw)
    refused = await gw.http.post("/oauth/register", json={"redirect_uris": [REDIRECT]})
    assert refused.status == 429
    assert 1 <= int(refused.headers["Retry-After"]) <= 300
    body = await refused.json()
    assert body["error"] == "temporarily_unavailable"
    assert "sign_in.starts_per_address" in body["error_description"]
    # The consent page has its own budget of the same size.
    verifier = secrets.token_urlsafe(48)
    for _ in range(2):
        assert (await consent_page(gw, client["client_id"], verifier)).status == 200
    page = await consent_page(gw, client["client_id"], verifier)
    assert page.status == 429
    assert "Retry-After" in page.headers
    assert "sign_in.starts_per_address" in await page.text()


async def test_a_full_database_of_sign_ins_under_way_sends_the_client_back(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(sign_in={"max_pending_sign_ins": 1})
    client = await register(gw)
    verifier = secrets.token_urlsafe(48)
    assert (await consent_page(gw, client["client_id"], verifier)).status == 200
    back = await consent_page(gw, client["client_id"], verifier)
    assert back.status == 302
    location = back.headers["Location"]
    assert location.startswith(REDIRECT)
    answer = parse_qs(urlsplit(location).query)
    assert answer["error"] == ["temporarily_unavailable"]
    assert "sign_in.max_pending_sign_ins" in answer["error_description"][0]
    assert answer["state"] == ["client-state"]


async def test_registration_stops_at_the_cap_of_registered_clients(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(sign_in={"max_registered_clients": 1})
    await register(gw)
    refused = await gw.http.post("/oauth/register", json={"redirect_uris": [REDIRECT]})
    assert refused.status == 429
    body = await refused.json()
    assert body["error"] == "temporarily_unavailable"
    assert "sign_in.max_registered_clients" in body["error_description"]


async def test_the_account_page_sign_in_is_bounded_too(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(sign_in={"max_pending_sign_ins": 1})
    assert (await gw.http.get("/oauth/account/sign-in", allow_redirects=False)).status == 302
    refused = await gw.http.get("/oauth/account/sign-in", allow_redirects=False)
    assert refused.status == 429
    assert "sign_in.max_pending_sign_ins" in await refused.text()


async def test_the_console_sign_in_is_bounded_too(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(sign_in={"max_pending_sign_ins": 1}, console=LISTS)
    first = await gw.http.get("/broker/gitlab/sign-in", allow_redirects=False)
    assert first.status == 302, await first.text()
    refused = await gw.http.get("/broker/gitlab/sign-in", allow_redirects=False)
    assert refused.status == 429
    assert "sign_in.max_pending_sign_ins" in await refused.text()
