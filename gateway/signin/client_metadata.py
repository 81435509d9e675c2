"""Fetching Client ID Metadata Documents: a ``client_id`` that is the https URL of the client's
metadata (MCP's authorization specification, 2025-11-25 and 2026-07-28; the IETF draft "OAuth
Client ID Metadata Document", whose URL and document rules :mod:`gateway.signin.client_documents`
checks).

- The fetch: GET under one deadline for everything (name resolution, connecting, TLS, the
  body), at most ``max_bytes`` read (streamed; the read stops there), status 200 only, no
  redirect followed (a 3xx is an error: the document must be served at the ``client_id``
  itself), ``application/json`` only, uncompressed, no cookies, no proxy.
- Public addresses only (the draft's SSRF considerations): the host is resolved once and
  refused when any of its addresses is not public (:func:`is_public_address`). The connection
  then goes to the checked address: the request's URL names the IP, ``Host`` and TLS SNI name
  the host, and the certificate is verified against the host, so a second DNS answer cannot
  switch it (DNS rebinding). No connection is kept alive, so one opened for a host name never
  serves another that shares its IP.
- Caching: a document is kept ``cache_seconds`` at most, less when its ``Cache-Control:
  max-age`` says so, and at least :data:`MIN_CACHE_SECONDS` (``no-store`` included), so that
  authorization requests cannot make the gateway fetch on every call; a failure is kept
  :data:`NEGATIVE_CACHE_SECONDS`. Concurrent fetches of one URL share one request.

``allow_private_addresses=True`` turns the address check off (the pinning stays). It exists for
tests and local development with a client served on loopback: the gateway exposes it as
``sign_in.allow_loopback_client_metadata``, off by default, and it must stay off in production.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from cachetools import TLRUCache

from gateway import __version__
from gateway.cache import AsyncTTLCache
from gateway.gitlab.http import NoCookies, build_ssl_context
from gateway.signin.client_documents import (
    ClientMetadata,
    ClientMetadataError,
    check_client_id_url,
    is_metadata_client_id,
    parse_client_metadata,
)

__all__ = [
    "NEGATIVE_CACHE_SECONDS",
    "ClientMetadata",
    "ClientMetadataError",
    "ClientMetadataFetcher",
    "Resolver",
    "is_public_address",
]

#: How long a failed fetch is remembered (seconds): a burst of authorization requests naming a
#: broken or hostile URL makes one request, and a fixed document is seen again soon.
NEGATIVE_CACHE_SECONDS = 30
#: Shortest time a good document is kept (seconds), whatever its ``Cache-Control`` says.
MIN_CACHE_SECONDS = 60

#: ``(host, port) -> IP addresses``: how the fetcher resolves host names (tests pass their own).
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


@dataclass(frozen=True)
class _Outcome:
    """One fetch's result as cached: the metadata or the error's message, and for how long."""

    metadata: ClientMetadata | None
    error: str
    ttl: float


def is_public_address(address: str) -> bool:
    """Whether ``address`` (an IP literal) is a public unicast address a fetch may reach.

    Refused: loopback, private (RFC 1918, fc00::/7), shared (100.64/10), link-local, multicast,
    reserved, unspecified and documentation ranges (``ipaddress``'s ``is_global``), and any
    IPv6 address embedding a refused IPv4 one (IPv4-mapped, 6to4, Teredo, NAT64 64:ff9b::/96).
    Anything that is not an IP literal is refused.
    """
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    candidates: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = [ip]
    if isinstance(ip, ipaddress.IPv6Address):
        candidates.extend(a for a in (ip.ipv4_mapped, ip.sixtofour, *(ip.teredo or ())) if a is not None)
        if ip in _NAT64:
            candidates.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return all(c.is_global and not c.is_multicast for c in candidates)


async def _resolve(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _cache_seconds(headers: httpx.Headers, configured: float) -> float:
    """How long to keep a document served with ``headers``: its ``max-age`` within
    [:data:`MIN_CACHE_SECONDS`, ``configured``]; ``configured`` when it gives none."""
    if configured <= 0:
        return 0
    directives: dict[str, str] = {}
    for directive in headers.get_list("cache-control", split_commas=True):
        name, _, value = directive.strip().partition("=")
        directives[name.strip().lower()] = value.strip().strip('"')
    seconds: float = configured
    if "no-store" in directives or "no-cache" in directives:
        seconds = 0
    elif directives.get("max-age", "").isdigit():
        seconds = int(directives["max-age"])
    return max(min(seconds, configured), min(MIN_CACHE_SECONDS, configured))


class ClientMetadataFetcher:
    """Fetches, checks and caches client metadata documents (see the module's docstring).

    Args:
        timeout_seconds: deadline of one fetch, everything included.
        max_bytes: largest document read (the draft suggests 5 KB).
        cache_seconds: longest time a good document is kept (0: not kept).
        cache_size: most URLs remembered (documents and failures), least recently used first out.
        allow_private_addresses: test-only: fetch from loopback and private addresses too
            (``sign_in.allow_loopback_client_metadata``, off by default).
        transport: the httpx transport to send through (tests); by default a direct one that
            keeps no connection alive (one given should not either: a kept connection to an IP
            would serve the next host name on that IP without a new TLS handshake).
        resolver: how host names are resolved (tests); by default the system's resolver.
        timer: the cache's clock (seconds, monotonic); tests pass a fake one.
    """

    def __init__(
        self,
        *,
        timeout_seconds: float = 5.0,
        max_bytes: int = 5120,
        cache_seconds: int = 3600,
        cache_size: int = 1024,
        allow_private_addresses: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
        resolver: Resolver | None = None,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self._timeout = timeout_seconds
        self._max_bytes = max_bytes
        self._cache_seconds = cache_seconds
        self._allow_private = allow_private_addresses
        self._resolve = resolver or _resolve
        self._cache: TLRUCache[str, _Outcome] = TLRUCache(
            maxsize=max(cache_size, 1), ttu=lambda _key, outcome, now: now + outcome.ttl, timer=timer
        )
        # Only for its single-flight: ttl=0 stores nothing (the TLRU cache above keeps results,
        # each with its own lifetime). The key is the public URL: the data is the same for everyone.
        self._flights: AsyncTTLCache[_Outcome] = AsyncTTLCache("client_metadata", maxsize=1, ttl=0)
        if transport is None:
            transport = httpx.AsyncHTTPTransport(
                verify=build_ssl_context(None), retries=0, limits=httpx.Limits(max_keepalive_connections=0)
            )
        self._client = httpx.AsyncClient(
            transport=transport,
            timeout=httpx.Timeout(timeout_seconds),
            follow_redirects=False,
            trust_env=False,  # no proxy: the address checked must be the address reached
            cookies=NoCookies(),
            headers={
                "Accept": "application/json",
                "Accept-Encoding": "identity",
                "User-Agent": f"gitlab-mcp-gateway/{__version__}",
            },
        )

    @staticmethod
    def is_metadata_client_id(client_id: str) -> bool:
        """Whether ``client_id`` names a metadata document (https, a host, a path but ``/``)."""
        return is_metadata_client_id(client_id)

    async def fetch(self, client_id: str) -> ClientMetadata:
        """The checked metadata of the client whose id is the URL ``client_id``.

        From the cache when fetched recently (a failure too, for :data:`NEGATIVE_CACHE_SECONDS`);
        concurrent calls for one URL share one fetch.

        Raises:
            ClientMetadataError: the URL, its address, the answer or the document breaks a rule;
                the message says which.
        """
        outcome = self._cache.get(client_id)
        if outcome is None:
            check_client_id_url(client_id)
            try:
                url = httpx.URL(client_id)
            except httpx.InvalidURL:
                raise ClientMetadataError("the client_id URL is not a well-formed URL") from None
            outcome = await self._flights.get_or_load(client_id, lambda: self._load(client_id, url))
        if outcome.metadata is None:
            raise ClientMetadataError(outcome.error)
        return outcome.metadata

    async def aclose(self) -> None:
        """Close the HTTP client (and the transport it was given)."""
        await self._client.aclose()

    async def _load(self, client_id: str, url: httpx.URL) -> _Outcome:
        try:
            async with asyncio.timeout(self._timeout):
                headers, body = await self._download(url)
            outcome = _Outcome(
                parse_client_metadata(client_id, body), "", _cache_seconds(headers, self._cache_seconds)
            )
        except ClientMetadataError as exc:
            outcome = _Outcome(None, str(exc), NEGATIVE_CACHE_SECONDS)
        except TimeoutError:
            outcome = _Outcome(None, self._late, NEGATIVE_CACHE_SECONDS)
        self._cache[client_id] = outcome
        return outcome

    @property
    def _late(self) -> str:
        return f"the client metadata document did not arrive within {self._timeout:g} seconds"

    async def _download(self, url: httpx.URL) -> tuple[httpx.Headers, bytes]:
        """Resolve ``url``'s host once, check its addresses, and GET the document from the
        first one that accepts a connection."""
        host = url.raw_host.decode("ascii")
        try:
            addresses = await self._resolve(host, url.port or 443)
        except OSError:
            addresses = []
        if not addresses:
            raise ClientMetadataError("the host of the client_id URL does not resolve to an address")
        if not self._allow_private and not all(is_public_address(a) for a in addresses):
            raise ClientMetadataError(
                "the host of the client_id URL resolves to a loopback, private, link-local or other "
                "non-public address: client metadata documents are fetched from public addresses only"
            )
        for address in addresses:
            try:
                return await self._get(url, host, address)
            except httpx.ConnectError:
                continue  # the next address (IPv6 unreachable, one server down...)
            except httpx.TimeoutException:
                raise ClientMetadataError(self._late) from None
            except (httpx.HTTPError, httpx.InvalidURL) as exc:
                raise ClientMetadataError(
                    f"the client metadata document could not be fetched ({type(exc).__name__})"
                ) from None
        raise ClientMetadataError(
            "could not connect to the host of the client_id URL over https (connection or TLS failure)"
        )

    async def _get(self, url: httpx.URL, host: str, address: str) -> tuple[httpx.Headers, bytes]:
        """GET ``url`` from ``address``: the URL names the IP, ``Host`` and SNI the host name."""
        try:
            ipaddress.ip_address(host)
            extensions: dict[str, Any] = {}  # an IP literal: no SNI
        except ValueError:
            extensions = {"sni_hostname": host}
        request = self._client.build_request(
            "GET",
            url.copy_with(host=address),
            headers={"Host": url.netloc.decode("ascii")},
            extensions=extensions,
        )
        response = await self._client.send(request, stream=True)
        try:
            status = response.status_code
            if 300 <= status < 400:
                raise ClientMetadataError(
                    f"the client_id URL answered with a redirect (HTTP {status}), which is not followed: "
                    "serve the client metadata document at the client_id URL itself"
                )
            if status in (401, 403, 429, 503):
                # claude.ai's document, for one, sits behind a bot challenge some networks get.
                raise ClientMetadataError(
                    f"the client_id URL answered HTTP {status}, not 200: its host refused the gateway "
                    "(a bot challenge?); an operator can pre-register this client_id with its redirect URIs"
                )
            if status != 200:
                raise ClientMetadataError(f"the client_id URL answered HTTP {status}, not 200")
            media_type = response.headers.get("content-type", "").partition(";")[0].strip().lower()
            if media_type != "application/json" and not media_type.endswith("+json"):
                raise ClientMetadataError("the client metadata document must be served as application/json")
            if response.headers.get("content-encoding", "identity").strip().lower() != "identity":
                raise ClientMetadataError("the client metadata document must be served uncompressed")
            too_large = f"the client metadata document is larger than {self._max_bytes} bytes"
            length = response.headers.get("content-length", "")
            if length.isdigit() and int(length) > self._max_bytes:
                raise ClientMetadataError(too_large)
            body = bytearray()
            async for chunk in response.aiter_bytes():  # identity: as read
                body += chunk
                if len(body) > self._max_bytes:
                    raise ClientMetadataError(too_large)
            return response.headers, bytes(body)
        finally:
            await response.aclose()
