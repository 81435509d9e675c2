"""The GitLab client: one shared ``httpx.AsyncClient`` for GraphQL and REST.

- GraphQL documents live in ``gateway/gitlab/operations/<name>.graphql`` (validated against
  GitLab's published schema by ``tests/unit/test_graphql_operations.py``) and are sent by file
  stem with :meth:`GitLabSession.graphql`, as ``{"query", "operationName", "variables"}``.
- REST is for what GraphQL cannot serve (tag names, for example); routes are given as templates
  (``/projects/{id}/repository/tags``) so logs and metrics never carry a raw path, and every path
  parameter must already be one encoded segment (:func:`gateway.gitlab.urls.encode_project`).
- Retries (tenacity): reads (GraphQL queries, GET/HEAD) on connection errors, timeouts, 429,
  502, 503 and 504, with jittered exponential backoff that honours ``Retry-After`` (seconds or an
  HTTP date, RFC 9110 §10.2.3; else GitLab's ``RateLimit-Reset``), inside a deadline, sleeping with
  ``asyncio.sleep`` (never blocking the loop). A ``Retry-After`` longer than
  ``gitlab.max_retry_after_seconds`` is not waited for: the caller gets ``rate_limited`` with
  ``retry_after_seconds`` at once. A mutation is retried only when the request provably never
  reached GitLab (connect error, connect or pool timeout, 429); any later failure is
  :class:`GitLabMaybeSent`. Source: ``shared/spec/design.md`` standing rules;
  ``shared/spec/stack_notes.md`` §3.
- python-gitlab's own clients stay off the request path: its sync REST client blocks and its
  ``AsyncGraphQL`` retries with ``time.sleep`` and cannot tell queries from mutations
  (``shared/spec/stack_notes.md`` §1.3); only ``gitlab.utils.EncodedId`` is used.
- TLS verification is always on, against the system store plus certifi's, plus
  ``gitlab.ca_bundle`` (a private CA). Proxies come from ``HTTPS_PROXY`` / ``HTTP_PROXY`` /
  ``ALL_PROXY`` / ``NO_PROXY`` (httpx ``trust_env``). Redirects are not followed: GitLab's API never
  redirects, so a redirect means a wrong ``GITLAB_URL`` or a login page, and following it could
  carry the token elsewhere.
- Each request carries ``X-Request-Id`` (the gateway's request id), returned in errors.
"""

from __future__ import annotations

import asyncio
import email.utils
import http.cookiejar
import json
import logging
import math
import random
import re
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC
from functools import cache
from pathlib import Path
from typing import Any

import certifi
import httpx
from gitlab.utils import EncodedId
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    stop_before_delay,
)
from tenacity.wait import wait_exponential_jitter

from gateway import __version__
from gateway.config import GitLabSettings
from gateway.gitlab.credentials import Credential
from gateway.gitlab.errors import (
    GitLabBadRequest,
    GitLabConflict,
    GitLabError,
    GitLabMaybeSent,
    GitLabNotFound,
    GitLabRateLimited,
    GitLabUnauthorized,
    GitLabUpstreamError,
)
from gateway.gitlab.urls import GitLabBase, normalize_base_url
from gateway.observability.metrics import Metrics

log = logging.getLogger("gateway.gitlab")

OPERATIONS_DIR = Path(__file__).parent / "operations"
#: Statuses worth another try for a read (``shared/spec/design.md`` standing rules).
RETRY_STATUSES = frozenset({429, 502, 503, 504})
#: Failures that prove the request never left the gateway, so even a mutation may be resent.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
#: GitLab's wording when a GraphQL resource is missing or not visible to the caller.
_GRAPHQL_NOT_FOUND = ("does not exist or you don't have permission", "not found")
_OPERATION_NAME = re.compile(r"^\s*(?:query|mutation|subscription)\s+([_A-Za-z][_0-9A-Za-z]*)", re.MULTILINE)
#: One encoded path segment: RFC 3986 ``pchar`` without ``/``, and no dot segment.
_SEGMENT = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:@%]+")

_BACKOFF = wait_exponential_jitter(multiplier=0.5, max=8, jitter=0.5)
#: Extra wait on top of ``Retry-After`` (seconds, up to), so callers rate limited together do
#: not all come back in the same instant.
RETRY_AFTER_JITTER = 0.25
#: ``retry_after_seconds`` told to a caller when GitLab's 429 named no wait (GitLab's throttles
#: count requests per 60-second period; GitLab docs "Rate limits").
DEFAULT_RATE_LIMIT_WAIT = 60

SleepFn = Callable[[float], Awaitable[None]]


@cache
def load_operation(name: str) -> str:
    """The text of ``operations/<name>.graphql``.

    Raises:
        FileNotFoundError: no such operation file.
    """
    return (OPERATIONS_DIR / f"{name}.graphql").read_text(encoding="utf-8")


@cache
def operation_name(name: str) -> str | None:
    """The operation name declared in ``operations/<name>.graphql`` (sent as ``operationName``)."""
    names = _OPERATION_NAME.findall(load_operation(name))
    return names[0] if len(names) == 1 else None


@cache
def _graphql_body_prefix(name: str) -> bytes:
    """``{"query": ..., "operationName": ..., "variables":`` encoded once per operation: the
    document is the bulk of every request body and never changes."""
    head: dict[str, Any] = {"query": load_operation(name)}
    if operation_name(name) is not None:
        head["operationName"] = operation_name(name)
    return _dumps(head)[:-1] + b',"variables":'


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


class _NoCookies(http.cookiejar.CookieJar):
    """A cookie jar that keeps nothing: one HTTP client serves every caller, so a cookie set for
    one caller's token (a session, a load balancer's affinity) must never ride along with the
    next caller's requests. GitLab's API authenticates by header, not by cookie."""

    def set_cookie(self, cookie: http.cookiejar.Cookie) -> None:
        return None

    def extract_cookies(self, response: Any, request: Any) -> None:
        return None


class _Transient(Exception):
    """A failure worth another try, with what to raise when tries run out.

    ``retry_after`` is GitLab's requested wait in seconds (None: use the backoff).
    """

    def __init__(self, final: GitLabError, *, retry_after: float | None = None) -> None:
        super().__init__(final.message)
        self.final = final
        self.retry_after = retry_after


class _Call:
    """One logical request (all its attempts share it)."""

    __slots__ = (
        "content",
        "credential",
        "graphql",
        "idempotent",
        "json",
        "method",
        "operation",
        "params",
        "request_id",
        "url",
    )

    def __init__(
        self,
        method: str,
        url: str,
        operation: str,
        *,
        idempotent: bool,
        credential: Credential,
        request_id: str | None,
        graphql: bool = False,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        content: bytes | None = None,
    ) -> None:
        self.method = method
        self.url = url
        self.operation = operation
        self.idempotent = idempotent
        self.credential = credential
        self.request_id = request_id
        self.graphql = graphql
        self.params = params
        self.json = json
        self.content = content


class GitLabClient:
    """Talks to one GitLab. Build one per app; call :meth:`session` per tool call.

    Args:
        settings: the ``[gitlab]`` configuration.
        metrics: where request counts, latencies and retries are recorded.
        http: an ``httpx.AsyncClient`` to use (tests); by default one is built from ``settings``.
        sleep: how to wait between retries, ``await sleep(seconds)`` (tests pass a fake).

    Raises:
        ValueError: ``settings.url`` is not a usable GitLab URL, or ``ca_bundle`` cannot be read.
    """

    def __init__(
        self,
        settings: GitLabSettings,
        *,
        metrics: Metrics | None = None,
        http: httpx.AsyncClient | None = None,
        sleep: SleepFn = asyncio.sleep,
    ) -> None:
        self.settings = settings
        self.base: GitLabBase = normalize_base_url(settings.url)
        self.metrics = metrics
        self._sleep = sleep
        self._own_http = http is None
        self.http = http if http is not None else build_http_client(settings)
        self._static_headers = {
            "User-Agent": f"gitlab-mcp-gateway/{__version__}",
            "Accept": "application/json",
        }
        self._json_headers = {**self._static_headers, "Content-Type": "application/json"}

    async def aclose(self) -> None:
        """Close the shared HTTP client (when the gateway built it)."""
        if self._own_http:
            await self.http.aclose()

    def session(self, credential: Credential, *, request_id: str | None = None) -> GitLabSession:
        """A view of this client bound to one caller's credential and request id."""
        return GitLabSession(self, credential, request_id)

    def web_url(self, path: str) -> str:
        """Absolute web URL of a GitLab ``path``/``webPath`` field (see :meth:`GitLabBase.web_url`)."""
        return self.base.web_url(path)

    # -- requests ---------------------------------------------------------------------------

    async def graphql(
        self,
        operation: str,
        variables: Mapping[str, Any],
        *,
        credential: Credential,
        request_id: str | None = None,
        mutation: bool = False,
    ) -> dict[str, Any]:
        """Send the named GraphQL operation; return its ``data``.

        Args:
            operation: file stem in ``operations/`` (also the metrics label).
            variables: the operation's variables (None values are dropped, so GraphQL sees them
                as not given).
            mutation: True for a mutation: never retried once it may have reached GitLab.

        Returns:
            the response's ``data`` object.

        Raises:
            GitLabUnauthorized: 401/403.
            GitLabRateLimited: 429 past the retry budget (``retry_after_seconds``).
            GitLabUpstreamError: 5xx, timeouts, connection failures, redirects, HTML or non-JSON
                answers, a 404 from the endpoint itself (a wrong ``GITLAB_URL``).
            GitLabMaybeSent: a mutation failed after it may have reached GitLab, including a
                mutation answered with ``errors`` and non-null ``data`` (it ran, and failed part
                way) or with a success status and a body that is not a JSON object.
            GitLabNotFound: GraphQL said the resource does not exist or is not visible, or
                answered no data.
            GitLabBadRequest: other GraphQL ``errors`` (for a mutation: with null ``data``, so
                GitLab refused it before running it).
        """
        body = (
            _graphql_body_prefix(operation)
            + _dumps({k: v for k, v in variables.items() if v is not None})
            + b"}"
        )
        call = _Call(
            "POST",
            self.base.graphql_url,
            operation,
            idempotent=not mutation,
            credential=credential,
            request_id=request_id,
            graphql=True,
            content=body,
        )
        payload = await self._request_json(call)
        if not isinstance(payload, dict):
            if mutation:
                raise self._maybe_sent(call, "GitLab answered something other than a JSON object")
            raise GitLabUpstreamError(
                "GitLab's GraphQL endpoint answered something other than a JSON object.",
                request_id=request_id,
            )
        errors = payload.get("errors") or []
        data = payload.get("data")
        if errors:
            messages = "; ".join(str(e.get("message", e)) if isinstance(e, dict) else str(e) for e in errors)
            lowered = messages.lower()
            if any(marker in lowered for marker in _GRAPHQL_NOT_FOUND):
                # GitLab authorizes (and finds) the object before a mutation changes anything.
                raise GitLabNotFound(f"GitLab: {messages}", request_id=request_id)
            if mutation and data is not None:
                # Data means execution started (GraphQL spec, "Response Format": no data when the
                # request failed before execution; GitLab's mutation fields are nullable): an
                # error raised while the mutation ran may come after part of the change was made.
                raise self._maybe_sent(call, f"GitLab answered with errors: {messages}")
            raise GitLabBadRequest(f"GitLab rejected the request: {messages}", request_id=request_id)
        if not isinstance(data, dict):
            raise GitLabNotFound("GitLab returned no data for this request.", request_id=request_id)
        return data

    async def rest(
        self,
        method: str,
        route: str,
        *,
        credential: Credential,
        path_params: Mapping[str, str | int] | None = None,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        request_id: str | None = None,
        idempotent: bool | None = None,
    ) -> Any:
        """Call a REST route (relative to ``/api/v4``) and return its decoded JSON.

        Args:
            route: a template such as ``/projects/{id}/repository/tags`` (the metrics label).
            path_params: values for the template, each already one encoded segment (integers,
                ``gitlab.utils.EncodedId``, or the result of
                :func:`gateway.gitlab.urls.encode_project`, or ``urllib.parse.quote(x, safe="")``).
            idempotent: defaults to True for GET/HEAD, False otherwise.

        Raises:
            ValueError: a path parameter is not one encoded segment (a programming error: the
                value would change the route).
            the same typed errors as :meth:`graphql`, and :class:`GitLabNotFound` for a 404
            with GitLab's JSON body.
        """
        method = method.upper()
        path = route.format(**{k: _segment(k, v) for k, v in (path_params or {}).items()})
        call = _Call(
            method,
            self.base.api_url + path,
            f"{method} {route}",
            idempotent=method in ("GET", "HEAD") if idempotent is None else idempotent,
            credential=credential,
            request_id=request_id,
            params=params,
            json=json,
        )
        return await self._request_json(call)

    async def _request_json(self, call: _Call) -> Any:
        response = await self._with_retries(call)
        try:
            return response.json()
        except ValueError:
            if not call.idempotent:  # a success status: the change may well have been made
                raise self._maybe_sent(
                    call, f"status {response.status_code} with a body that is not JSON"
                ) from None
            raise GitLabUpstreamError(
                f"GitLab answered {call.operation} with status {response.status_code} and a body that is "
                f"not JSON (Content-Type {response.headers.get('content-type', 'missing')!r}). Check "
                "GITLAB_URL and any proxy between the gateway and GitLab.",
                status=response.status_code,
                request_id=call.request_id,
            ) from None
        finally:
            # httpx links a response and its stream both ways; that cycle would keep the body (up
            # to 10 MiB for a repository file) alive until the garbage collector next runs.
            response.stream = httpx.ByteStream(b"")

    async def _with_retries(self, call: _Call) -> httpx.Response:
        # Most calls succeed at once; tenacity (~35 µs per call) only starts when the first
        # attempt asks for another, and then replays that first failure as its attempt 1.
        started = time.monotonic()
        try:
            return await self._send_once(call)
        except _Transient as exc:
            pending: _Transient | None = exc
        s = self.settings

        def wait(state: RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome else None
            if isinstance(exc, _Transient) and exc.retry_after is not None:
                # Never earlier than GitLab asked; a little later so throttled callers spread out.
                return exc.retry_after + random.uniform(0, RETRY_AFTER_JITTER)  # noqa: S311 - not security
            return float(_BACKOFF(state))

        async def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            if self.metrics is not None:
                self.metrics.gitlab_retries.labels(call.operation).inc()
                if isinstance(exc, _Transient) and exc.retry_after is not None:
                    self.metrics.gitlab_rate_limit_wait.inc(exc.retry_after)
            log.info(
                "retrying GitLab request",
                extra={
                    "operation": call.operation,
                    "attempt": state.attempt_number,
                    "request_id": call.request_id,
                    "reason": exc.final.message if isinstance(exc, _Transient) else None,
                    "wait_seconds": round(state.upcoming_sleep, 3),
                },
            )

        retrying = AsyncRetrying(
            sleep=self._sleep,
            # stop_before_delay gives up *before* a wait that would cross the deadline, so a long
            # Retry-After fails fast with rate_limited instead of holding the caller.
            stop=stop_after_attempt(s.retry_attempts)
            | stop_before_delay(s.retry_deadline_seconds - (time.monotonic() - started)),
            wait=wait,
            retry=retry_if_exception_type(_Transient),
            before_sleep=before_sleep,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    if pending is not None:
                        replay, pending = pending, None
                        raise replay
                    return await self._send_once(call)
        except _Transient as exc:
            raise exc.final from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _send_once(self, call: _Call) -> httpx.Response:
        base = self._json_headers if call.content is not None else self._static_headers
        headers = {**base, **call.credential.headers()}
        if call.request_id:
            headers["X-Request-Id"] = call.request_id
        started = time.perf_counter()
        try:
            response = await self.http.request(
                call.method,
                call.url,
                params=call.params,
                json=call.json,
                content=call.content,
                headers=headers,
            )
        except _NOT_SENT as exc:
            self._record(call, "error", started, error=type(exc).__name__)
            raise _Transient(
                GitLabUpstreamError(
                    f"Could not connect to GitLab at {self.base.url} ({type(exc).__name__}). Check "
                    "GITLAB_URL, proxy settings (HTTPS_PROXY, NO_PROXY) and that GitLab is up.",
                    request_id=call.request_id,
                )
            ) from None
        except httpx.HTTPError as exc:
            self._record(call, "error", started, error=type(exc).__name__)
            if not call.idempotent:
                raise self._maybe_sent(call, type(exc).__name__) from None
            raise _Transient(
                GitLabUpstreamError(
                    f"GitLab did not answer {call.operation} ({type(exc).__name__}); try again later.",
                    request_id=call.request_id,
                )
            ) from None
        self._record(call, f"{response.status_code // 100}xx", started, status=response.status_code)
        return self._check(call, response)

    def _check(self, call: _Call, response: httpx.Response) -> httpx.Response:
        status = response.status_code
        if status < 300 and not _looks_like_html(response):
            return response
        rid = call.request_id
        where = self.base.url
        if 300 <= status < 400:
            location = response.headers.get("location", "")
            target = location.split("?", 1)[0] or "an unnamed location"
            raise GitLabUpstreamError(
                f"GitLab at {where} answered {call.operation} with a redirect ({status}) to {target}. "
                "GitLab's API does not redirect: set GITLAB_URL to GitLab's final address (scheme, host "
                "and sub-path), or, if this is a login or SSO page, let the gateway reach GitLab without it.",
                status=status,
                request_id=rid,
            )
        html = _looks_like_html(response)
        if status < 300:  # an HTML page with a success status
            raise GitLabUpstreamError(
                f"GitLab at {where} answered {call.operation} with an HTML page instead of JSON (status "
                f"{status}): a proxy, SSO or login page probably sits in front of it. Check GITLAB_URL and "
                "the proxy settings (HTTPS_PROXY, NO_PROXY).",
                status=status,
                request_id=rid,
            )
        message = "" if html else _error_message(response)
        detail = f": {message}" if message else ""
        html_note = (
            " (an HTML page, not GitLab's JSON: a proxy or SSO page may sit in front of GitLab)"
            if html
            else ""
        )
        if status == 429:
            retry_after = _retry_after_seconds(response.headers)
            limit = response.headers.get("RateLimit-Name")
            # Without a hint from GitLab, advertise its usual throttle period rather than guess low.
            advertised = (
                max(1, math.ceil(retry_after)) if retry_after is not None else DEFAULT_RATE_LIMIT_WAIT
            )
            limited = GitLabRateLimited(
                f"Rate limited by GitLab{f' ({limit})' if limit else ''}. Retry after {advertised} "
                f"second{'s' if advertised != 1 else ''}.",
                retry_after_seconds=advertised,
                limit_name=limit,
                request_id=rid,
            )
            if retry_after is not None and retry_after > self.settings.max_retry_after_seconds:
                raise limited
            # GitLab's rate limiter refuses before anything runs, so even a mutation was not applied.
            raise _Transient(limited, retry_after=retry_after)
        if status in (401, 403):
            raise GitLabUnauthorized(
                f"GitLab refused the credential ({status}{detail}){html_note}. Check that the token is "
                "valid, not expired, and has the `api` or `read_api` scope, and that its user can see the "
                "project.",
                status=status,
                request_id=rid,
            )
        if status == 404 and (call.graphql or html):
            # GraphQL reports a missing resource as null data, never 404: the endpoint itself is missing.
            raise GitLabUpstreamError(
                f"GitLab at {where} has no {'GraphQL endpoint' if call.graphql else 'such API route'} "
                f"({response.request.url.path} answered 404){html_note}. Check GITLAB_URL, including any "
                "sub-path such as https://host/gitlab.",
                status=status,
                request_id=rid,
            )
        if status == 404:
            raise GitLabNotFound(message or "GitLab answered 404 Not Found.", status=status, request_id=rid)
        if status in RETRY_STATUSES or status >= 500 or status == 408:
            final = GitLabUpstreamError(
                f"GitLab failed with status {status}{detail}{html_note}; try again later.",
                status=status,
                request_id=rid,
            )
            if not call.idempotent:
                raise self._maybe_sent(call, f"status {status}")
            retry_after = _retry_after_seconds(response.headers)
            if status in RETRY_STATUSES and (
                retry_after is None or retry_after <= self.settings.max_retry_after_seconds
            ):
                raise _Transient(final, retry_after=retry_after)
            raise final
        if status == 409:
            raise GitLabConflict(
                f"GitLab refused the request because of a conflict (409){detail}.",
                status=status,
                request_id=rid,
            )
        raise GitLabBadRequest(
            f"GitLab rejected the request ({status}){detail}{html_note}.",
            status=status,
            request_id=rid,
        )

    def _maybe_sent(self, call: _Call, what: str) -> GitLabMaybeSent:
        return GitLabMaybeSent(
            f"The request {call.operation} failed ({what}) after it may have reached GitLab, so it was not "
            "sent again: the change may or may not have been made. Check the resource itself (for a "
            "pipeline, the project's pipelines list) before trying again.",
            request_id=call.request_id,
        )

    def _record(
        self,
        call: _Call,
        status_class: str,
        started: float,
        *,
        status: int | None = None,
        error: str | None = None,
    ) -> None:
        """Count and time one attempt, and write its one log line (issue 6: one line per request)."""
        elapsed = time.perf_counter() - started
        if self.metrics is not None:
            self.metrics.gitlab_requests.labels(call.operation, status_class).inc()
            self.metrics.gitlab_latency.labels(call.operation).observe(elapsed)
        log.info(
            "gitlab request",
            extra={
                "operation": call.operation,
                "method": call.method,
                "status": status,
                "error": error,
                "duration_ms": round(elapsed * 1000, 2),
                "request_id": call.request_id,
            },
        )


class GitLabSession:
    """A :class:`GitLabClient` bound to one credential and request id (what tools use)."""

    __slots__ = ("client", "credential", "request_id")

    def __init__(self, client: GitLabClient, credential: Credential, request_id: str | None) -> None:
        self.client = client
        self.credential = credential
        self.request_id = request_id

    @property
    def base(self) -> GitLabBase:
        """The configured GitLab's normalised base URL."""
        return self.client.base

    def web_url(self, path: str) -> str:
        """See :meth:`GitLabBase.web_url`."""
        return self.client.web_url(path)

    async def graphql(
        self, operation: str, variables: Mapping[str, Any], *, mutation: bool = False
    ) -> dict[str, Any]:
        """See :meth:`GitLabClient.graphql`."""
        return await self.client.graphql(
            operation, variables, credential=self.credential, request_id=self.request_id, mutation=mutation
        )

    async def rest(self, method: str, route: str, **kwargs: Any) -> Any:
        """See :meth:`GitLabClient.rest`."""
        return await self.client.rest(
            method, route, credential=self.credential, request_id=self.request_id, **kwargs
        )


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


def build_http_client(settings: GitLabSettings) -> httpx.AsyncClient:
    """The shared ``httpx.AsyncClient``: TLS on (plus ``ca_bundle``), env proxies, timeouts.

    Raises:
        ValueError: see :func:`build_ssl_context`.
    """
    return httpx.AsyncClient(
        verify=build_ssl_context(settings.ca_bundle),
        trust_env=True,
        timeout=httpx.Timeout(settings.timeout_seconds, connect=settings.connect_timeout_seconds),
        # Keep every pooled connection alive: a burst of concurrent calls would otherwise pay
        # new TCP and TLS handshakes for everything above the keep-alive cap.
        limits=httpx.Limits(max_connections=100, max_keepalive_connections=100, keepalive_expiry=30.0),
        follow_redirects=False,
        cookies=_NoCookies(),
    )


def _segment(name: str, value: str | int) -> str:
    """``value`` as one REST path segment; refuses anything that would change the route."""
    if isinstance(value, bool):
        raise ValueError(f"path parameter {name!r} must be a string or an integer, not a bool")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, EncodedId):
        return str(value)
    if not _SEGMENT.fullmatch(value) or value in (".", ".."):
        raise ValueError(
            f"path parameter {name!r} is not one encoded path segment: {value!r}; encode it with "
            "gateway.gitlab.urls.encode_project or urllib.parse.quote(value, safe='')"
        )
    return value


def _looks_like_html(response: httpx.Response) -> bool:
    content_type = response.headers.get("content-type", "").lower()
    if "html" in content_type:
        return True
    if content_type:
        return False
    return response.content[:64].lstrip().lower().startswith((b"<!doctype html", b"<html"))


def _retry_after_seconds(headers: httpx.Headers) -> float | None:
    """Seconds GitLab asks to wait: ``Retry-After`` (delta-seconds or an HTTP date, RFC 9110
    §10.2.3), else ``RateLimit-Reset`` (unix time; GitLab docs "Rate limits"), else None."""
    value = (headers.get("Retry-After") or "").strip()
    if value:
        try:
            seconds = float(value)
        except ValueError:
            seconds = None
        if seconds is not None:
            return max(0.0, seconds) if math.isfinite(seconds) else None
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            when = None
        if when is not None:
            if when.tzinfo is None:  # "-0000": RFC 9110 dates are always GMT
                when = when.replace(tzinfo=UTC)
            return max(0.0, when.timestamp() - time.time())
    reset = (headers.get("RateLimit-Reset") or "").strip()
    if reset.isdigit():
        return max(0.0, float(reset) - time.time())
    return None


def _error_message(response: httpx.Response) -> str:
    """GitLab's own words from an error body (``message`` or ``error``), briefly."""
    try:
        body = response.json()
    except ValueError:
        return ""
    if isinstance(body, dict):
        msg = body.get("message") or body.get("error") or body.get("error_description") or ""
        if isinstance(msg, dict):
            return "; ".join(
                f"{k} {', '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in msg.items()
            )
        if isinstance(msg, list):
            return "; ".join(map(str, msg))[:500]
        return str(msg)[:500]
    return ""
