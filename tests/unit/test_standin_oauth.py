"""The stand-in serves GitLab's OAuth provider with GitLab's rules (https://docs.gitlab.com/api/oauth2/):
authorization code with PKCE, single-use codes, rotating refresh tokens, ``invalid_grant`` on reuse,
and API requests made with an OAuth token acting as its user (401 ``invalid_token`` once expired or
revoked, 403 ``insufficient_scope`` for a ``read_api`` token's writes)."""

from __future__ import annotations

import base64
import hashlib
from functools import cache
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from aiohttp.test_utils import TestClient

from tests.conftest import GITLAB_SCHEMA
from tests.standin import dataset as ds
from tests.standin.graphql_api import GraphQLEndpoint, load_schema
from tests.standin.oauth import INVALID_GRANT, TOKEN_EXPIRED, TOKEN_REVOKED, redirect_matches
from tests.standin.server import create_app

CALLBACK = "https://mcp.example.com/oauth/gitlab/callback"
SECRET = "gloas-secret"
VERIFIER = "v" * 64
CHALLENGE = base64.urlsafe_b64encode(hashlib.sha256(VERIFIER.encode()).digest()).rstrip(b"=").decode()
P = quote(ds.PROJECT_PATH, safe="")


@cache
def endpoint() -> GraphQLEndpoint:
    return GraphQLEndpoint(load_schema(GITLAB_SCHEMA))


async def standin(aiohttp_client: Any, scopes: tuple[str, ...] = ("api",)) -> TestClient[Any, Any]:
    client: TestClient[Any, Any] = await aiohttp_client(create_app(endpoint()))
    app = {"uid": "gateway-app", "secret": SECRET, "redirect_uri": CALLBACK, "scopes": list(scopes)}
    assert (await client.post("/_standin/oauth/applications", json=app)).status == 201
    dana = {"id": 77, "username": "dana", "name": "Dana", "groups": ["grp", "team/ops"]}
    assert (await client.post("/_standin/oauth/users", json=dana)).status == 201
    assert (await client.post("/_standin/oauth/current_user", json={"username": "dana"})).status == 200
    return client


async def authorize(client: TestClient[Any, Any], **extra: str) -> str:
    params = {
        "client_id": "gateway-app",
        "redirect_uri": CALLBACK,
        "response_type": "code",
        "state": "s1",
        "scope": "api",
        "code_challenge": CHALLENGE,
        "code_challenge_method": "S256",
        **extra,
    }
    answer = await client.get("/oauth/authorize", params=params, allow_redirects=False)
    assert answer.status == 302, await answer.text()
    location = answer.headers["Location"]
    assert location.startswith(CALLBACK + "?")
    query = parse_qs(urlsplit(location).query)
    assert query["state"] == ["s1"]
    return query["code"][0]


async def token(client: TestClient[Any, Any], **form: str) -> tuple[int, dict[str, Any]]:
    answer = await client.post(
        "/oauth/token", data={"client_id": "gateway-app", "client_secret": SECRET, **form}
    )
    return answer.status, await answer.json()


async def sign_in(client: TestClient[Any, Any]) -> dict[str, Any]:
    code = await authorize(client)
    status, body = await token(
        client, grant_type="authorization_code", code=code, redirect_uri=CALLBACK, code_verifier=VERIFIER
    )
    assert status == 200, body
    return body


def bearer(tokens: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {tokens['access_token']}"}


async def test_a_code_becomes_tokens_once_and_the_token_acts_as_its_user(aiohttp_client: Any) -> None:
    client = await standin(aiohttp_client)
    code = await authorize(client)
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": CALLBACK,
        "code_verifier": VERIFIER,
    }
    status, tokens = await token(client, **form)
    assert status == 200
    assert set(tokens) == {"access_token", "token_type", "expires_in", "refresh_token", "scope", "created_at"}
    assert (tokens["token_type"], tokens["expires_in"], tokens["scope"]) == ("Bearer", 7200, "api")
    assert await token(client, **form) == (
        400,
        {"error": "invalid_grant", "error_description": INVALID_GRANT},
    )

    me = await client.get("/api/v4/user", headers=bearer(tokens))
    assert me.status == 200 and (await me.json())["username"] == "dana"
    groups = await client.get("/api/v4/groups", params={"min_access_level": "10"}, headers=bearer(tokens))
    assert [g["full_path"] for g in await groups.json()] == ["grp", "team/ops"]
    info = await (await client.get("/oauth/token/info", headers=bearer(tokens))).json()
    assert info["resource_owner_id"] == 77 and info["scope"] == ["api"]
    assert info["application"] == {"uid": "gateway-app"}

    log = (await (await client.get("/_standin/requests")).json())["requests"]
    api = [r for r in log if r["path"].startswith("/api/")]
    assert [(r["user"], r["oauth"]) for r in api] == [("dana", True), ("dana", True)]
    counts = await (await client.get("/_standin/oauth/counts")).json()
    assert counts["token_requests"] == 2 and counts["invalid_grants"] == 1


async def test_pkce_redirect_uri_and_client_secret_are_each_checked(aiohttp_client: Any) -> None:
    client = await standin(aiohttp_client)
    ok = {"grant_type": "authorization_code", "redirect_uri": CALLBACK, "code_verifier": VERIFIER}
    status, body = await token(client, **{**ok, "code": await authorize(client), "code_verifier": "w" * 64})
    assert (status, body["error"]) == (400, "invalid_grant")
    status, body = await token(
        client, **{**ok, "code": await authorize(client), "redirect_uri": CALLBACK + "/x"}
    )
    assert (status, body["error"]) == (400, "invalid_grant")
    status, body = await token(client, **{**ok, "code": await authorize(client), "client_secret": "wrong"})
    assert (status, body["error"]) == (401, "invalid_client")
    # client_secret_basic works as well as client_secret_post
    basic = base64.b64encode(f"gateway-app:{SECRET}".encode()).decode()
    answer = await client.post(
        "/oauth/token",
        data={**ok, "code": await authorize(client)},
        headers={"Authorization": f"Basic {basic}"},
    )
    assert answer.status == 200

    base = {"client_id": "gateway-app", "response_type": "code", "state": "s", "code_challenge": CHALLENGE}
    wrong_uri = await client.get(
        "/oauth/authorize", params={**base, "redirect_uri": "https://evil.example/cb"}
    )
    assert wrong_uri.status == 400 and "redirect URI" in await wrong_uri.text()
    plain = await client.get(
        "/oauth/authorize",
        params={**base, "redirect_uri": CALLBACK, "code_challenge_method": "plain"},
        allow_redirects=False,
    )
    assert parse_qs(urlsplit(plain.headers["Location"]).query)["error"] == ["invalid_request"]
    await client.post("/_standin/oauth/current_user", json={"username": None})
    signed_out = await client.get(
        "/oauth/authorize",
        params={**base, "redirect_uri": CALLBACK, "code_challenge_method": "S256"},
        allow_redirects=False,
    )
    assert signed_out.status == 302 and signed_out.headers["Location"] == "/users/sign_in"


async def test_a_refresh_rotates_both_tokens_and_the_old_pair_stops_working(aiohttp_client: Any) -> None:
    client = await standin(aiohttp_client)
    first = await sign_in(client)
    status, second = await token(client, grant_type="refresh_token", refresh_token=first["refresh_token"])
    assert status == 200
    assert second["access_token"] != first["access_token"]
    assert second["refresh_token"] != first["refresh_token"]
    again = await token(client, grant_type="refresh_token", refresh_token=first["refresh_token"])
    assert again == (400, {"error": "invalid_grant", "error_description": INVALID_GRANT})
    old = await client.get("/api/v4/user", headers=bearer(first))
    assert old.status == 401 and (await old.json())["error_description"] == TOKEN_REVOKED
    assert (await client.get("/api/v4/user", headers=bearer(second))).status == 200
    counts = await (await client.get("/_standin/oauth/counts")).json()
    assert counts["refreshes"] == {"dana": 1} and counts["invalid_grants"] == 1
    issued = (await (await client.get("/_standin/oauth/tokens")).json())["tokens"]
    assert [(t["access_token"], t["revoked"]) for t in issued] == [
        (first["access_token"], True),
        (second["access_token"], False),
    ]


async def test_expired_and_revoked_tokens_get_gitlabs_401(aiohttp_client: Any) -> None:
    client = await standin(aiohttp_client)
    await client.post("/_standin/oauth/settings", json={"access_token_seconds": 60})
    tokens = await sign_in(client)
    assert tokens["expires_in"] == 60
    assert (await client.post("/_standin/oauth/expire", json={"username": "dana"})).status == 200
    expired = await client.get(f"/api/v4/projects/{P}", headers=bearer(tokens))
    assert expired.status == 401
    assert await expired.json() == {"error": "invalid_token", "error_description": TOKEN_EXPIRED}
    assert 'error="invalid_token"' in expired.headers["WWW-Authenticate"]
    graphql = await client.post(
        "/api/graphql", json={"query": "{ currentUser { username } }"}, headers=bearer(tokens)
    )
    assert graphql.status == 401
    log = (await (await client.get("/_standin/requests")).json())["requests"]
    assert [r["user"] for r in log if r["path"].startswith("/api/")] == [None, None]

    # An expired token still refreshes; revoking the user's grant ends the refresh token too.
    status, fresh = await token(client, grant_type="refresh_token", refresh_token=tokens["refresh_token"])
    assert status == 200
    assert (await client.post("/_standin/oauth/revoke", json={"username": "dana"})).status == 200
    revoked = await client.get("/api/v4/user", headers=bearer(fresh))
    assert await revoked.json() == {"error": "invalid_token", "error_description": TOKEN_REVOKED}
    status, body = await token(client, grant_type="refresh_token", refresh_token=fresh["refresh_token"])
    assert (status, body["error"]) == (400, "invalid_grant")
    info = await client.get("/oauth/token/info", headers=bearer(fresh))
    assert info.status == 401


async def test_a_read_api_token_reads_but_may_not_write(aiohttp_client: Any) -> None:
    client = await standin(aiohttp_client, scopes=("read_api",))
    await client.post(
        "/_standin/oauth/current_user", json={"username": "alice"}
    )  # a Developer of the project
    code = await authorize(client, scope="read_api")
    status, tokens = await token(
        client, grant_type="authorization_code", code=code, redirect_uri=CALLBACK, code_verifier=VERIFIER
    )
    assert status == 200 and tokens["scope"] == "read_api"
    assert (await client.get(f"/api/v4/projects/{P}", headers=bearer(tokens))).status == 200
    write = await client.post(
        f"/api/v4/projects/{P}/pipeline", params={"ref": "main"}, headers=bearer(tokens)
    )
    assert write.status == 403
    assert await write.json() == {
        "error": "insufficient_scope",
        "error_description": "The request requires higher privileges than provided by the access token.",
        "scope": "api",
    }
    mutation = 'mutation { pipelineCreate(input: {projectPath: "grp/sub/proj", ref: "main"}) { errors } }'
    refused = await client.post("/api/graphql", json={"query": mutation}, headers=bearer(tokens))
    assert refused.status == 403 and (await refused.json())["error"] == "insufficient_scope"
    query = await client.post(
        "/api/graphql", json={"query": "{ currentUser { username } }"}, headers=bearer(tokens)
    )
    assert query.status == 200 and (await query.json())["data"]["currentUser"]["username"] == "alice"
    # an unknown scope is refused back at the redirect URI
    params = {"client_id": "gateway-app", "redirect_uri": CALLBACK, "response_type": "code", "scope": "api"}
    answer = await client.get("/oauth/authorize", params=params, allow_redirects=False)
    assert parse_qs(urlsplit(answer.headers["Location"]).query)["error"] == ["invalid_scope"]


async def test_the_oauth_state_outlives_a_reset_and_private_tokens_are_unchanged(aiohttp_client: Any) -> None:
    client = await standin(aiohttp_client)
    tokens = await sign_in(client)
    assert (await client.post("/_standin/reset")).status == 200
    me = await client.get("/api/v4/user", headers=bearer(tokens))
    assert me.status == 200 and (await me.json())["username"] == "dana"
    pat = await client.get("/api/v4/user", headers={"PRIVATE-TOKEN": ds.ALICE_TOKEN})
    assert (await pat.json())["username"] == "alice"
    # An OAuth token goes in Authorization only; as PRIVATE-TOKEN it is unknown.
    as_pat = await client.get("/api/v4/user", headers={"PRIVATE-TOKEN": tokens["access_token"]})
    assert as_pat.status == 401 and await as_pat.json() == {"message": "401 Unauthorized"}
    unknown = await client.get("/api/v4/user", headers={"Authorization": "Bearer nope"})
    assert unknown.status == 401 and await unknown.json() == {"message": "401 Unauthorized"}
    revoke = await client.post(
        "/oauth/revoke",
        data={"token": tokens["access_token"], "client_id": "gateway-app", "client_secret": SECRET},
    )
    assert revoke.status == 200 and await revoke.json() == {}
    assert (await client.get("/api/v4/user", headers=bearer(tokens))).status == 401
    assert (await client.delete("/_standin/oauth")).status == 200
    assert (await client.get("/_standin/oauth/counts")).status == 200


def test_loopback_redirects_may_use_any_port_and_others_must_match_exactly() -> None:
    assert redirect_matches("http://127.0.0.1/cb", "http://127.0.0.1:5123/cb")
    assert redirect_matches("http://[::1]:80/cb", "http://[::1]:6000/cb")
    assert not redirect_matches("http://127.0.0.1/cb", "http://127.0.0.1:5123/other")
    assert not redirect_matches(
        "http://localhost/cb", "http://localhost:5123/cb"
    )  # Doorkeeper: IP literals only
    assert not redirect_matches("https://mcp.example.com/cb", "https://mcp.example.com:8443/cb")
