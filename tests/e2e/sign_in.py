"""Signing the official SDK client in without a browser, for the sign-in end-to-end tests.

:class:`HeadlessBrowser` plays the person: the SDK's ``OAuthClientProvider`` hands it the
gateway's authorization URL; it opens the consent page, allows (choosing the first broker role
offered), follows the redirects to GitLab's ``/oauth/authorize`` (the stand-in approves at once as
its current user) and back to the gateway's ``/oauth/gitlab/callback``, and stops at the redirect
to the client's loopback ``redirect_uri``, whose ``code``, ``state`` and ``iss`` it gives the SDK's
callback handler. No callback server listens: nothing is ever sent to that redirect URI.

:class:`DocumentServer` serves a Client ID Metadata Document over https on loopback, with a
self-signed certificate (the gateway trusts it through ``SSL_CERT_FILE``).
"""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit, urlunsplit

import httpx
import httpx2
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

from tests.local_http import TLS, self_signed_certificate

#: The client's loopback redirect URI: a port no one listens on (the browser stops before it).
REDIRECT_URI = "http://127.0.0.1:33418/callback"


class _Form(HTMLParser):
    """The consent page's form: its action, hidden fields and the first role offered."""

    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.fields: dict[str, str] = {}
        self.buttons: set[tuple[str, str]] = set()
        self._select: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form" and a.get("method", "").lower() == "post":
            self.action = a.get("action")
        elif tag == "input" and a.get("type") == "hidden" and "name" in a:
            self.fields[a["name"]] = a.get("value", "")
        elif tag == "select":
            self._select = a.get("name")
        elif tag == "option" and self._select and self._select not in self.fields:
            self.fields[self._select] = a.get("value", "")
        elif tag == "button" and "name" in a:
            self.buttons.add((a["name"], a.get("value", "")))

    def handle_endtag(self, tag: str) -> None:
        if tag == "select":
            self._select = None


class HeadlessBrowser:
    """The SDK's redirect and callback handlers, played through plain HTTP with a cookie jar.

    Attributes:
        urls: every authorization URL the SDK opened (one per sign-in).
        narrow_scope: when set, the next sign-in asks for this scope instead of the SDK's (the
            person consenting to less), then it is cleared.
    """

    def __init__(self, redirect_uri: str = REDIRECT_URI) -> None:
        self.redirect_uri = redirect_uri
        self.urls: list[str] = []
        self.narrow_scope: str | None = None
        self._result: AuthorizationCodeResult | None = None

    async def redirect_handler(self, url: str) -> None:
        if self.narrow_scope is not None:
            parts = urlsplit(url)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            url = urlunsplit(parts._replace(query=urlencode({**query, "scope": self.narrow_scope})))
            self.narrow_scope = None
        self.urls.append(url)
        self._result = await self.consent(url)

    async def callback_handler(self) -> AuthorizationCodeResult:
        assert self._result is not None, "the SDK asked for the callback before any redirect"
        result, self._result = self._result, None
        return result

    async def consent(self, url: str, decision: str = "allow") -> AuthorizationCodeResult:
        """Open ``url``, answer the consent form with ``decision``, follow the redirects home."""
        origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
        async with httpx.AsyncClient(timeout=30, trust_env=False, verify=TLS) as http:
            page = await http.get(url)
            assert page.status_code == 200, f"consent page: {page.status_code} {page.text[:500]}"
            form = _Form()
            form.feed(page.text)
            assert form.action and {"transaction", "csrf"} <= set(form.fields), page.text[:2000]
            assert ("decision", decision) in form.buttons, page.text[:2000]
            answer = await http.post(
                urljoin(url, form.action),
                data={**form.fields, "decision": decision},
                headers={"Origin": origin},
            )
            for _ in range(5):
                location = answer.headers.get("Location")
                assert answer.status_code in (302, 303) and location, (
                    f"{answer.status_code} {answer.text[:500]}"
                )
                target = urljoin(str(answer.url), location)
                if _same_endpoint(target, self.redirect_uri):
                    query = {k: v[-1] for k, v in parse_qs(urlsplit(target).query).items()}
                    assert "code" in query, f"the sign-in ended with {query}"
                    return AuthorizationCodeResult(
                        code=query["code"], state=query.get("state"), iss=query.get("iss")
                    )
                answer = await http.get(target)
        raise AssertionError(f"no redirect back to {self.redirect_uri}")


def _same_endpoint(url: str, redirect_uri: str) -> bool:
    a, b = urlsplit(url), urlsplit(redirect_uri)
    return (a.scheme, a.hostname, a.port, a.path) == (b.scheme, b.hostname, b.port, b.path)


class MemoryStorage:
    """The SDK's token storage, in memory (optionally holding a pre-registered client)."""

    def __init__(self, client_info: OAuthClientInformationFull | None = None) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info = client_info

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


def provider(
    mcp_url: str,
    browser: HeadlessBrowser,
    storage: MemoryStorage,
    *,
    client_metadata_url: str | None = None,
) -> OAuthClientProvider:
    """The SDK's OAuth provider for ``mcp_url``, signing in through ``browser``."""
    metadata = OAuthClientMetadata(
        client_name="sign-in e2e",
        redirect_uris=[browser.redirect_uri],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    return OAuthClientProvider(
        mcp_url,
        metadata,
        storage,
        redirect_handler=browser.redirect_handler,
        callback_handler=browser.callback_handler,
        client_metadata_url=client_metadata_url,
    )


@asynccontextmanager
async def signed_in_client(url: str, auth: OAuthClientProvider, mode: str = "auto") -> AsyncIterator[Client]:
    """An initialized SDK ``Client`` on ``url`` whose HTTP requests carry ``auth``."""
    http = httpx2.AsyncClient(auth=auth, timeout=httpx2.Timeout(30.0, read=None), verify=TLS)
    async with (
        http,
        Client(streamable_http_client(url, http_client=http), mode=mode, read_timeout_seconds=60) as c,
    ):
        yield c


# -- a Client ID Metadata Document over https -----------------------------------------------------


class DocumentServer:
    """``https://127.0.0.1:N/clients/e2e.json``: a Client ID Metadata Document, in a thread."""

    PATH = "/clients/e2e.json"

    def __init__(self, folder: Path, redirect_uris: list[str]) -> None:
        self.cert, key = self_signed_certificate(folder, "127.0.0.1")
        self.fetches = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != DocumentServer.PATH:
                    self.send_error(404)
                    return
                outer.fetches += 1
                body = json.dumps(outer.document(redirect_uris)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, key)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self._server.server_address[1]}{self.PATH}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def document(self, redirect_uris: list[str]) -> dict[str, Any]:
        return {
            "client_id": self.url,
            "client_name": "sign-in e2e (metadata document)",
            "redirect_uris": redirect_uris,
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }

    def start(self) -> DocumentServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
