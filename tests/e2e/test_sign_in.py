"""Signing in to /mcp through GitLab (OAuth 2.1) with the official SDK client, from the wheel.

One gateway with sign-in on serves the module; the GitLab stand-in plays GitLab's OAuth provider
(https://docs.gitlab.com/api/oauth2/) and approves as its current user, alice. The SDK's
``OAuthClientProvider`` knows only ``<public url>/mcp``; :class:`tests.e2e.sign_in.HeadlessBrowser`
answers the consent page for it. Each registration method signs in on both MCP eras
(https://modelcontextprotocol.io/specification/2025-11-25/basic/authorization), tools run as the
signed-in GitLab user (the stand-in's request log names the user and the OAuth token on every
request), foreign credentials are refused before GitLab hears of them, GitLab's token expiry is
refreshed behind the client's back, and revocation (at GitLab, or RFC 7009 at the gateway) ends
access.

The tests wait for the gateway's ``[sign_in]`` settings (and the metadata document ones for the
loopback document server): until the gateway has them they are skipped, not expected to fail.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.shared.auth import OAuthClientInformationFull

from tests.e2e.every_tool import HAPPY
from tests.e2e.harness import GatewayProcess, free_port, mcp_client
from tests.e2e.rpc import ACCEPT, PROTOCOL, initialize_request
from tests.e2e.sign_in import (
    REDIRECT_URI,
    DocumentServer,
    HeadlessBrowser,
    MemoryStorage,
    provider,
    signed_in_client,
)
from tests.local_http import TLS
from tests.standin import dataset as ds
from tests.standin.fixtures import Standin


def _sign_in_settings() -> set[str]:
    """The gateway's ``[sign_in]`` setting names (empty before sign-in exists): the capability probe."""
    try:
        from gateway.config.sign_in import SignInSettings  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return set()
    return set(SignInSettings.model_fields)


SETTINGS = _sign_in_settings()
#: Test-only: fetch Client ID Metadata Documents from loopback (production: public https only).
LOOPBACK_DOCUMENTS = "allow_loopback_client_metadata" in SETTINGS
needs_documents = pytest.mark.skipif(
    not LOOPBACK_DOCUMENTS, reason="the gateway has no sign_in.allow_loopback_client_metadata setting yet"
)
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not SETTINGS, reason="the gateway has no [sign_in] settings yet"),
]

ERAS = {"auto": "2026-07-28", "legacy": "2025-11-25"}
APP_ID, APP_SECRET = "gateway-e2e-app", "gloas-e2e-secret-0001"
PREREGISTERED = "e2e-preregistered-client"
KEY = base64.urlsafe_b64encode(bytes(range(32))).decode()


@dataclass
class SignInGateway:
    process: GatewayProcess
    standin: Standin
    documents: DocumentServer

    @property
    def public_url(self) -> str:
        return self.process.url

    @property
    def mcp_url(self) -> str:
        return self.process.mcp_url


def register_at_gitlab(standin: Standin, public_url: str, app_id: str = APP_ID) -> None:
    """The operator's GitLab application, and alice signed in to GitLab (kept across resets)."""
    control = standin.control
    control.oauth_application(app_id, APP_SECRET, f"{public_url}/oauth/gitlab/callback", scopes=["api"])
    control.oauth_user(ds.ALICE_ID, "alice", "Alice Developer", groups=[ds.GROUP_PATH])
    control.oauth_current_user("alice")


def sign_in_env(public_url: str, app_id: str = APP_ID, **extra: str) -> dict[str, str]:
    return {
        "GATEWAY_TOOLSETS": "all",
        "GATEWAY_SIGN_IN__ENABLED": "true",
        "GATEWAY_SIGN_IN__PUBLIC_URL": public_url,
        "GATEWAY_SIGN_IN__GITLAB_CLIENT_ID": app_id,
        "GATEWAY_SIGN_IN__GITLAB_CLIENT_SECRET": APP_SECRET,
        "GATEWAY_SIGN_IN__ENCRYPTION_KEY": KEY,
        # A loopback client registered by the operator: any port (RFC 8252 §7.3).
        "GATEWAY_SIGN_IN__CLIENTS": json.dumps(
            [{"client_id": PREREGISTERED, "redirect_uris": ["http://127.0.0.1/callback"], "name": "E2E CLI"}]
        ),
        **extra,
    }


@pytest.fixture(scope="module")
def gateway(standin: Standin, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SignInGateway]:
    folder = tmp_path_factory.mktemp("sign-in")
    documents = DocumentServer(folder, ["http://127.0.0.1/callback"]).start()
    port = free_port()
    public_url = f"http://127.0.0.1:{port}"
    register_at_gitlab(standin, public_url)
    extra = {"SSL_CERT_FILE": str(documents.cert)}
    if LOOPBACK_DOCUMENTS:
        extra["GATEWAY_SIGN_IN__ALLOW_LOOPBACK_CLIENT_METADATA"] = "true"
    env = {**standin.env(token=None), **sign_in_env(public_url, **extra)}
    proc = GatewayProcess(env=env, state_dir=folder / "state", port=port).start()
    try:
        yield SignInGateway(proc, standin, documents)
    finally:
        proc.stop()
        documents.stop()


def api_requests(standin: Standin, since: int) -> list[dict[str, Any]]:
    return [r for r in standin.control.requests(since) if r["path"].startswith("/api/")]


def last_seq(standin: Standin) -> int:
    log = standin.control.requests()
    return int(log[-1]["seq"]) if log else 0


def assert_as_alice(requests: list[dict[str, Any]], *, expired: bool = False) -> None:
    """Every GitLab API request acted as alice, with an OAuth token (never a personal one); with
    ``expired``, GitLab may also have refused the expired one (401, acting as nobody)."""
    assert requests
    wrong = [(r["method"], r["path"], r["status"], r["auth"], r["user"], r["oauth"]) for r in requests]
    assert all(
        r["oauth"] and (r["user"] == "alice" or (expired and r["status"] == 401 and r["user"] is None))
        for r in requests
    ), wrong


def test_discovery_and_the_challenge_name_the_gateway(gateway: SignInGateway) -> None:
    with httpx.Client(timeout=30, trust_env=False, verify=TLS) as http:
        refused = http.post(gateway.mcp_url, json=initialize_request("probe"), headers={"Accept": ACCEPT})
        prm = http.get(f"{gateway.public_url}/.well-known/oauth-protected-resource/mcp").json()
        asm = http.get(f"{gateway.public_url}/.well-known/oauth-authorization-server").json()
    assert refused.status_code == 401
    challenge = refused.headers["WWW-Authenticate"]
    assert f'resource_metadata="{gateway.public_url}/.well-known/oauth-protected-resource/mcp"' in challenge
    assert prm["resource"] == gateway.mcp_url and prm["authorization_servers"] == [gateway.public_url]
    assert asm["issuer"] == gateway.public_url
    assert asm["code_challenge_methods_supported"] == ["S256"]
    assert asm["authorization_response_iss_parameter_supported"] is True


@pytest.mark.parametrize("mode", sorted(ERAS))
async def test_dynamic_registration_signs_in_and_every_tool_runs_as_the_user(
    gateway: SignInGateway, fresh_standin: Standin, mode: str
) -> None:
    browser, storage = HeadlessBrowser(), MemoryStorage()
    seen: list[str] = []  # everything the client was sent back
    async with signed_in_client(gateway.mcp_url, provider(gateway.mcp_url, browser, storage), mode) as client:
        assert client.protocol_version == ERAS[mode]
        assert set(HAPPY) <= {t.name for t in (await client.list_tools()).tools}
        for name, arguments in HAPPY.items():
            result = await client.call_tool(name, arguments)
            assert not result.is_error, (name, result.content)
            seen.append(result.model_dump_json())
    assert len(browser.urls) == 1
    assert storage.client_info is not None and storage.client_info.client_id  # registered dynamically
    assert_as_alice(api_requests(fresh_standin, 0))
    assert fresh_standin.control.pipelines(created=True)[0]["user"] == "alice"
    # GitLab's tokens never leave the gateway: not in answers, the client's tokens, nor its log.
    assert storage.tokens is not None
    seen += [storage.tokens.model_dump_json(), gateway.process.log()]
    for issued in fresh_standin.control.oauth_tokens():
        for value in (issued["access_token"], issued["refresh_token"]):
            assert not any(value in text for text in seen)


@pytest.mark.parametrize("mode", sorted(ERAS))
async def test_a_preregistered_client_signs_in_on_any_loopback_port(
    gateway: SignInGateway, mode: str
) -> None:
    since = last_seq(gateway.standin)
    client_info = OAuthClientInformationFull(
        client_id=PREREGISTERED,
        redirect_uris=[REDIRECT_URI],
        token_endpoint_auth_method="none",
    )
    browser, storage = HeadlessBrowser(), MemoryStorage(client_info)
    async with signed_in_client(gateway.mcp_url, provider(gateway.mcp_url, browser, storage), mode) as client:
        result = await client.call_tool("get_pipeline", HAPPY["get_pipeline"])
        assert not result.is_error, result.content
    assert len(browser.urls) == 1 and f"client_id={PREREGISTERED}" in browser.urls[0]
    assert storage.client_info is not None and storage.client_info.client_id == PREREGISTERED
    assert_as_alice(api_requests(gateway.standin, since))


@needs_documents
@pytest.mark.parametrize("mode", sorted(ERAS))
async def test_a_client_metadata_document_signs_in(gateway: SignInGateway, mode: str) -> None:
    since = last_seq(gateway.standin)
    browser, storage = HeadlessBrowser(), MemoryStorage()
    auth = provider(gateway.mcp_url, browser, storage, client_metadata_url=gateway.documents.url)
    async with signed_in_client(gateway.mcp_url, auth, mode) as client:
        result = await client.call_tool("get_pipeline", HAPPY["get_pipeline"])
        assert not result.is_error, result.content
    assert storage.client_info is not None and storage.client_info.client_id == gateway.documents.url
    assert gateway.documents.fetches >= 1
    assert_as_alice(api_requests(gateway.standin, since))


async def test_credentials_the_gateway_did_not_issue_are_refused_before_gitlab(
    gateway: SignInGateway,
) -> None:
    standin = gateway.standin
    # A GitLab OAuth token of the gateway's own application, straight from GitLab.
    gitlab_token = _gitlab_oauth_token(standin, gateway.public_url)
    refused_headers = [
        {"PRIVATE-TOKEN": ds.ALICE_TOKEN},
        {"Authorization": f"Bearer {ds.ALICE_TOKEN}"},
        {"Authorization": f"Bearer {gitlab_token}"},
    ]
    browser, storage = HeadlessBrowser(), MemoryStorage()
    async with signed_in_client(gateway.mcp_url, provider(gateway.mcp_url, browser, storage)) as client:
        await client.call_tool("get_pipeline", HAPPY["get_pipeline"])
    assert storage.tokens is not None
    # Headers are ignored once sign-in is on: a PRIVATE-TOKEN beside the gateway's own token too.
    refused_headers.append(
        {"Authorization": f"Bearer {storage.tokens.access_token}", "PRIVATE-TOKEN": ds.BOB_TOKEN}
    )
    before = standin.control.request_count()
    with httpx.Client(timeout=30, trust_env=False, verify=TLS) as http:
        for headers in refused_headers:
            answer = http.post(
                gateway.mcp_url,
                json=initialize_request("intruder", PROTOCOL),
                headers={"Accept": ACCEPT, **headers},
            )
            assert answer.status_code == 401, (list(headers), answer.status_code, answer.text)
            assert "resource_metadata=" in answer.headers.get("WWW-Authenticate", "")
    assert standin.control.request_count() == before  # GitLab never heard of them


def _gitlab_oauth_token(standin: Standin, public_url: str) -> str:
    """Sign in at the stand-in as the gateway's GitLab application would (no PKCE needed)."""
    callback = f"{public_url}/oauth/gitlab/callback"
    params = {"client_id": APP_ID, "redirect_uri": callback, "response_type": "code", "scope": "api"}
    with httpx.Client(timeout=30, trust_env=False, verify=TLS) as http:
        answer = http.get(f"{standin.url}/oauth/authorize", params=params)
        code = httpx.URL(answer.headers["Location"]).params["code"]
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": callback}
        tokens = http.post(
            f"{standin.url}/oauth/token", data={**form, "client_id": APP_ID, "client_secret": APP_SECRET}
        )
    return str(tokens.json()["access_token"])


async def test_the_client_keeps_working_past_gitlab_and_gateway_token_expiries(
    gateway: SignInGateway,
) -> None:
    control = gateway.standin.control
    browser, storage = HeadlessBrowser(), MemoryStorage()
    auth = provider(gateway.mcp_url, browser, storage)
    async with signed_in_client(gateway.mcp_url, auth) as client:
        for _ in range(3):
            refreshes = control.oauth_counts()["refreshes"].get("alice", 0)
            control.oauth_expire("alice")  # GitLab's 2 hours are over
            auth.context.token_expiry_time = 1.0  # and the gateway's own token, as the SDK sees it
            since = last_seq(gateway.standin)
            result = await client.call_tool("get_pipeline", HAPPY["get_pipeline"])
            assert not result.is_error, result.content
            assert len(browser.urls) == 1  # never asked the person again
            assert control.oauth_counts()["refreshes"].get("alice", 0) == refreshes + 1
            assert_as_alice(api_requests(gateway.standin, since), expired=True)
    assert control.oauth_counts()["invalid_grants"] == 0


async def test_a_grant_revoked_at_gitlab_makes_the_client_sign_in_again(gateway: SignInGateway) -> None:
    control = gateway.standin.control
    browser, storage = HeadlessBrowser(), MemoryStorage()
    async with signed_in_client(gateway.mcp_url, provider(gateway.mcp_url, browser, storage)) as client:
        assert not (await client.call_tool("get_pipeline", HAPPY["get_pipeline"])).is_error
        revoked_token = storage.tokens.access_token if storage.tokens else ""
        control.oauth_revoke("alice")  # alice revokes the application in her GitLab profile
        again = await client.call_tool("get_pipeline", HAPPY["get_pipeline"])
        assert not again.is_error, again.content
    # The gateway answered 401 (not a tool error), so the SDK signed in again.
    assert len(browser.urls) == 2
    assert storage.tokens is not None and storage.tokens.access_token != revoked_token


async def test_a_read_scoped_token_steps_up_for_a_write_tool(
    gateway: SignInGateway, fresh_standin: Standin
) -> None:
    browser, storage = HeadlessBrowser(), MemoryStorage()
    browser.narrow_scope = "mcp:read"  # the first sign-in asks for reading only
    async with signed_in_client(gateway.mcp_url, provider(gateway.mcp_url, browser, storage)) as client:
        assert not (await client.call_tool("get_pipeline", HAPPY["get_pipeline"])).is_error
        assert storage.tokens is not None and storage.tokens.scope == "mcp:read"
        saved = await client.call_tool("save_pipeline", HAPPY["save_pipeline"])
        assert not saved.is_error, saved.content
    assert len(browser.urls) == 2  # 403 insufficient_scope, then the SDK asked for more
    assert "mcp%3Awrite" in browser.urls[1] or "mcp:write" in browser.urls[1]
    assert storage.tokens is not None and "mcp:write" in (storage.tokens.scope or "").split()
    created = fresh_standin.control.pipelines(created=True)
    assert len(created) == 1 and created[0]["user"] == "alice"


async def test_rfc7009_revocation_ends_the_token(gateway: SignInGateway) -> None:
    browser, storage = HeadlessBrowser(), MemoryStorage()
    async with signed_in_client(gateway.mcp_url, provider(gateway.mcp_url, browser, storage)) as client:
        assert not (await client.call_tool("get_pipeline", HAPPY["get_pipeline"])).is_error
    assert storage.tokens is not None and storage.client_info is not None
    bearer = {"Accept": ACCEPT, "Authorization": f"Bearer {storage.tokens.access_token}"}
    with httpx.Client(timeout=30, trust_env=False, verify=TLS) as http:
        assert (
            http.post(gateway.mcp_url, json=initialize_request("t", PROTOCOL), headers=bearer).status_code
            == 200
        )
        revoke = http.post(
            f"{gateway.public_url}/oauth/revoke",
            data={"token": storage.tokens.access_token, "client_id": storage.client_info.client_id},
        )
        assert revoke.status_code == 200
        after = http.post(gateway.mcp_url, json=initialize_request("t", PROTOCOL), headers=bearer)
    assert after.status_code == 401


async def test_an_agent_token_from_the_account_page_is_a_static_bearer_until_revoked(
    gateway: SignInGateway,
) -> None:
    account = f"{gateway.public_url}/oauth/account"
    origin = {"Origin": gateway.public_url}
    with httpx.Client(timeout=30, trust_env=False, verify=TLS, follow_redirects=True) as browser:
        page = browser.get(f"{account}/sign-in")  # through GitLab (alice) and back, with cookies
        assert page.status_code == 200 and "Signed in as <strong>alice</strong>" in page.text, page.text
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
        assert csrf
        minted = browser.post(
            account,
            data={"csrf": csrf.group(1), "action": "mint", "name": "headless", "days": "1", "write": "1"},
            headers=origin,
        )
        token = re.search(r"<pre>(gwat_[^<]+)</pre>", minted.text)
        token_id = re.search(r'name="token" value="([0-9a-f]+)"', minted.text)
        assert token and token_id, minted.text
        since = last_seq(gateway.standin)
        # The official SDK client with a static bearer, no OAuth.
        async with mcp_client(
            gateway.mcp_url, headers={"Authorization": f"Bearer {token.group(1)}"}
        ) as client:
            result = await client.call_tool("get_pipeline", HAPPY["get_pipeline"])
            assert not result.is_error, result.content
        assert_as_alice(api_requests(gateway.standin, since))
        revoked = browser.post(
            account,
            data={"csrf": csrf.group(1), "action": "revoke", "token": token_id.group(1)},
            headers=origin,
        )
        assert revoked.status_code == 200 and "headless" not in revoked.text
    bearer = {"Accept": ACCEPT, "Authorization": f"Bearer {token.group(1)}"}
    with httpx.Client(timeout=30, trust_env=False, verify=TLS) as http:
        after = http.post(gateway.mcp_url, json=initialize_request("t", PROTOCOL), headers=bearer)
    assert after.status_code == 401  # at once: the replica that revoked forgets what it cached


@pytest.mark.slow
async def test_two_replicas_refresh_an_expired_gitlab_token_once_for_32_calls(
    standin: Standin, postgres_url: str, tmp_path: Path
) -> None:
    port = free_port()
    public_url = f"http://127.0.0.1:{port}"
    register_at_gitlab(standin, public_url, "gateway-e2e-replicas")  # its own callback URL
    env = {
        **standin.env(token=None),
        **sign_in_env(public_url, "gateway-e2e-replicas"),
        "GATEWAY_BROKER__DATABASE_URL": postgres_url,
        "GATEWAY_SERVER__SESSION_KEY": base64.b64encode(bytes(range(32))).decode(),
    }
    a = GatewayProcess(env=env, state_dir=tmp_path / "a", port=port).start()
    b = GatewayProcess(env=env, state_dir=tmp_path / "b").start()
    try:
        browser, storage = HeadlessBrowser(), MemoryStorage()
        async with signed_in_client(a.mcp_url, provider(a.mcp_url, browser, storage)) as client:
            assert not (await client.call_tool("get_pipeline", HAPPY["get_pipeline"])).is_error
        assert storage.tokens is not None
        control = standin.control
        control.oauth_expire("alice")
        before = control.oauth_counts()
        headers = {"Authorization": f"Bearer {storage.tokens.access_token}"}
        async with (
            mcp_client(a.mcp_url, headers=headers) as on_a,
            mcp_client(b.mcp_url, headers=headers) as on_b,
        ):
            results = await asyncio.gather(
                *(c.call_tool("get_pipeline", HAPPY["get_pipeline"]) for c in [on_a, on_b] * 16)
            )
        assert all(not r.is_error for r in results), [r.content for r in results if r.is_error]
        after = control.oauth_counts()
        assert after["refreshes"].get("alice", 0) - before["refreshes"].get("alice", 0) == 1
        assert after["invalid_grants"] == before["invalid_grants"]
    finally:
        a.stop()
        b.stop()
