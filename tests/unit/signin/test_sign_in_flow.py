"""Sign-in through GitLab, as an MCP client and a person's browser walk it: discovery, registration,
consent, GitLab, the gateway's tokens, and tool calls as the signed-in GitLab user."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import unquote_plus

import pytest
import sqlalchemy as sa

from gateway.server.services import SERVICES
from tests.unit.signin.conftest import (
    PUBLIC,
    REDIRECT,
    FakeGitLab,
    MakeGateway,
    consent_page,
    form_fields,
    register,
    sign_in,
    through_gitlab,
    whoami,
)

CHALLENGE = (
    f'Bearer resource_metadata="{PUBLIC}/.well-known/oauth-protected-resource/mcp", '
    'scope="mcp:read mcp:write"'
)


async def test_off_by_default_the_gateway_serves_no_sign_in(
    aiohttp_client: Any, make_settings: Any, at_head: Any
) -> None:
    from gateway.server.app import create_app

    app = create_app(at_head(make_settings()))
    client = await aiohttp_client(app)
    for path in (
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-authorization-server",
        "/oauth/authorize",
    ):
        assert (await client.get(path)).status == 404
    assert (await client.post("/oauth/token")).status == 404


async def test_discovery_documents(make_gateway: MakeGateway) -> None:
    gw = await make_gateway()
    resource = await (await gw.http.get("/.well-known/oauth-protected-resource/mcp")).json()
    assert resource["resource"] == f"{PUBLIC}/mcp"
    assert resource["authorization_servers"] == [PUBLIC]
    assert resource["scopes_supported"] == ["mcp:read", "mcp:write"]
    server = await (await gw.http.get("/.well-known/oauth-authorization-server")).json()
    assert server["issuer"] == PUBLIC
    assert server["code_challenge_methods_supported"] == ["S256"]
    assert server["authorization_response_iss_parameter_supported"] is True
    assert server["client_id_metadata_document_supported"] is True
    assert server["registration_endpoint"] == f"{PUBLIC}/oauth/register"
    assert server["token_endpoint"] == f"{PUBLIC}/oauth/token"
    assert server["revocation_endpoint"] == f"{PUBLIC}/oauth/revoke"


async def test_without_a_gateway_token_mcp_answers_401_naming_the_metadata(make_gateway: MakeGateway) -> None:
    gw = await make_gateway()
    resp = await gw.mcp.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, session=False)
    assert resp.status == 401
    assert resp.headers["WWW-Authenticate"] == CHALLENGE
    for headers in (
        {"PRIVATE-TOKEN": "glpat-aaaaaaaaaaaaaaaaaaaa"},
        {"Authorization": "Bearer glpat-aaaaaaaaaaaaaaaaaaaa"},
        {"Authorization": "Bearer gwat_not-one-we-issued"},
        {"X-Agent-Id": "pm"},
    ):
        resp = await gw.mcp.post(
            {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers, session=False
        )
        assert resp.status == 401, headers
        assert 'resource_metadata="' in resp.headers["WWW-Authenticate"]
    assert gw.gitlab.api_requests == []  # nothing reached GitLab


@pytest.mark.parametrize("broker_backend", ["sqlite", "postgresql"], indirect=True)
async def test_a_signed_in_person_calls_tools_as_their_gitlab_user(
    make_gateway: MakeGateway, broker_database_at_head: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    gw = await make_gateway(broker_database_at_head, sign_in={"roles": {"team/backend": ["dev"]}})
    tokens = await sign_in(gw, role="dev")
    assert tokens.scope == "mcp:read mcp:write"
    resp = await whoami(gw, tokens.access_token)
    assert resp.status == 200, await resp.text()
    caller = gw.probe.contexts[-1].call.caller
    assert caller.agent_id == "dev" and caller.credential is not None
    assert caller.gitlab_user == "alice"
    assert caller.rate_limit_key == "gitlab-user:7"
    assert gw.gitlab.access[caller.credential.token] == "alice"
    assert caller.credential.headers() == {"Authorization": f"Bearer {caller.credential.token}"}
    # The database holds no GitLab token, nor any of the gateway's, in the clear.
    secrets = [caller.credential.token, *gw.gitlab.refresh, tokens.access_token, tokens.refresh_token]
    store = gw.mcp.app[SERVICES].broker.store  # type: ignore[union-attr]
    async with store.connection() as conn:
        for table in ("sign_in_grants", "sign_in_access_tokens", "sign_in_refresh_tokens", "sign_in_clients"):
            rows = (await conn.execute(sa.text(f"SELECT * FROM {table}"))).all()
            text = repr(rows)
            assert rows and not any(secret in text for secret in secrets), table
    assert not any(secret in caplog.text for secret in secrets)  # nor does any log line


async def test_the_role_must_be_one_the_operator_gave(
    make_gateway: MakeGateway, caplog: pytest.LogCaptureFixture
) -> None:
    gw = await make_gateway(sign_in={"roles": {"bob": ["pm"], "team": ["dev"]}})
    client = await register(gw)
    page = await consent_page(gw, client["client_id"], "v" * 43)
    text = await page.text()
    assert "<select name='role'>" in text and "Test client" in text and "127.0.0.1" in text
    gw.gitlab.current_user = "alice"  # alice is in team: dev, not pm
    to_gitlab = await gw.http.post(
        "/oauth/authorize",
        data={**form_fields(text), "decision": "allow", "role": "pm"},
        headers={"Origin": PUBLIC},
        allow_redirects=False,
    )
    code, state = gw.gitlab.approve(to_gitlab.headers["Location"])
    with caplog.at_level(logging.INFO, logger="gateway"):
        back = await gw.http.get(
            "/oauth/gitlab/callback", params={"code": code, "state": state}, allow_redirects=False
        )
    assert back.status == 302
    assert "error=access_denied" in back.headers["Location"]
    assert "the+role+pm+is+not+one" in back.headers["Location"]
    assert "GitLab user alice may not take the role pm" in caplog.text


async def test_people_outside_the_allow_list_are_refused(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(sign_in={"allowed_groups": ["team"]}, gitlab=FakeGitLab(current_user="bob"))
    client = await register(gw)
    back = await through_gitlab(gw, client["client_id"], "v" * 43)
    assert "error=access_denied" in back.headers["Location"] and "code=" not in back.headers["Location"]
    assert gw.gitlab.revoked  # and bob's fresh GitLab token is revoked at once


async def test_consent_refuses_a_post_from_another_site_or_browser(make_gateway: MakeGateway) -> None:
    gw = await make_gateway()
    client = await register(gw)
    page = await consent_page(gw, client["client_id"], "v" * 43)
    fields = {**form_fields(await page.text()), "decision": "allow"}
    assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]
    other = await gw.http.post(
        "/oauth/authorize", data=fields, headers={"Origin": "https://evil.example"}, allow_redirects=False
    )
    assert other.status == 403
    forged = await gw.http.post(
        "/oauth/authorize",
        data={**fields, "csrf": "0" * 64},
        headers={"Origin": PUBLIC},
        allow_redirects=False,
    )
    assert forged.status == 403
    gw.http.session.cookie_jar.clear()  # another browser
    elsewhere = await gw.http.post(
        "/oauth/authorize", data=fields, headers={"Origin": PUBLIC}, allow_redirects=False
    )
    assert elsewhere.status == 400
    assert "another browser" in await elsewhere.text()


async def test_authorize_checks_client_redirect_and_pkce(make_gateway: MakeGateway) -> None:
    gw = await make_gateway()
    unknown = await consent_page(gw, "gw-nobody", "v" * 43)
    assert unknown.status == 401
    assert (await unknown.json())["error"] == "invalid_client"
    client = await register(gw)
    wrong = await consent_page(gw, client["client_id"], "v" * 43, redirect_uri="https://evil.example/cb")
    assert wrong.status == 400  # never redirected to an unregistered URI
    plain = await consent_page(gw, client["client_id"], "v" * 43, code_challenge_method="plain")
    assert plain.status == 302 and "error=invalid_request" in plain.headers["Location"]
    other = await consent_page(gw, client["client_id"], "v" * 43, resource="https://elsewhere.example/mcp")
    assert "error=invalid_target" in other.headers["Location"]


async def test_registration_accepts_only_safe_redirect_uris(make_gateway: MakeGateway) -> None:
    gw = await make_gateway()
    for uri in ("http://example.com/cb", "https://example.com/cb#frag", "javascript:alert(1)"):
        resp = await gw.http.post("/oauth/register", json={"redirect_uris": [uri]})
        assert resp.status == 400, uri
        assert (await resp.json())["error"] == "invalid_redirect_uri"
    for uri in ("https://app.example.com/cb", "http://localhost/cb", "com.example.app:/callback"):
        assert (await gw.http.post("/oauth/register", json={"redirect_uris": [uri]})).status == 201
    confidential = await register(gw, token_endpoint_auth_method="client_secret_post")
    assert confidential["client_secret"]


async def test_a_configured_client_signs_in_without_registering(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(sign_in={"clients": [{"client_id": "my-agent", "redirect_uris": [REDIRECT]}]})
    tokens = await sign_in(gw, client={"client_id": "my-agent"})
    assert (await whoami(gw, tokens.access_token)).status == 200


async def test_static_client_tokens_keep_working_beside_sign_in(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(client_tokens=[{"token": "pm-secret-0123456789", "agent_id": "pm"}])
    assert (await whoami(gw, "pm-secret-0123456789")).status == 200
    assert gw.probe.contexts[-1].call.caller.agent_id == "pm"
    assert (await whoami(gw, "pm-secret-wrong-0123")).status == 401


async def test_a_client_id_metadata_document_signs_in(
    make_gateway: MakeGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway.signin.client_metadata import ClientMetadata, ClientMetadataFetcher

    url = "https://client.example.com/oauth/metadata.json"

    async def fetch(self: ClientMetadataFetcher, client_id: str) -> ClientMetadata:
        assert client_id == url
        return ClientMetadata(
            client_id=url,
            client_name="Documented client",
            redirect_uris=(REDIRECT,),
            client_uri=None,
            logo_uri=None,
            token_endpoint_auth_method="none",
        )

    monkeypatch.setattr(ClientMetadataFetcher, "fetch", fetch)
    gw = await make_gateway()
    tokens = await sign_in(gw, client={"client_id": url})
    assert (await whoami(gw, tokens.access_token)).status == 200


async def test_rate_limits_count_per_gitlab_user(make_gateway: MakeGateway) -> None:
    from tests.unit.mcp.helpers import response_message

    gw = await make_gateway(limits={"calls_per_second": 0.001, "burst": 1})
    alice = await sign_in(gw)
    assert "result" in await response_message(await whoami(gw, alice.access_token))
    second = await response_message(await whoami(gw, alice.access_token))
    assert second["result"]["isError"] is True
    assert "rate" in str(second["result"]["structuredContent"]).lower()
    gw.gitlab.current_user = "bob"
    bob = await sign_in(gw)
    assert second["result"] != (await response_message(await whoami(gw, bob.access_token)))["result"]
    assert gw.probe.contexts[-1].call.caller.rate_limit_key == "gitlab-user:8"


async def test_a_wrong_gitlab_client_secret_names_the_settings_to_check(
    make_gateway: MakeGateway, caplog: pytest.LogCaptureFixture
) -> None:
    gw = await make_gateway(gitlab=FakeGitLab(client_secret="the-secret-gitlab-really-holds"))
    client = await register(gw)
    with caplog.at_level(logging.WARNING, logger="gateway"):
        back = await through_gitlab(gw, client["client_id"], "v" * 43)
    location = unquote_plus(back.headers["Location"])
    assert "error=server_error" in location and "code=" not in location
    assert "GitLab application is misconfigured" in location and "tell the gateway's operator" in location
    assert "try again" not in location
    assert "GATEWAY_SIGN_IN__GITLAB_CLIENT_SECRET" in caplog.text and "invalid_client" in caplog.text
