"""The gateway's tokens: codes used once with PKCE, refresh tokens that rotate (the previous one
valid until its successor is first used), RFC 7009 revocation, and the scopes' tools."""

from __future__ import annotations

import asyncio
import base64
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from gateway.observability.metrics import METRICS
from gateway.signin import SIGN_IN
from tests.unit.signin.conftest import (
    REDIRECT,
    MakeGateway,
    Tokens,
    register,
    sign_in,
    through_gitlab,
    whoami,
)


async def refresh(gw: Any, tokens: Tokens, refresh_token: str | None = None) -> Any:
    return await gw.http.post(
        "/oauth/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": refresh_token or tokens.refresh_token,
            "client_id": tokens.client_id,
        },
    )


async def test_a_code_is_used_once_and_only_with_its_verifier(make_gateway: MakeGateway) -> None:
    gw = await make_gateway()
    client = await register(gw)
    back = await through_gitlab(gw, client["client_id"], "right-verifier-" + "x" * 40)
    code = parse_qs(urlsplit(back.headers["Location"]).query)["code"][0]
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "client_id": client["client_id"],
        "redirect_uri": REDIRECT,
    }
    wrong = await gw.http.post("/oauth/token", data={**form, "code_verifier": "wrong-verifier-" + "x" * 40})
    assert wrong.status == 400 and (await wrong.json())["error"] == "invalid_grant"
    again = await gw.http.post("/oauth/token", data={**form, "code_verifier": "right-verifier-" + "x" * 40})
    assert again.status == 400  # the failed attempt used the code up


async def test_an_unknown_client_is_told_to_register_again(make_gateway: MakeGateway) -> None:
    gw = await make_gateway()
    resp = await gw.http.post(
        "/oauth/token", data={"grant_type": "refresh_token", "refresh_token": "x", "client_id": "gw-gone"}
    )
    assert resp.status == 401
    assert (await resp.json())["error"] == "invalid_client"


async def test_a_confidential_client_must_send_its_secret(make_gateway: MakeGateway) -> None:
    gw = await make_gateway()
    client = await register(gw, token_endpoint_auth_method="client_secret_basic")
    back = await through_gitlab(gw, client["client_id"], "v" * 43)
    code = parse_qs(urlsplit(back.headers["Location"]).query)["code"][0]
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "code_verifier": "v" * 43,
        "redirect_uri": REDIRECT,
    }
    bare = await gw.http.post("/oauth/token", data={**form, "client_id": client["client_id"]})
    assert bare.status == 401 and (await bare.json())["error"] == "invalid_client"
    basic = base64.b64encode(f"{client['client_id']}:{client['client_secret']}".encode()).decode()
    ok = await gw.http.post("/oauth/token", data=form, headers={"Authorization": f"Basic {basic}"})
    assert ok.status == 200, await ok.text()


async def test_refresh_tokens_rotate_and_the_previous_one_lasts_until_its_successor_is_used(
    make_gateway: MakeGateway,
) -> None:
    gw = await make_gateway()
    first = await sign_in(gw)
    resp = await refresh(gw, first)
    assert resp.status == 200, await resp.text()
    second = (await resp.json())["refresh_token"]
    assert second != first.refresh_token
    # The answer was lost, say: the same token refreshes again, replacing the unused successor.
    again = await refresh(gw, first)
    assert again.status == 200
    third = await again.json()
    assert (await refresh(gw, first, second)).status == 400  # replaced before its first use
    used = await refresh(gw, first, third["refresh_token"])
    assert used.status == 200
    stale = await refresh(gw, first)
    assert stale.status == 400 and (await stale.json())["error"] == "invalid_grant"
    assert (await whoami(gw, (await used.json())["access_token"])).status == 200


async def test_revoking_a_refresh_token_ends_the_sign_in_here_and_at_gitlab(
    make_gateway: MakeGateway,
) -> None:
    gw = await make_gateway()
    tokens = await sign_in(gw)
    assert (await whoami(gw, tokens.access_token)).status == 200
    resp = await gw.http.post(
        "/oauth/revoke", data={"token": tokens.refresh_token, "client_id": tokens.client_id}
    )
    assert resp.status == 200
    denied = await whoami(gw, tokens.access_token)
    assert denied.status == 401
    assert 'error="invalid_token"' in denied.headers["WWW-Authenticate"]
    assert len(gw.gitlab.revoked) == 2  # GitLab's refresh and access tokens
    assert (await refresh(gw, tokens)).status == 400


async def test_revoking_an_access_token_ends_only_it(make_gateway: MakeGateway) -> None:
    gw = await make_gateway()
    tokens = await sign_in(gw)
    resp = await gw.http.post(
        "/oauth/revoke", data={"token": tokens.access_token, "client_id": tokens.client_id}
    )
    assert resp.status == 200
    assert (await whoami(gw, tokens.access_token)).status == 401
    assert (await refresh(gw, tokens)).status == 200


async def test_the_read_scope_serves_only_read_only_tools(make_gateway: MakeGateway) -> None:
    gw = await make_gateway()
    reader = await sign_in(gw, scope="mcp:read")
    assert reader.scope == "mcp:read"
    gw.mcp.headers = {"Authorization": f"Bearer {reader.access_token}"}
    await gw.mcp.initialize()
    listed = await gw.mcp.rpc("tools/list")
    names = {tool["name"] for tool in listed["result"]["tools"]}
    assert "whoami" in names and "write" not in names
    writer = await sign_in(gw)
    gw.mcp.headers = {"Authorization": f"Bearer {writer.access_token}"}
    await gw.mcp.initialize()
    assert "write" in {tool["name"] for tool in (await gw.mcp.rpc("tools/list"))["result"]["tools"]}


async def test_a_session_stays_its_signers_own(make_gateway: MakeGateway) -> None:
    gw = await make_gateway()
    alice = await sign_in(gw)
    gw.mcp.headers = {"Authorization": f"Bearer {alice.access_token}"}
    await gw.mcp.initialize()
    other = await sign_in(gw)
    gw.mcp.headers = {"Authorization": f"Bearer {other.access_token}"}
    resp = await gw.mcp.post({"jsonrpc": "2.0", "id": 9, "method": "tools/list"})
    assert resp.status == 404  # another grant's session


@pytest.mark.parametrize("broker_backend", ["sqlite", "postgresql"], indirect=True)
async def test_an_expired_gitlab_token_is_refreshed_once_for_many_calls(
    make_gateway: MakeGateway, broker_database_at_head: str | None
) -> None:
    gw = await make_gateway(broker_database_at_head)
    tokens = await sign_in(gw)
    assert (await refresh(gw, tokens)).status == 200  # the gateway's own refresh: GitLab is not asked
    assert gw.gitlab.refreshes == 0
    gw.mcp.app[SIGN_IN].grants.forget()
    await _expire_gitlab_token(gw)
    answers = await asyncio.gather(*(whoami(gw, tokens.access_token) for _ in range(16)))
    assert [a.status for a in answers] == [200] * 16
    assert gw.gitlab.refreshes == 1
    fresh = {str(getattr(gw.probe.contexts[i].call.caller.credential, "token", "")) for i in range(-16, 0)}
    assert len(fresh) == 1 and gw.gitlab.access[fresh.pop()] == "alice"


async def _expire_gitlab_token(gw: Any) -> None:
    import sqlalchemy as sa

    from gateway.broker.schema import sign_in_grants

    store = gw.mcp.app[SIGN_IN].storage._store
    async with store.write() as q:
        await q.conn.execute(sa.update(sign_in_grants).values(gitlab_expires=0.0))


async def test_a_grant_revoked_at_gitlab_makes_the_client_sign_in_again(make_gateway: MakeGateway) -> None:
    gw = await make_gateway()
    tokens = await sign_in(gw)
    gw.gitlab.revoke_user("alice")
    gw.mcp.app[SIGN_IN].grants.forget()
    await _expire_gitlab_token(gw)
    resp = await whoami(gw, tokens.access_token)
    assert resp.status == 401
    assert 'error="invalid_token"' in resp.headers["WWW-Authenticate"]
    assert (await refresh(gw, tokens)).status == 400  # the whole sign-in ended


async def test_two_replicas_refresh_an_expired_gitlab_token_once(
    make_gateway: MakeGateway, postgres_url_at_head: str
) -> None:
    one = await make_gateway(postgres_url_at_head)
    two = await make_gateway(postgres_url_at_head, gitlab=one.gitlab)
    tokens = await sign_in(one)
    await _expire_gitlab_token(one)
    answers = await asyncio.gather(*(whoami(gw, tokens.access_token) for gw in (one, two) for _ in range(16)))
    assert [a.status for a in answers] == [200] * 32
    assert one.gitlab.refreshes == 1
    counted = [
        gw.mcp.app[METRICS].sign_in_events.labels(event="gitlab_refreshed")._value.get() for gw in (one, two)
    ]
    assert sorted(counted) == [0, 1]


async def test_expired_rows_are_pruned(make_gateway: MakeGateway) -> None:
    import time

    import sqlalchemy as sa

    from gateway.signin.storage import SignInStorage

    gw = await make_gateway()
    await sign_in(gw)
    store = gw.mcp.app[SIGN_IN].storage._store
    await SignInStorage(store, lambda: time.time() + 31 * 86400).prune()
    async with store.connection() as conn:
        for table in ("sign_in_grants", "sign_in_access_tokens", "sign_in_refresh_tokens", "sign_in_codes"):
            assert (await conn.execute(sa.text(f"SELECT count(*) FROM {table}"))).scalar() == 0


async def test_sign_out_everywhere_ends_every_sign_in_on_every_replica(
    make_gateway: MakeGateway, postgres_url_at_head: str
) -> None:
    import time

    one = await make_gateway(postgres_url_at_head)
    two = await make_gateway(postgres_url_at_head, gitlab=one.gitlab)
    laptop, agent = await sign_in(one), await sign_in(one)
    assert (await whoami(two, agent.access_token)).status == 200  # replica two has it cached now
    resp = await one.http.post("/oauth/sign-out", headers={"Authorization": f"Bearer {laptop.access_token}"})
    assert resp.status == 200 and await resp.json() == {"signed_out": 2}
    assert len(one.gitlab.revoked) == 4  # both sign-ins' GitLab tokens
    assert (await whoami(one, agent.access_token)).status == 401
    # Replica two trusts what it looked up for at most a second (grants.CACHE_SECONDS).
    two.mcp.app[SIGN_IN].grants._monotonic = lambda: time.monotonic() + 1.01
    assert (await whoami(two, agent.access_token)).status == 401
    assert (await refresh(two, agent)).status == 400
    again = await one.http.post("/oauth/sign-out", headers={"Authorization": f"Bearer {laptop.access_token}"})
    assert again.status == 401


async def test_browser_clients_may_call_the_oauth_endpoints_cross_origin(make_gateway: MakeGateway) -> None:
    gw = await make_gateway()
    page = {"Origin": "http://localhost:6274"}  # a browser-based client's own page
    for path in (
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-authorization-server",
        "/oauth/register",
        "/oauth/token",
        "/oauth/revoke",
    ):
        asked = await gw.http.options(
            path,
            headers={
                **page,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type",
            },
        )
        assert asked.status == 204, path
        assert asked.headers["Access-Control-Allow-Origin"] == "*"
        assert "POST" in asked.headers["Access-Control-Allow-Methods"]
        assert "Access-Control-Allow-Credentials" not in asked.headers
    registered = await gw.http.post(
        "/oauth/register",
        json={"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"},
        headers=page,
    )
    assert registered.status == 201 and registered.headers["Access-Control-Allow-Origin"] == "*"
    refused = await gw.http.post(
        "/oauth/token",
        data={"grant_type": "refresh_token", "refresh_token": "x", "client_id": "gw-gone"},
        headers=page,
    )
    assert refused.status == 401 and refused.headers["Access-Control-Allow-Origin"] == "*"
    # The consent page and the account page use cookies: same origin only.
    for path in ("/oauth/authorize", "/oauth/account"):
        assert "Access-Control-Allow-Origin" not in (await gw.http.get(path, headers=page)).headers
        assert (await gw.http.options(path, headers=page)).status == 405
