"""The shared HTTP client over real sockets on 127.0.0.1: TLS verification with a private CA
bundle, and proxies taken from the environment (``HTTP_PROXY`` / ``NO_PROXY``)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gateway.config import Settings
from gateway.gitlab.attempt_errors import AGENT_ADVICE
from gateway.gitlab.client import GitLabClient
from gateway.gitlab.connect_hints import CERTIFICATE, PLAIN_HTTP_PORT
from gateway.gitlab.credentials import service_credential
from gateway.gitlab.errors import GitLabUpstreamError
from tests.local_http import self_signed_certificate, tls_site

# TLS and proxies go through the event loop's own transports: these run on asyncio's loop and
# on uvloop's, the gateway's default.
pytestmark = pytest.mark.both_loops

PROXY_VARS = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
)
DATA = {"data": {"project": None}}
VARS = {
    "byId": False,
    "fullPath": "g/p",
    "projectIds": [],
    "pipelineId": "gid://gitlab/Ci::Pipeline/1",
    "includeJobs": False,
    "includeDownstreamPipelines": False,
    "includeBridgeJobs": False,
}


@pytest.fixture(autouse=True)
def _no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def tls_gitlab(tmp_path: Path) -> AsyncIterator[tuple[str, Path, list[dict[str, str]]]]:
    """An HTTPS GitLab stand-in on 127.0.0.1: (base URL, its certificate, headers it received)."""
    cert, key = self_signed_certificate(tmp_path, "127.0.0.1")
    seen: list[dict[str, str]] = []

    async def graphql(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.json_response(DATA)

    app = web.Application()
    app.router.add_post("/gitlab/api/graphql", graphql)
    async with tls_site(app, cert, key) as port:
        yield f"https://127.0.0.1:{port}/gitlab", cert, seen


async def _query(client: GitLabClient) -> dict[str, Any]:
    try:
        return await client.graphql("get_pipeline", VARS, credential=service_credential("glpat-x"))
    finally:
        await client.aclose()


async def test_tls_with_the_private_ca_bundle_succeeds(
    make_settings: Callable[..., Settings], tls_gitlab: tuple[str, Path, list[dict[str, str]]]
) -> None:
    url, cert, seen = tls_gitlab
    client = GitLabClient(make_settings(gitlab={"url": url, "ca_bundle": str(cert)}).gitlab)
    assert await _query(client) == DATA["data"]
    assert seen[0]["PRIVATE-TOKEN"] == "glpat-x"


async def test_tls_without_the_ca_bundle_is_refused(
    make_settings: Callable[..., Settings], tls_gitlab: tuple[str, Path, list[dict[str, str]]]
) -> None:
    url, _, seen = tls_gitlab
    client = GitLabClient(make_settings(gitlab={"url": url, "retry_attempts": 1}).gitlab)
    with pytest.raises(GitLabUpstreamError, match="Could not connect to GitLab") as caught:
        await _query(client)
    assert caught.value.message.endswith(f": {CERTIFICATE}. {AGENT_ADVICE}.")
    assert seen == []  # the token never went to an unverified server


async def test_https_to_a_plain_http_port_says_what_the_start_up_line_says(
    make_settings: Callable[..., Settings],
) -> None:
    async def plain_http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1024)  # a TLS hello, answered as a plain-HTTP server answers it
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(plain_http, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = GitLabClient(
        make_settings(gitlab={"url": f"https://127.0.0.1:{port}", "retry_attempts": 1}).gitlab
    )
    try:
        with pytest.raises(GitLabUpstreamError) as caught:
            await _query(client)
    finally:
        server.close()
        await server.wait_closed()
    assert caught.value.message == (
        f"Could not connect to GitLab at https://127.0.0.1:{port} (TLS handshake failed; 1 attempt): "
        f"{PLAIN_HTTP_PORT}. {AGENT_ADVICE}."
    )


async def test_a_closed_port_fails_within_two_seconds_after_three_attempts(
    make_settings: Callable[..., Settings],
) -> None:
    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    client = GitLabClient(make_settings(gitlab={"url": f"http://127.0.0.1:{closed_port}"}).gitlab)
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        with pytest.raises(GitLabUpstreamError) as caught:
            await _query(client)
    finally:
        await client.aclose()
    assert loop.time() - started < 2.0
    assert f"GitLab at http://127.0.0.1:{closed_port} (connection refused; 3 attempts over " in (
        caught.value.message
    )


class _Proxy:
    """A forward proxy that answers every request itself and records the request lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.heads: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        self.lines.append(head.split(b"\r\n", 1)[0].decode())
        self.heads.append(head)
        length = next(
            (
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ),
            0,
        )
        await reader.readexactly(length)
        body = b'{"data": {"project": null}}'
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n%s" % (len(body), body)
        )
        await writer.drain()
        writer.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"


@pytest.fixture
async def proxy() -> AsyncIterator[_Proxy]:
    p = _Proxy()
    p.server = await asyncio.start_server(p.handle, "127.0.0.1", 0)
    yield p
    p.server.close()
    await p.server.wait_closed()


async def test_proxy_from_the_environment_is_used(
    make_settings: Callable[..., Settings], proxy: _Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    # .invalid never resolves (RFC 2606): only the proxy can have answered.
    client = GitLabClient(make_settings(gitlab={"url": "http://gitlab.invalid"}).gitlab)
    assert await _query(client) == DATA["data"]
    assert proxy.lines == ["POST http://gitlab.invalid/api/graphql HTTP/1.1"]


async def test_no_proxy_bypasses_the_proxy(
    make_settings: Callable[..., Settings], proxy: _Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    client = GitLabClient(
        make_settings(gitlab={"url": f"http://127.0.0.1:{closed_port}", "retry_attempts": 1}).gitlab
    )
    with pytest.raises(GitLabUpstreamError, match="Could not connect"):
        await _query(client)
    assert proxy.lines == []


async def test_proxy_credentials_in_the_url_are_sent_to_the_proxy(
    make_settings: Callable[..., Settings], proxy: _Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url.replace("http://", "http://gw%40corp:s3cret@"))
    client = GitLabClient(make_settings(gitlab={"url": "http://gitlab.invalid"}).gitlab)
    assert await _query(client) == DATA["data"]
    # Basic base64("gw@corp:s3cret")
    assert b"Proxy-Authorization: Basic Z3dAY29ycDpzM2NyZXQ=" in proxy.heads[0]


async def test_all_proxy_is_used_and_socks_is_refused_at_start(
    make_settings: Callable[..., Settings], proxy: _Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ALL_PROXY", proxy.url)
    client = GitLabClient(make_settings(gitlab={"url": "http://gitlab.invalid"}).gitlab)
    assert await _query(client) == DATA["data"]
    assert proxy.lines == ["POST http://gitlab.invalid/api/graphql HTTP/1.1"]
    monkeypatch.setenv("ALL_PROXY", "socks5://127.0.0.1:1080")
    with pytest.raises(ValueError, match=r"socks5:// from the environment\) is not supported"):
        GitLabClient(make_settings(gitlab={"url": "http://gitlab.invalid"}).gitlab)
