"""The GitLab client: one shared ``httpx.AsyncClient`` for GraphQL and REST.

- GraphQL documents live in ``gateway/gitlab/operations/<name>.graphql`` (validated against
  GitLab's published schema by the tests) and are sent by name with :meth:`GitLabSession.graphql`.
- REST is for what GraphQL cannot serve (tag names, for example); routes are given as templates
  (``/projects/{id}/repository/tags``) so logs and metrics never carry a raw path.
- Retries (tenacity): reads (GraphQL queries, GET) on connection errors, timeouts, 429, 502, 503
  and 504, with exponential backoff that honours ``Retry-After``, inside a deadline, sleeping with
  ``asyncio.sleep`` (never blocking the loop). A mutation is retried only when the request
  provably never reached GitLab (connect error, connect or pool timeout); any later failure is
  :class:`GitLabMaybeSent`. Source: ``shared/spec/design.md`` standing rules.
- TLS verification is always on; ``gitlab.ca_bundle`` adds a private CA to the system store.
  Proxies come from ``HTTPS_PROXY`` / ``HTTP_PROXY`` / ``NO_PROXY`` (httpx ``trust_env``).
- Each request carries ``X-Request-Id`` (the gateway's request id), returned in errors.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import certifi
import httpx
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt, stop_before_delay
from tenacity.wait import wait_exponential_jitter

from gateway import __version__
from gateway.config import GitLabSettings
from gateway.gitlab.credentials import Credential
from gateway.gitlab.errors import (
    GitLabBadRequest,
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
_RETRY_STATUSES = frozenset({429, 502, 503, 504})
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
#: GitLab's wording when a GraphQL resource is missing or not visible to the caller.
_GRAPHQL_NOT_FOUND = ("does not exist or you don't have permission", "not found")

_BACKOFF = wait_exponential_jitter(multiplier=0.5, max=8, jitter=0.5)

SleepFn = Callable[[float], Awaitable[None]]


@cache
def load_operation(name: str) -> str:
    """The text of ``operations/<name>.graphql``.

    Raises:
        FileNotFoundError: no such operation file.
    """
    return (OPERATIONS_DIR / f"{name}.graphql").read_text(encoding="utf-8")


class _Transient(Exception):
    """A failure worth another try (reads), with what to raise when tries run out."""

    def __init__(self, final: GitLabError, *, retry_after: float | None = None, sent: bool = True) -> None:
        super().__init__(final.message)
        self.final = final
        self.retry_after = retry_after
        self.sent = sent


@dataclass(frozen=True)
class _Call:
    method: str
    url: str
    operation: str
    idempotent: bool
    credential: Credential
    request_id: str | None
    params: Mapping[str, Any] | None = None
    json: Any = None


class GitLabClient:
    """Talks to one GitLab. Build one per app; call :meth:`session` per tool call.

    Args:
        settings: the ``[gitlab]`` configuration.
        metrics: where request counts, latencies and retries are recorded.
        http: an ``httpx.AsyncClient`` to use (tests); by default one is built from ``settings``.
        sleep: how to wait between retries (tests pass a fake).
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
            variables: the operation's variables (None values are dropped).
            mutation: True for a mutation: never retried once it may have reached GitLab.

        Raises:
            GitLabUnauthorized, GitLabRateLimited, GitLabUpstreamError, GitLabMaybeSent: see module doc.
            GitLabNotFound: GraphQL said the resource does not exist or is not visible.
            GitLabBadRequest: other GraphQL ``errors``.
        """
        body = {
            "query": load_operation(operation),
            "variables": {k: v for k, v in variables.items() if v is not None},
        }
        call = _Call(
            "POST",
            self.base.graphql_url,
            operation,
            idempotent=not mutation,
            credential=credential,
            request_id=request_id,
            json=body,
        )
        payload = await self._request_json(call)
        if not isinstance(payload, dict):
            raise GitLabUpstreamError(
                "GitLab's GraphQL endpoint answered something other than a JSON object.", request_id=request_id
            )
        errors = payload.get("errors") or []
        data = payload.get("data")
        if errors:
            messages = "; ".join(str(e.get("message", e)) if isinstance(e, dict) else str(e) for e in errors)
            lowered = messages.lower()
            if any(marker in lowered for marker in _GRAPHQL_NOT_FOUND):
                raise GitLabNotFound(f"GitLab: {messages}", request_id=request_id)
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
            path_params: values for the template, already encoded as single segments
                (see :func:`gateway.gitlab.urls.encode_project`).
            idempotent: defaults to True for GET/HEAD, False otherwise.

        Raises:
            the same typed errors as :meth:`graphql`.
        """
        path = route.format(**(path_params or {}))
        call = _Call(
            method.upper(),
            self.base.api_url + path,
            f"{method.upper()} {route}",
            idempotent=method.upper() in ("GET", "HEAD") if idempotent is None else idempotent,
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
            raise GitLabUpstreamError(
                f"GitLab answered {call.operation} with status {response.status_code} and a body that is not JSON.",
                status=response.status_code,
                request_id=call.request_id,
            ) from None

    async def _with_retries(self, call: _Call) -> httpx.Response:
        s = self.settings
        # Mutations only ever raise _Transient when the request was provably not applied
        # (connect errors, 429), so the same budget is safe for both.
        attempts = s.retry_attempts

        def wait(state: RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome else None
            if isinstance(exc, _Transient) and exc.retry_after is not None:
                return exc.retry_after
            return float(_BACKOFF(state))

        async def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            if self.metrics is not None:
                self.metrics.gitlab_retries.labels(call.operation).inc()
                if isinstance(exc, _Transient) and exc.retry_after is not None:
                    self.metrics.gitlab_rate_limit_wait.inc(exc.retry_after)
            log.info(
                "retrying GitLab request",
                extra={"operation": call.operation, "attempt": state.attempt_number, "request_id": call.request_id},
            )

        retrying = AsyncRetrying(
            sleep=self._sleep,
            stop=stop_after_attempt(attempts) | stop_before_delay(s.retry_deadline_seconds),
            wait=wait,
            retry=retry_if_exception_type(_Transient),
            before_sleep=before_sleep,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._send_once(call)
        except _Transient as exc:
            raise exc.final from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _send_once(self, call: _Call) -> httpx.Response:
        headers = {
            **call.credential.headers(),
            "User-Agent": f"gitlab-mcp-gateway/{__version__}",
            "Accept": "application/json",
        }
        if call.request_id:
            headers["X-Request-Id"] = call.request_id
        started = time.perf_counter()
        try:
            response = await self.http.request(
                call.method, call.url, params=call.params, json=call.json, headers=headers
            )
        except _NOT_SENT as exc:
            self._record(call, "error", started)
            raise _Transient(
                GitLabUpstreamError(
                    f"Could not connect to GitLab at {self.base.url} ({type(exc).__name__}). Check GITLAB_URL, "
                    "proxy settings (HTTPS_PROXY, NO_PROXY) and that GitLab is up.",
                    request_id=call.request_id,
                ),
                sent=False,
            ) from None
        except httpx.HTTPError as exc:
            self._record(call, "error", started)
            if not call.idempotent:
                raise self._maybe_sent(call, f"{type(exc).__name__}") from None
            raise _Transient(
                GitLabUpstreamError(
                    f"GitLab did not answer {call.operation} ({type(exc).__name__}); try again later.",
                    request_id=call.request_id,
                )
            ) from None
        self._record(call, f"{response.status_code // 100}xx", started)
        self._log(call, response, started)
        return self._check(call, response)

    def _check(self, call: _Call, response: httpx.Response) -> httpx.Response:
        status = response.status_code
        rid = call.request_id
        content_type = response.headers.get("content-type", "")
        if status < 300 and "html" in content_type.lower():
            raise GitLabUpstreamError(
                f"GitLab at {self.base.url} answered with an HTML page instead of JSON (status {status}): a "
                "proxy, SSO or login page probably sits in front of it. Check GITLAB_URL and the proxy settings.",
                status=status,
                request_id=rid,
            )
        if status < 400:
            return response
        message = _error_message(response)
        if status == 429:
            retry_after = _retry_after_seconds(response.headers.get("Retry-After"))
            limit = response.headers.get("RateLimit-Name")
            wait_for = retry_after if retry_after is not None else 1.0
            final = GitLabRateLimited(
                f"Rate limited by GitLab{f' ({limit})' if limit else ''}. Retry after {wait_for:g} seconds.",
                retry_after_seconds=wait_for,
                limit_name=limit,
                request_id=rid,
            )
            if retry_after is not None and retry_after > self.settings.max_retry_after_seconds:
                raise final
            # A 429 is refused before GitLab does anything, so even a mutation was not applied.
            raise _Transient(final, retry_after=wait_for, sent=False)
        if status in (401, 403):
            raise GitLabUnauthorized(
                f"GitLab refused the credential ({status}{': ' + message if message else ''}). Check that the "
                "token is valid, not expired, and has the `api` or `read_api` scope, and that its user can "
                "see the project.",
                status=status,
                request_id=rid,
            )
        if status == 404:
            raise GitLabNotFound(message or "GitLab answered 404 Not Found.", status=status, request_id=rid)
        if status in _RETRY_STATUSES or status >= 500:
            final = GitLabUpstreamError(
                f"GitLab failed with status {status}{': ' + message if message else ''}; try again later.",
                status=status,
                request_id=rid,
            )
            if not call.idempotent:
                raise self._maybe_sent(call, f"status {status}")
            if status in _RETRY_STATUSES:
                raise _Transient(final, retry_after=_retry_after_seconds(response.headers.get("Retry-After")))
            raise final
        raise GitLabBadRequest(
            f"GitLab rejected the request ({status}){': ' + message if message else ''}.",
            status=status,
            request_id=rid,
        )

    def _maybe_sent(self, call: _Call, what: str) -> GitLabMaybeSent:
        return GitLabMaybeSent(
            f"The request {call.operation} failed ({what}) after it may have reached GitLab, so it was not "
            "sent again: the change may or may not have been made. Check the project's pipelines list (or "
            "the resource itself) before trying again.",
            request_id=call.request_id,
        )

    def _record(self, call: _Call, status_class: str, started: float) -> None:
        if self.metrics is None:
            return
        self.metrics.gitlab_requests.labels(call.operation, status_class).inc()
        self.metrics.gitlab_latency.labels(call.operation).observe(time.perf_counter() - started)

    def _log(self, call: _Call, response: httpx.Response, started: float) -> None:
        log.info(
            "gitlab request",
            extra={
                "operation": call.operation,
                "method": call.method,
                "status": response.status_code,
                "duration_ms": round((time.perf_counter() - started) * 1000, 2),
                "request_id": call.request_id,
            },
        )


class GitLabSession:
    """A :class:`GitLabClient` bound to one credential and request id (what tools use)."""

    def __init__(self, client: GitLabClient, credential: Credential, request_id: str | None) -> None:
        self.client = client
        self.credential = credential
        self.request_id = request_id

    @property
    def base(self) -> GitLabBase:
        return self.client.base

    def web_url(self, path: str) -> str:
        return self.client.web_url(path)

    async def graphql(self, operation: str, variables: Mapping[str, Any], *, mutation: bool = False) -> dict[str, Any]:
        """See :meth:`GitLabClient.graphql`."""
        return await self.client.graphql(
            operation, variables, credential=self.credential, request_id=self.request_id, mutation=mutation
        )

    async def rest(self, method: str, route: str, **kwargs: Any) -> Any:
        """See :meth:`GitLabClient.rest`."""
        return await self.client.rest(
            method, route, credential=self.credential, request_id=self.request_id, **kwargs
        )


def build_http_client(settings: GitLabSettings) -> httpx.AsyncClient:
    """The shared ``httpx.AsyncClient``: TLS on (plus ``ca_bundle``), env proxies, timeouts."""
    context = ssl.create_default_context(cafile=certifi.where())
    if settings.ca_bundle is not None:
        context.load_verify_locations(cafile=str(settings.ca_bundle))
    return httpx.AsyncClient(
        verify=context,
        trust_env=True,
        timeout=httpx.Timeout(settings.timeout_seconds, connect=settings.connect_timeout_seconds),
        limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
        follow_redirects=False,
    )


def _retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` as seconds: delta-seconds or an HTTP date (RFC 9110 §10.2.3)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_message(response: httpx.Response) -> str:
    """GitLab's own words from an error body (``message`` or ``error``), briefly."""
    try:
        body = response.json()
    except ValueError:
        return ""
    if isinstance(body, dict):
        msg = body.get("message") or body.get("error") or body.get("error_description") or ""
        if isinstance(msg, dict):
            return "; ".join(f"{k} {', '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in msg.items())
        return str(msg)[:500]
    return ""
