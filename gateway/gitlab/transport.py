"""An ``httpx`` transport on aiohttp's client connection pool.

The gateway keeps ``httpx.AsyncClient`` as its client API (the unit tests mock GitLab with
respx), but httpcore's pool costs more CPU per request than the rest of a call under
concurrency (it scans every pooled connection on every request). aiohttp already serves
``/mcp``; its ``TCPConnector`` pool carries the GitLab requests here.

Why not the ``httpx-aiohttp`` package's transport: it maps every
``aiohttp.ClientConnectionError`` to ``httpx.ConnectTimeout``, including a connection the
server closed *after* it read the request, and the GitLab client resends a mutation on a
connect timeout because that proves nothing was sent. This transport maps each aiohttp error
to the httpx error that says what is known about the request:

- nothing was sent: ``ClientConnectorError`` (refused, DNS, TLS verification, proxy
  unreachable), a proxy refusing the tunnel, a connect timeout (which covers waiting for a free
  pooled connection) → ``httpx.ConnectError`` / ``httpx.ConnectTimeout``;
- the request may have been sent: a dropped or reset connection, a read timeout, a body cut
  short, a malformed answer → ``httpx.RemoteProtocolError``, ``httpx.ReadError``,
  ``httpx.ReadTimeout``.

The whole exchange, the response body included, runs under one deadline: the request's
``"deadline"`` extension (``loop.time()`` seconds). A body trickled a byte at a time therefore
cannot hold a call past it, which per-read timeouts alone cannot promise.

The body is read whole before the response is returned, so a failure while reading it is
classified here, and the pooled connection is released at once. It is read up to
:data:`MAX_ANSWER_BYTES` (decoded): a GitLab, or a proxy in front of it, that sends more cannot
fill the gateway's memory (:class:`AnswerTooLarge`). The one exception is a job log, which may be
far larger and is read as it arrives (:meth:`AiohttpTransport.open`, see
:mod:`gateway.gitlab.streaming`): its reader keeps a bounded part and stops when it has enough.
Redirects are never followed and no cookie is kept; proxies are resolved once, at start.
"""

from __future__ import annotations

import asyncio
import base64
import io
import ssl
from collections.abc import Mapping
from typing import Any

import aiohttp
import httpx
from multidict import CIMultiDictProxy
from yarl import URL

from gateway.gitlab.json_budget import AnswerTooComplex, ArrivingBudget

#: How long an idle pooled connection is kept. Below the usual keep-alive of GitLab's front
#: (NGINX: 65 s) so that a mutation rarely meets a connection the server is closing.
KEEPALIVE_SECONDS = 15.0
#: The most body bytes read from one answer, after Content-Encoding is decoded. GitLab's largest
#: answers are file contents, cut at 10 MiB (``MAX_DATA_DISPLAY_SIZE``); JSON-escaped, every
#: ``<``, ``>``, ``&`` or control character costs 6 bytes, so 64 MiB holds any of them.
MAX_ANSWER_BYTES = 64 * 1024 * 1024
#: The cap on a GraphQL answer. The largest honest one is a repository file's text (GitLab sends at
#: most 10 MiB of it), JSON-escaped; decoding holds the bytes and the text at once, so a hostile
#: answer of one huge string at 64 MiB would take the gateway past 256 MiB (``python -m bench
#: attacks``, row gzip_string).
MAX_GRAPHQL_ANSWER_BYTES = 24 * 1024 * 1024


class AnswerTooLarge(httpx.TransportError):
    """GitLab's answer ran past :data:`MAX_ANSWER_BYTES`; the rest of it was not read.

    The request itself reached GitLab (a mutation may have run).
    """


class AiohttpTransport(httpx.AsyncBaseTransport):
    """``httpx`` requests sent over one ``aiohttp.ClientSession`` (created on first use, inside
    the running event loop).

    Args:
        ssl_context: the verifying TLS context for ``https`` GitLabs.
        proxy: the proxy URL for every request (None: direct), see
            :func:`gateway.gitlab.http.proxy_for`.
        max_connections: the pool's bound; requests above it wait for a free connection (inside
            their connect timeout).
    """

    def __init__(
        self, *, ssl_context: ssl.SSLContext, proxy: str | None = None, max_connections: int = 100
    ) -> None:
        self._ssl = ssl_context
        self._proxy: URL | None = None
        self._proxy_headers: dict[str, str] | None = None
        if proxy is not None:
            # aiohttp never sends the credentials of a proxy URL's userinfo by itself.
            url = URL(proxy)
            if url.user is not None:
                pair = f"{url.user}:{url.password or ''}".encode()
                self._proxy_headers = {"Proxy-Authorization": f"Basic {base64.b64encode(pair).decode()}"}
            self._proxy = url.with_user(None)
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    ssl=self._ssl, limit=self._max_connections, keepalive_timeout=KEEPALIVE_SECONDS
                ),
                # One pool serves every caller: a cookie set for one caller's token (a session, a
                # load balancer's affinity) must never ride along with the next caller's request.
                cookie_jar=aiohttp.DummyCookieJar(),
                # Each request says whether aiohttp decodes Content-Encoding: not for httpx,
                # which decodes it itself (it set Accept-Encoding).
                auto_decompress=False,
                # Proxies were resolved at start (trust_env would re-read the environment and
                # ~/.netrc on every request).
                trust_env=False,
            )
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        status, reason, headers, content = await self.exchange(
            request.method,
            str(request.url),
            self._headers(request),
            request.content or None,
            timeouts=request.extensions.get("timeout", {}),
            deadline=request.extensions.get("deadline"),
            request=request,
            decompress=False,  # httpx decodes Content-Encoding itself (it set Accept-Encoding)
        )
        extensions: dict[str, Any] = {"http_version": b"HTTP/1.1"}
        if reason:
            extensions["reason_phrase"] = reason.encode("latin-1", "replace")
        return httpx.Response(
            status_code=status,
            headers=list(headers.items()),
            content=content,
            request=request,
            extensions=extensions,
        )

    async def exchange(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str] | list[tuple[str, str]],
        body: bytes | None,
        *,
        timeouts: Mapping[str, float | None],
        deadline: float | None,
        request: httpx.Request | None = None,
        decompress: bool = True,
        max_bytes: int | None = None,
    ) -> tuple[int, str | None, CIMultiDictProxy[str], bytes]:
        """One request over the pool, its body read whole: status, reason, headers, body.

        The GitLab client sends through here directly (building an ``httpx.Request`` and
        ``httpx.Response`` per call cost more CPU than the rest of the GitLab request); failures
        are raised as the httpx errors :func:`_map_error` chooses, on either path.

        Args:
            timeouts: httpx's ``pool``/``connect``/``read`` timeouts, seconds.
            deadline: ``loop.time()`` by which the whole exchange is over, body included.
            max_bytes: the most body bytes read, decoded (None: :data:`MAX_ANSWER_BYTES`).
        """
        timeout = _client_timeout(timeouts, deadline)
        if self._proxy_headers and url.startswith("http:"):
            # A plain-HTTP request goes to the proxy whole (no CONNECT tunnel carries them).
            headers = [*(headers.items() if isinstance(headers, Mapping) else headers)]
            headers.extend(self._proxy_headers.items())
        try:
            async with self._client().request(
                method,
                url,
                headers=headers,
                data=body,
                allow_redirects=False,
                timeout=timeout,
                proxy=self._proxy,
                proxy_headers=self._proxy_headers,
                auto_decompress=decompress,
            ) as response:
                content = await _read_capped(response, request, max_bytes or MAX_ANSWER_BYTES)
        except AnswerTooLarge:
            raise
        except Exception as exc:
            mapped = _map_error(exc, request)
            if mapped is None:
                raise
            raise mapped from exc
        return response.status, response.reason, response.headers, content

    async def open(
        self,
        url: str,
        headers: Mapping[str, str],
        *,
        timeouts: Mapping[str, float | None],
        deadline: float,
    ) -> aiohttp.ClientResponse:
        """A GET whose body is left unread, for the caller to read as it arrives and then
        ``close()`` (or ``release()``). Failures are mapped as in :meth:`exchange`.

        Args:
            deadline: ``loop.time()`` by which the whole exchange, body included, is over.
        """
        timeout = _client_timeout(timeouts, deadline)
        request_headers: list[tuple[str, str]] = list(headers.items())
        if self._proxy_headers and url.startswith("http:"):
            request_headers.extend(self._proxy_headers.items())
        try:
            return await self._client().request(
                "GET",
                url,
                headers=request_headers,
                allow_redirects=False,
                timeout=timeout,
                proxy=self._proxy,
                proxy_headers=self._proxy_headers,
                auto_decompress=True,  # the reader sees the log's own bytes
            )
        except Exception as exc:
            mapped = _map_error(exc, None)
            if mapped is None:
                raise
            raise mapped from exc

    @staticmethod
    def _headers(request: httpx.Request) -> list[tuple[str, str]]:
        return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def too_large(max_bytes: int) -> str:
    """What :class:`AnswerTooLarge` says of a bound of ``max_bytes``."""
    return f"its answer was larger than {max_bytes / (1024 * 1024):g} MiB"


async def _read_capped(
    response: aiohttp.ClientResponse, request: httpx.Request | None, max_bytes: int
) -> bytes:
    """The whole body, or :class:`AnswerTooLarge` (and the connection closed, not pooled): past
    ``max_bytes``, or a JSON answer past the JSON budget (:class:`ArrivingBudget`) as it arrives.

    Held once: ``BytesIO.getvalue()`` hands over its buffer rather than copying it, so a body
    near the bound costs the bound, not twice it."""
    body = io.BytesIO()
    budget = ArrivingBudget() if "json" in response.headers.get("Content-Type", "") else None
    async for chunk in response.content.iter_any():
        body.write(chunk)
        if body.tell() > max_bytes:
            response.close()
            raise AnswerTooLarge(too_large(max_bytes), request=request)
        if budget is not None:
            try:
                budget.feed(chunk)
            except AnswerTooComplex as err:
                response.close()
                raise AnswerTooLarge(f"its answer held {err}", request=request) from None
    return body.getvalue()


def map_error(exc: BaseException, request: httpx.Request | None) -> httpx.TransportError | None:
    """The httpx error for an aiohttp failure (None: not a transport failure)."""
    return _map_error(exc, request)


def _map_error(exc: BaseException, request: httpx.Request | None) -> httpx.TransportError | None:
    """The httpx error that says as much as is known about whether ``request`` was sent."""
    message = f"{type(exc).__name__}: {exc}"
    # Nothing was sent: the connection (or the proxy's tunnel) was never established.
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(message, request=request)
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ClientHttpProxyError):
        return httpx.ConnectError(message, request=request)
    if isinstance(exc, aiohttp.InvalidURL):
        return httpx.UnsupportedProtocol(message, request=request)
    # The request may have been sent, in part or whole.
    if isinstance(exc, aiohttp.SocketTimeoutError | asyncio.TimeoutError):
        # A read went quiet too long, or the deadline over the whole exchange passed.
        return httpx.ReadTimeout(message, request=request)
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientResponseError):
        return httpx.RemoteProtocolError(message, request=request)
    if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ClientConnectionError | OSError):
        return httpx.ReadError(message, request=request)
    if isinstance(exc, aiohttp.ClientError):
        return httpx.TransportError(message, request=request)
    return None


def _client_timeout(timeouts: Mapping[str, float | None], deadline: float | None) -> aiohttp.ClientTimeout:
    """httpx's ``pool``/``connect``/``read`` timeouts in aiohttp's terms, with the whole exchange
    over by ``deadline`` (``loop.time()``)."""
    total = None
    if deadline is not None:
        # aiohttp reads a total of 0 as "no limit": a deadline already passed gets a moment.
        total = max(0.001, deadline - asyncio.get_running_loop().time())
    return aiohttp.ClientTimeout(
        total=total,
        connect=timeouts.get("pool"),
        sock_connect=timeouts.get("connect"),
        sock_read=timeouts.get("read"),
    )
