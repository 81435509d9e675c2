"""Client ID Metadata Documents at sign-in: the document is fetched from the client_id URL with
GitLab-free, bounded, pinned requests to public addresses only, checked, and cached.

The client's host is an ``httpx.MockTransport`` behind a fake resolver (no network), except in
the last tests, where a real HTTPS server on loopback proves the network path (resolution,
pinning, SNI and certificate checks) with ``allow_private_addresses``.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from gateway.signin.client_metadata import (
    NEGATIVE_CACHE_SECONDS,
    ClientMetadata,
    ClientMetadataError,
    ClientMetadataFetcher,
    is_public_address,
)
from tests.local_http import self_signed_certificate, tls_site

CLIENT_ID = "https://client.example/oauth/client.json"
PUBLIC_V4 = "93.184.215.14"
PUBLIC_V6 = "2606:2800:21f:cb07:6820:80da:af6b:8b2c"
DOCUMENT: dict[str, Any] = {
    "client_id": CLIENT_ID,
    "client_name": "Example MCP Client",
    "client_uri": "https://client.example",
    "logo_uri": "https://client.example/logo.png",
    "redirect_uris": ["http://127.0.0.1:3000/callback", "http://localhost:3000/callback"],
    "grant_types": ["authorization_code", "refresh_token"],
    "response_types": ["code"],
    "token_endpoint_auth_method": "none",
}
Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]


def json_response(document: Any = DOCUMENT, **headers: str) -> httpx.Response:
    return httpx.Response(
        200, content=json.dumps(document).encode(), headers={"Content-Type": "application/json", **headers}
    )


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class ClientHost:
    """The client's web server as the fetcher meets it: a resolver and a transport that record
    what they were asked."""

    def __init__(self, *addresses: str) -> None:
        self.addresses = list(addresses or (PUBLIC_V4,))
        self.resolved: list[tuple[str, int]] = []
        self.requests: list[httpx.Request] = []
        self.answer: Handler = self._document

    @staticmethod
    async def _document(request: httpx.Request) -> httpx.Response:
        return json_response()

    async def resolve(self, host: str, port: int) -> Sequence[str]:
        self.resolved.append((host, port))
        return self.addresses

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return await self.answer(request)

    def fetcher(self, **options: Any) -> ClientMetadataFetcher:
        return ClientMetadataFetcher(
            transport=httpx.MockTransport(self.handle), resolver=self.resolve, **options
        )


@pytest.fixture
def host() -> ClientHost:
    return ClientHost()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def fetcher(host: ClientHost, clock: FakeClock) -> AsyncIterator[ClientMetadataFetcher]:
    fetcher = host.fetcher(timeout_seconds=2, timer=clock)
    yield fetcher
    await fetcher.aclose()


async def refused(fetcher: ClientMetadataFetcher, client_id: str = CLIENT_ID) -> str:
    """The message of the error the fetch raises, checked to be fit for an OAuth
    ``error_description`` (RFC 6749 §5.2: printable ASCII without ``"`` or ``\\``)."""
    with pytest.raises(ClientMetadataError) as caught:
        await fetcher.fetch(client_id)
    message = str(caught.value)
    assert message and all(0x20 <= ord(ch) <= 0x7E and ch not in '"\\' for ch in message), message
    return message


async def test_a_good_document_is_fetched_from_the_checked_address_with_host_and_sni(
    fetcher: ClientMetadataFetcher, host: ClientHost
) -> None:
    metadata = await fetcher.fetch(CLIENT_ID)

    assert metadata == ClientMetadata(
        client_id=CLIENT_ID,
        client_name="Example MCP Client",
        redirect_uris=("http://127.0.0.1:3000/callback", "http://localhost:3000/callback"),
        client_uri="https://client.example",
        logo_uri="https://client.example/logo.png",
        token_endpoint_auth_method="none",
    )
    assert host.resolved == [("client.example", 443)]
    [request] = host.requests
    # Pinned: the connection goes to the address that was checked, the name rides in Host and SNI.
    assert str(request.url) == f"https://{PUBLIC_V4}/oauth/client.json"
    assert request.headers["Host"] == "client.example"
    assert request.extensions["sni_hostname"] == "client.example"
    assert request.headers["Accept"] == "application/json"
    assert request.headers["Accept-Encoding"] == "identity"
    assert "cookie" not in request.headers and "authorization" not in request.headers


async def test_an_ipv6_address_and_a_port_are_pinned_too(host: ClientHost) -> None:
    host.addresses = [PUBLIC_V6]
    client_id = "https://client.example:8443/client.json?v=2"
    host.answer = lambda request: asyncio.sleep(0, json_response({**DOCUMENT, "client_id": client_id}))
    fetcher = host.fetcher()
    try:
        assert (await fetcher.fetch(client_id)).client_id == client_id
    finally:
        await fetcher.aclose()
    [request] = host.requests
    assert str(request.url) == f"https://[{PUBLIC_V6}]:8443/client.json?v=2"
    assert request.headers["Host"] == "client.example:8443"


async def test_a_document_without_auth_method_or_optional_fields_is_a_public_client(
    fetcher: ClientMetadataFetcher, host: ClientHost
) -> None:
    document = {"client_id": CLIENT_ID, "redirect_uris": ["com.example.app:/callback"]}
    host.answer = lambda request: asyncio.sleep(0, json_response(document))
    metadata = await fetcher.fetch(CLIENT_ID)
    assert metadata.token_endpoint_auth_method == "none"
    assert metadata.client_name is None and metadata.logo_uri is None
    assert metadata.redirect_uris == ("com.example.app:/callback",)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"client_id": "https://client.example/oauth/other.json"}, "does not equal the URL"),
        ({"client_id": CLIENT_ID + "/"}, "does not equal the URL"),
        ({"redirect_uris": None}, "must list its redirect_uris"),
        ({"redirect_uris": []}, "must list its redirect_uris"),
        ({"redirect_uris": "https://client.example/cb"}, "must list its redirect_uris"),
        ({"redirect_uris": ["http://client.example/cb"]}, "only to loopback hosts"),
        ({"redirect_uris": ["https://client.example/cb#x"]}, "fragment"),
        ({"token_endpoint_auth_method": "client_secret_basic"}, "must be none"),
        ({"token_endpoint_auth_method": "client_secret_post"}, "must be none"),
        ({"token_endpoint_auth_method": "client_secret_jwt"}, "must be none"),
        ({"token_endpoint_auth_method": "private_key_jwt"}, "must be none"),
        ({"client_secret": "s3cret"}, "must not contain a client_secret"),
        ({"grant_types": ["client_credentials"]}, "grant_types must include authorization_code"),
        ({"response_types": ["token"]}, "response_types must include code"),
        ({"client_name": ["not", "a", "name"]}, "client_name must be a string"),
        ({"logo_uri": "http://client.example/logo.png"}, "logo_uri must be an https URL"),
    ],
)
async def test_a_document_breaking_a_rule_is_refused_with_the_rule(
    fetcher: ClientMetadataFetcher, host: ClientHost, change: dict[str, Any], said: str
) -> None:
    document = {**DOCUMENT, **change}
    if change.get("redirect_uris", "") is None:
        del document["redirect_uris"]
    host.answer = lambda request: asyncio.sleep(0, json_response(document))
    assert said in await refused(fetcher)


@pytest.mark.parametrize(
    ("response", "said"),
    [
        (
            httpx.Response(200, text="<html>hello</html>", headers={"Content-Type": "text/html"}),
            "application/json",
        ),
        (httpx.Response(200, content=b'{"client_id":'), "application/json"),  # no media type at all
        (
            httpx.Response(200, content=b"{nope", headers={"Content-Type": "application/json"}),
            "not valid JSON",
        ),
        (
            httpx.Response(200, content=b"\xff\xfe", headers={"Content-Type": "application/json"}),
            "not valid JSON",
        ),
        (
            httpx.Response(200, content=b"[" * 3000, headers={"Content-Type": "application/json"}),
            "not valid JSON",
        ),
        (httpx.Response(200, json=[CLIENT_ID]), "must be a JSON object"),
        (
            httpx.Response(
                200,
                content=b"\x1f\x8b",
                headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
            ),
            "uncompressed",
        ),
        (httpx.Response(404, json={"error": "not found"}), "answered HTTP 404, not 200"),
        (httpx.Response(204), "answered HTTP 204, not 200"),
        (
            httpx.Response(403, text="<html>Just a moment...</html>", headers={"Content-Type": "text/html"}),
            "HTTP 403, not 200: its host refused the gateway (a bot challenge?)",
        ),
    ],
)
async def test_an_answer_that_is_not_a_json_document_is_refused(
    host: ClientHost, response: httpx.Response, said: str
) -> None:
    host.answer = lambda request: asyncio.sleep(0, response)
    fetcher = host.fetcher(max_bytes=8192)
    try:
        assert said in await refused(fetcher)
    finally:
        await fetcher.aclose()


async def test_a_redirect_is_not_followed(fetcher: ClientMetadataFetcher, host: ClientHost) -> None:
    host.answer = lambda request: asyncio.sleep(
        0, httpx.Response(302, headers={"Location": "http://169.254.169.254/latest/meta-data/"})
    )
    said = await refused(fetcher)
    assert "redirect (HTTP 302), which is not followed" in said
    assert len(host.requests) == 1


async def test_a_declared_length_over_the_bound_is_refused_before_the_body(
    fetcher: ClientMetadataFetcher, host: ClientHost
) -> None:
    host.answer = lambda request: asyncio.sleep(
        0, httpx.Response(200, content=b" " * 6000, headers={"Content-Type": "application/json"})
    )
    assert "larger than 5120 bytes" in await refused(fetcher)


async def test_an_endless_body_is_read_only_up_to_the_bound(
    fetcher: ClientMetadataFetcher, host: ClientHost
) -> None:
    served: list[int] = []

    async def endless() -> AsyncIterator[bytes]:
        while True:
            served.append(1024)
            yield b" " * 1024

    host.answer = lambda request: asyncio.sleep(
        0, httpx.Response(200, content=endless(), headers={"Content-Type": "application/json"})
    )
    assert "larger than 5120 bytes" in await refused(fetcher)
    assert len(served) == 6  # 6 KiB read, then the read stopped


async def test_a_slow_server_is_given_up_within_the_timeout(host: ClientHost) -> None:
    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(30)
        return json_response()

    host.answer = slow
    fetcher = host.fetcher(timeout_seconds=0.2)
    started = time.monotonic()
    try:
        assert "did not arrive within 0.2 seconds" in await refused(fetcher)
    finally:
        await fetcher.aclose()
    assert time.monotonic() - started < 5


async def test_a_body_trickling_in_is_bounded_by_one_deadline_not_per_read(host: ClientHost) -> None:
    async def trickle() -> AsyncIterator[bytes]:
        while True:
            await asyncio.sleep(0.02)  # every read is quick; the whole is not
            yield b" "

    host.answer = lambda request: asyncio.sleep(
        0, httpx.Response(200, content=trickle(), headers={"Content-Type": "application/json"})
    )
    fetcher = host.fetcher(timeout_seconds=0.3)
    try:
        assert "did not arrive within 0.3 seconds" in await refused(fetcher)
    finally:
        await fetcher.aclose()


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.1.2.3",
        "::1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "100.64.0.1",
        "169.254.169.254",
        "fe80::1",
        "fc00::1",
        "fd12:3456::1",
        "224.0.0.1",
        "239.255.255.250",
        "ff02::1",
        "0.0.0.0",
        "::",
        "240.0.0.1",
        "255.255.255.255",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "::ffff:169.254.169.254",
        "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
        "2002:a00:1::",  # 6to4 of 10.0.0.1
        "192.0.2.1",  # documentation
        "not an address",
    ],
)
async def test_a_host_resolving_to_a_non_public_address_is_refused_without_a_request(
    host: ClientHost, address: str
) -> None:
    assert not is_public_address(address)
    host.addresses = [PUBLIC_V4, address]  # one bad address among good ones is enough
    fetcher = host.fetcher()
    try:
        assert "public addresses only" in await refused(fetcher)
    finally:
        await fetcher.aclose()
    assert host.requests == []


def test_public_addresses_are_allowed() -> None:
    assert is_public_address(PUBLIC_V4)
    assert is_public_address(PUBLIC_V6)
    assert is_public_address("::ffff:93.184.215.14")


async def test_a_host_that_does_not_resolve_is_refused(
    fetcher: ClientMetadataFetcher, host: ClientHost
) -> None:
    host.addresses = []
    assert "does not resolve" in await refused(fetcher)


@pytest.mark.parametrize(
    ("client_id", "said"),
    [
        ("http://client.example/client.json", "https URL with a host and a path"),
        ("https://client.example", "https URL with a host and a path"),
        ("https://client.example/", "https URL with a host and a path"),
        ("https://client.example/client.json#x", "fragment"),
        ("https://user:pw@client.example/client.json", "user name or password"),
        ("https://client.example/a/../client.json", ". or .. path segments"),
        ("https://client.example/a/%2e%2e/client.json", ". or .. path segments"),
        ("https://client.example/./client.json", ". or .. path segments"),
        ("https://client.example:99999/client.json", "invalid port"),
        ("https://client.example/" + "a" * 2000, "longer than 2000"),
    ],
)
async def test_a_client_id_breaking_the_url_rules_is_refused_without_a_lookup(
    fetcher: ClientMetadataFetcher, host: ClientHost, client_id: str, said: str
) -> None:
    assert said in await refused(fetcher, client_id)
    assert host.resolved == [] and host.requests == []


@pytest.mark.parametrize(
    ("client_id", "expected"),
    [
        (CLIENT_ID, True),
        ("https://client.example/a", True),
        ("https://client.example", False),
        ("https://client.example/", False),
        ("http://client.example/client.json", False),
        ("3f2a9c1e-dynamic-registration-id", False),
        ("https://[::1/bad", False),
    ],
)
def test_which_client_ids_are_metadata_urls(client_id: str, expected: bool) -> None:
    assert ClientMetadataFetcher.is_metadata_client_id(client_id) is expected


async def test_a_document_is_cached_for_cache_seconds(
    fetcher: ClientMetadataFetcher, host: ClientHost, clock: FakeClock
) -> None:
    first = await fetcher.fetch(CLIENT_ID)
    clock.now += 3599
    assert await fetcher.fetch(CLIENT_ID) == first
    assert len(host.requests) == 1
    clock.now += 2
    await fetcher.fetch(CLIENT_ID)
    assert len(host.requests) == 2


@pytest.mark.parametrize(
    ("cache_control", "kept"),
    [
        ("public, max-age=120", 120),
        ("max-age=5", 60),  # at least a minute, so requests cannot make the gateway fetch each time
        ("no-store", 60),
        ("max-age=999999", 3600),  # at most cache_seconds
        ('max-age="300"', 300),
        ("max-age=soon", 3600),
    ],
)
async def test_max_age_is_honoured_within_bounds(
    fetcher: ClientMetadataFetcher, host: ClientHost, clock: FakeClock, cache_control: str, kept: int
) -> None:
    host.answer = lambda request: asyncio.sleep(0, json_response(**{"Cache-Control": cache_control}))
    await fetcher.fetch(CLIENT_ID)
    clock.now += kept - 1
    await fetcher.fetch(CLIENT_ID)
    assert len(host.requests) == 1
    clock.now += 2
    await fetcher.fetch(CLIENT_ID)
    assert len(host.requests) == 2


async def test_cache_seconds_zero_fetches_every_time(host: ClientHost) -> None:
    fetcher = host.fetcher(cache_seconds=0)
    try:
        await fetcher.fetch(CLIENT_ID)
        await fetcher.fetch(CLIENT_ID)
    finally:
        await fetcher.aclose()
    assert len(host.requests) == 2


async def test_a_failure_is_remembered_briefly(
    fetcher: ClientMetadataFetcher, host: ClientHost, clock: FakeClock
) -> None:
    host.answer = lambda request: asyncio.sleep(0, httpx.Response(404))
    first = await refused(fetcher)
    host.answer = ClientHost._document  # fixed at the client's end
    clock.now += NEGATIVE_CACHE_SECONDS - 1
    assert await refused(fetcher) == first
    assert len(host.requests) == 1
    clock.now += 2
    assert (await fetcher.fetch(CLIENT_ID)).client_id == CLIENT_ID
    assert len(host.requests) == 2


async def test_concurrent_fetches_of_one_url_make_one_request(
    fetcher: ClientMetadataFetcher, host: ClientHost
) -> None:
    release = asyncio.Event()

    async def held(request: httpx.Request) -> httpx.Response:
        await release.wait()
        return json_response()

    host.answer = held
    waiting = [asyncio.create_task(fetcher.fetch(CLIENT_ID)) for _ in range(10)]
    await asyncio.sleep(0.05)
    release.set()
    results = await asyncio.wait_for(asyncio.gather(*waiting), 5)
    assert len(host.requests) == 1
    assert all(result == results[0] for result in results)


async def test_the_cache_is_bounded(host: ClientHost, clock: FakeClock) -> None:
    ids = [f"https://client.example/{n}.json" for n in range(3)]
    host.answer = lambda request: asyncio.sleep(
        0, json_response({**DOCUMENT, "client_id": f"https://client.example{request.url.path}"})
    )
    fetcher = host.fetcher(cache_size=2, timer=clock)
    try:
        for client_id in [*ids, ids[0]]:
            await fetcher.fetch(client_id)
    finally:
        await fetcher.aclose()
    assert len(host.requests) == 4  # the first was pushed out by the third


# A real HTTPS server on loopback: the network path, end to end.


@pytest.fixture
async def loopback_client(tmp_path: Path) -> AsyncIterator[tuple[str, ssl.SSLContext, list[str]]]:
    """An HTTPS server on 127.0.0.1 serving a metadata document at ``https://localhost:<port>/client.json``:
    (client_id, a TLS context trusting its certificate, the Host headers it received)."""
    cert, key = self_signed_certificate(tmp_path, "localhost")
    hosts: list[str] = []
    client_id = ""

    async def document(request: web.Request) -> web.Response:
        hosts.append(request.headers["Host"])
        return web.json_response(
            {**DOCUMENT, "client_id": client_id}, headers={"Cache-Control": "max-age=600"}
        )

    app = web.Application()
    app.router.add_get("/client.json", document)
    async with tls_site(app, cert, key) as port:
        client_id = f"https://localhost:{port}/client.json"
        yield client_id, ssl.create_default_context(cafile=str(cert)), hosts


async def test_a_real_loopback_server_is_reached_only_when_private_addresses_are_allowed(
    loopback_client: tuple[str, ssl.SSLContext, list[str]],
) -> None:
    client_id, trusting, hosts = loopback_client
    port = client_id.split(":")[2].split("/")[0]

    refusing = ClientMetadataFetcher(transport=httpx.AsyncHTTPTransport(verify=trusting))
    try:
        assert "public addresses only" in await refused(refusing, client_id)
    finally:
        await refusing.aclose()
    assert hosts == []

    allowing = ClientMetadataFetcher(
        allow_private_addresses=True,
        transport=httpx.AsyncHTTPTransport(verify=trusting, limits=httpx.Limits(max_keepalive_connections=0)),
    )
    try:
        metadata = await asyncio.wait_for(allowing.fetch(client_id), 10)
        assert metadata.client_id == client_id
        assert await allowing.fetch(client_id) == metadata  # cached (max-age=600)
    finally:
        await allowing.aclose()
    # Resolved by the system, connected to 127.0.0.1, and the certificate checked for "localhost"
    # (the SNI name): a pinned connection still verifies the host it names.
    assert hosts == [f"localhost:{port}"]


async def test_a_certificate_for_another_name_fails_the_pinned_connection(
    loopback_client: tuple[str, ssl.SSLContext, list[str]],
) -> None:
    client_id, trusting, hosts = loopback_client
    by_ip = client_id.replace("localhost", "127.0.0.1")  # the certificate names localhost only
    fetcher = ClientMetadataFetcher(
        allow_private_addresses=True, transport=httpx.AsyncHTTPTransport(verify=trusting)
    )
    try:
        assert "connection or TLS failure" in await refused(fetcher, by_ip)
    finally:
        await fetcher.aclose()
    assert hosts == []
