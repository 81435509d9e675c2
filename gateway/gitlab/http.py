"""Building the shared HTTP client: TLS, proxies from the environment, timeouts, no redirects,
no cookies, on aiohttp's connection pool (:mod:`gateway.gitlab.transport`).

- TLS verification is always on, against the system store plus certifi's, plus
  ``gitlab.ca_bundle`` (a private CA).
- Proxies come from ``HTTPS_PROXY`` / ``HTTP_PROXY`` / ``ALL_PROXY`` (upper or lower case) and
  ``NO_PROXY``, read once at start for the configured GitLab's host, as curl and httpx read them.
- Redirects are not followed: GitLab's API never redirects, so a redirect means a wrong
  ``GITLAB_URL`` or a login page, and following it could carry the token elsewhere.
- No cookie is kept (see :class:`NoCookies`).
"""

from __future__ import annotations

import http.cookiejar
import ssl
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import certifi
import httpx

from gateway.config import GitLabSettings
from gateway.gitlab.transport import AiohttpTransport

#: Most connections open to GitLab at once; more concurrent requests wait for a free one.
MAX_CONNECTIONS = 100


class NoCookies(http.cookiejar.CookieJar):
    """A cookie jar that keeps nothing: one HTTP client serves every caller, so a cookie set for
    one caller's token (a session, a load balancer's affinity) must never ride along with the
    next caller's requests. GitLab's API authenticates by header, not by cookie."""

    def set_cookie(self, cookie: http.cookiejar.Cookie) -> None:
        return None

    def extract_cookies(self, response: Any, request: Any) -> None:
        return None


def build_ssl_context(ca_bundle: Path | None) -> ssl.SSLContext:
    """A verifying TLS context: the system store (``SSL_CERT_FILE``/``SSL_CERT_DIR`` honoured),
    certifi's bundle, and ``ca_bundle`` when given.

    Raises:
        ValueError: ``ca_bundle`` is missing or holds no usable PEM certificate.
    """
    context = ssl.create_default_context()
    context.load_verify_locations(cafile=certifi.where())
    if ca_bundle is not None:
        try:
            context.load_verify_locations(cafile=str(ca_bundle))
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(
                f"gitlab.ca_bundle {str(ca_bundle)!r} cannot be used ({exc}); give a readable PEM file of CA "
                "certificates."
            ) from None
    return context


def proxy_for(url: str) -> str | None:
    """The proxy URL the environment sets for requests to ``url``, or None (direct).

    ``<scheme>_PROXY`` wins over ``ALL_PROXY``, lower-case names over upper-case ones, and
    ``NO_PROXY`` (host names, domain suffixes, ``host:port``, ``*``) turns the proxy off: the
    standard library's reading of these variables, as curl's.

    Raises:
        ValueError: the proxy is not an ``http://`` or ``https://`` URL (SOCKS is not supported).
    """
    proxies = urllib.request.getproxies_environment()
    parts = urlsplit(url)
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy:
        return None
    host = parts.hostname or ""
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]  # not in typeshed
    if bypass(f"{host}:{parts.port}" if parts.port else host, proxies):
        return None
    if urlsplit(proxy).scheme not in ("http", "https"):
        raise ValueError(
            f"the proxy for {parts.scheme} requests ({urlsplit(proxy).scheme}:// from the environment) is "
            "not supported: give an http:// or https:// proxy in HTTPS_PROXY / HTTP_PROXY, or unset it."
        )
    return proxy


def build_transport(settings: GitLabSettings) -> AiohttpTransport:
    """aiohttp's pool for the configured GitLab: TLS on (plus ``ca_bundle``), the environment's
    proxy, no redirects, no cookies.

    Raises:
        ValueError: see :func:`build_ssl_context` and :func:`proxy_for`.
    """
    return AiohttpTransport(
        ssl_context=build_ssl_context(settings.ca_bundle),
        proxy=proxy_for(settings.url),
        max_connections=MAX_CONNECTIONS,
    )


def build_http_client(
    settings: GitLabSettings, transport: AiohttpTransport | None = None
) -> httpx.AsyncClient:
    """The shared ``httpx.AsyncClient`` over aiohttp's pool: TLS on (plus ``ca_bundle``), the
    environment's proxy, timeouts, no redirects, no cookies.

    ``transport``: the pool to send over (the GitLab client shares its own); a new one by default.

    ``timeout_seconds`` bounds every socket read and, through the GitLab client's deadline, the
    whole request; ``connect_timeout_seconds`` bounds connecting and waiting for a pooled
    connection.

    Raises:
        ValueError: see :func:`build_ssl_context` and :func:`proxy_for`.
    """
    return httpx.AsyncClient(
        transport=transport or build_transport(settings),
        timeout=httpx.Timeout(settings.timeout_seconds, connect=settings.connect_timeout_seconds),
        follow_redirects=False,
        cookies=NoCookies(),
        # The environment was read for the transport's proxy above; httpx ignores it with a
        # transport of its own anyway.
        trust_env=False,
    )
