"""Sign-in fixtures: a gateway with ``[sign_in]`` on, on SQLite or PostgreSQL, in front of a fake
GitLab (an ``httpx.MockTransport``) that serves GitLab's OAuth endpoints with its rules, and a
client that walks the whole sign-in as an MCP client and a person's browser do."""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from gateway.config import Settings
from gateway.server.app import create_app
from gateway.server.services import build_services
from gateway.tools.registry import Tool
from tests.unit.mcp.helpers import Mcp, Probe, make_tools

PUBLIC = "http://127.0.0.1:8080"
GITLAB = "https://gitlab.example.com"
KEY = base64.urlsafe_b64encode(bytes(range(32))).decode()
REDIRECT = "http://127.0.0.1:33418/callback"
USERS: dict[str, dict[str, Any]] = {
    "alice": {
        "id": 7,
        "username": "alice",
        "name": "Alice",
        "state": "active",
        "groups": ["team", "team/backend"],
    },
    "bob": {"id": 8, "username": "bob", "name": "Bob", "state": "active", "groups": []},
}


def s256(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


@dataclass
class FakeGitLab:
    """GitLab's OAuth provider and API as the gateway meets them, with GitLab's rules: codes used
    once, PKCE checked, refresh rotates both tokens and an old refresh token is ``invalid_grant``."""

    current_user: str = "alice"
    expires_in: int = 7200
    codes: dict[str, tuple[str, str]] = field(default_factory=dict)
    access: dict[str, str] = field(default_factory=dict)  # token -> username
    refresh: dict[str, str] = field(default_factory=dict)
    expired: set[str] = field(default_factory=set)
    refreshes: int = 0
    api_requests: list[httpx.Request] = field(default_factory=list)
    revoked: list[str] = field(default_factory=list)
    token_requests: int = 0
    #: The GitLab application's secret; a token request with another is ``invalid_client``.
    client_secret: str = "gitlab-app-secret"

    def approve(self, authorize_url: str) -> tuple[str, str]:
        """The person approves at GitLab: (code, state) to bring back to the gateway."""
        query = parse_qs(urlsplit(authorize_url).query)
        assert query["code_challenge_method"] == ["S256"]
        code = secrets.token_hex(8)
        self.codes[code] = (self.current_user, query["code_challenge"][0])
        return code, query["state"][0]

    def _issue(self, user: str) -> dict[str, Any]:
        access, refresh = "glpat-oauth-" + secrets.token_hex(12), "glrt-oauth-" + secrets.token_hex(12)
        self.access[access] = user
        self.refresh[refresh] = user
        return {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": self.expires_in,
            "refresh_token": refresh,
            "scope": "api",
            "created_at": 1_700_000_000,  # GitLab's clock, not the gateway's
        }

    def expire_all(self) -> None:
        self.expired.update(self.access)

    def revoke_user(self, user: str) -> None:
        for table in (self.access, self.refresh):
            for token in [t for t, u in table.items() if u == user]:
                del table[token]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/oauth/token":
            self.token_requests += 1
            form = {k: v[0] for k, v in parse_qs(request.content.decode()).items()}
            if form["client_secret"] != self.client_secret:
                return httpx.Response(
                    401, json={"error": "invalid_client", "error_description": "Client authentication failed"}
                )
            bad = httpx.Response(
                400,
                json={
                    "error": "invalid_grant",
                    "error_description": "The provided authorization grant is invalid",
                },
            )
            if form["grant_type"] == "authorization_code":
                found = self.codes.pop(form["code"], None)
                if found is None or s256(form["code_verifier"]) != found[1]:
                    return bad
                return httpx.Response(200, json=self._issue(found[0]))
            user = self.refresh.pop(form["refresh_token"], None)
            if user is None:
                return bad
            self.refreshes += 1
            for token in [t for t, u in self.access.items() if u == user]:
                del self.access[token]
            return httpx.Response(200, json=self._issue(user))
        if path == "/oauth/revoke":
            self.revoked.append(request.content.decode())
            return httpx.Response(200, json={})
        self.api_requests.append(request)
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        user = self.access.get(token)
        if user is None or token in self.expired:
            return httpx.Response(
                401, json={"error": "invalid_token", "error_description": "Token is expired."}
            )
        if path == "/api/v4/user":
            return httpx.Response(200, json={k: v for k, v in USERS[user].items() if k != "groups"})
        if path == "/api/v4/groups":
            return httpx.Response(
                200, json=[{"id": i, "full_path": g, "name": g} for i, g in enumerate(USERS[user]["groups"])]
            )
        return httpx.Response(404, json={"message": "404 Not Found"})


@dataclass
class Gateway:
    """One gateway replica with sign-in on, and what the tests look at."""

    mcp: Mcp
    gitlab: FakeGitLab
    probe: Probe

    @property
    def http(self) -> TestClient[Any, Any]:
        return self.mcp.client


def sign_in_settings(**overrides: Any) -> dict[str, Any]:
    return {
        "enabled": True,
        "public_url": PUBLIC,
        "gitlab_client_id": "gitlab-app",
        "gitlab_client_secret": "gitlab-app-secret",
        "encryption_key": KEY,
        **overrides,
    }


MakeGateway = Callable[..., Awaitable[Gateway]]


@pytest.fixture
def make_gateway(
    aiohttp_client: Any, make_settings: Callable[..., Settings], at_head: Callable[[Settings], Settings]
) -> MakeGateway:
    """``await make_gateway(database_url=None, gitlab=None, sign_in={...}, **settings)``: a replica."""

    async def make(
        database_url: str | None = None,
        gitlab: FakeGitLab | None = None,
        sign_in: dict[str, Any] | None = None,
        extra_tools: list[Tool] | None = None,
        **overrides: Any,
    ) -> Gateway:
        fake = gitlab or FakeGitLab()
        settings = at_head(
            make_settings(
                sign_in=sign_in_settings(**(sign_in or {})),
                broker={"database_url": database_url} if database_url else {},
                **overrides,
            )
        )
        http = httpx.AsyncClient(transport=httpx.MockTransport(fake))
        probe = Probe()
        app = create_app(
            settings,
            services=partial(build_services, gitlab_http=http),
            tools=[*make_tools(probe), *(extra_tools or [])],
        )

        async def close(app: web.Application) -> None:
            await http.aclose()

        app.on_cleanup.append(close)
        return Gateway(Mcp(await aiohttp_client(app), app), fake, probe)

    return make


@dataclass
class Tokens:
    access_token: str
    refresh_token: str
    scope: str
    client_id: str


async def register(gw: Gateway, **metadata: Any) -> dict[str, Any]:
    body = {
        "redirect_uris": [REDIRECT],
        "token_endpoint_auth_method": "none",
        "client_name": "Test client",
        **metadata,
    }
    resp = await gw.http.post("/oauth/register", json=body)
    assert resp.status == 201, await resp.text()
    return dict(await resp.json())


async def consent_page(gw: Gateway, client_id: str, verifier: str, **params: str) -> Any:
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT,
        "code_challenge": s256(verifier),
        "code_challenge_method": "S256",
        "state": "client-state",
        "resource": f"{PUBLIC}/mcp",
        **params,
    }
    return await gw.http.get("/oauth/authorize", params=query, allow_redirects=False)


def form_fields(page: str) -> dict[str, str]:
    return dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', page))


async def through_gitlab(
    gw: Gateway, client_id: str, verifier: str, *, role: str | None = None, scope: str | None = None
) -> Any:
    """Consent, GitLab, and back: the gateway's answer to GitLab's return (a 302 to the client)."""
    page = await consent_page(gw, client_id, verifier, **({"scope": scope} if scope else {}))
    assert page.status == 200, await page.text()
    form = {**form_fields(await page.text()), "decision": "allow", **({"role": role} if role else {})}
    to_gitlab = await gw.http.post(
        "/oauth/authorize", data=form, headers={"Origin": PUBLIC}, allow_redirects=False
    )
    assert to_gitlab.status == 302, await to_gitlab.text()
    location = to_gitlab.headers["Location"]
    assert location.startswith(f"{GITLAB}/oauth/authorize?")
    code, state = gw.gitlab.approve(location)
    back = await gw.http.get(
        "/oauth/gitlab/callback", params={"code": code, "state": state}, allow_redirects=False
    )
    assert back.status == 302, await back.text()
    assert back.headers["Location"].startswith(REDIRECT)
    return back


async def sign_in(
    gw: Gateway, *, role: str | None = None, scope: str | None = None, client: dict[str, Any] | None = None
) -> Tokens:
    """The whole sign-in, as the SDK and a browser walk it; the tokens the client ends with."""
    client = client or await register(gw)
    verifier = secrets.token_urlsafe(48)
    back = await through_gitlab(gw, client["client_id"], verifier, role=role, scope=scope)
    answer = parse_qs(urlsplit(back.headers["Location"]).query)
    assert answer["state"] == ["client-state"] and answer["iss"] == [PUBLIC], answer
    resp = await gw.http.post(
        "/oauth/token",
        data={
            "grant_type": "authorization_code",
            "code": answer["code"][0],
            "code_verifier": verifier,
            "client_id": client["client_id"],
            "redirect_uri": REDIRECT,
            "resource": f"{PUBLIC}/mcp",
        },
    )
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    return Tokens(body["access_token"], body["refresh_token"], body["scope"], client["client_id"])


async def whoami(gw: Gateway, token: str) -> Any:
    """tools/call whoami (2026-07-28, no session) with ``token``; the HTTP response."""
    from tests.unit.mcp.helpers import modern_headers, modern_meta

    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "whoami", "arguments": {}, "_meta": modern_meta()},
    }
    headers = {**modern_headers("tools/call", "whoami"), "Authorization": f"Bearer {token}"}
    return await gw.mcp.post(body, headers=headers, session=False)
