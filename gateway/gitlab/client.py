"""The GitLab client: one shared ``httpx.AsyncClient`` (on aiohttp's pool) for GraphQL and REST.

- GraphQL documents live in ``gateway/gitlab/operations/<domain>/<name>.graphql`` and are sent by
  file stem with :meth:`GitLabSession.graphql` (:mod:`gateway.gitlab.operation_loader`); tools
  declare them as :class:`gateway.gitlab.operation.Operation`.
- REST is for what GraphQL cannot serve (tag names, for example); routes are given as templates
  (``/projects/{id}/repository/tags``) so logs and metrics never carry a raw path, and every path
  parameter must already be one encoded segment (:func:`gateway.gitlab.urls.encode_project`).
- Each call runs in the request loop (:mod:`gateway.gitlab.retries`); each attempt's answer is
  turned into data or a typed error by :mod:`gateway.gitlab.answers`. A mutation is resent only
  when the request provably never reached GitLab (connect error, connect or pool timeout, 429);
  any later failure is :class:`GitLabMaybeSent`.
- python-gitlab stays out: its sync REST client blocks and its ``AsyncGraphQL`` retries with
  ``time.sleep`` and cannot tell queries from mutations.
- The HTTP client itself (TLS, proxies, timeouts, no redirects, no cookies) is built by
  :mod:`gateway.gitlab.http`.
- Each request carries ``X-Request-Id`` (the gateway's request id), returned in errors. Each
  attempt is counted in ``/metrics``, noted on the MCP request's access line and logged at DEBUG.
"""

from __future__ import annotations

import asyncio
import contextlib
import json as json_lib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx

from gateway import __version__
from gateway.config import GitLabSettings
from gateway.gitlab import transport
from gateway.gitlab.answers import check_status, decode_json, graphql_data
from gateway.gitlab.attempt_errors import NOT_SENT, not_answered, not_connected, what_failed
from gateway.gitlab.attempt_log import record_attempt
from gateway.gitlab.call import GitLabCall, HttpReply
from gateway.gitlab.credentials import Credential
from gateway.gitlab.errors import GitLabUnauthorized, GitLabUpstreamError
from gateway.gitlab.http import build_http_client, build_transport
from gateway.gitlab.instance import GitLabInstance, InstanceInfo
from gateway.gitlab.operation_loader import graphql_body
from gateway.gitlab.retries import SleepFn, with_retries
from gateway.gitlab.routes import rest_path
from gateway.gitlab.streaming import BodyStream, open_stream
from gateway.gitlab.transport import MAX_GRAPHQL_ANSWER_BYTES, AiohttpTransport, AnswerTooLarge, too_large
from gateway.gitlab.urls import GitLabBase, normalize_base_url
from gateway.observability import tracing
from gateway.observability.metrics import Metrics

log = logging.getLogger("gateway.gitlab")

#: The gateway's name on every request it sends GitLab (tool calls, the start-up and readiness
#: checks): what GitLab's logs and an administrator see.
USER_AGENT = f"gitlab-mcp-gateway/{__version__}"

#: How long past an attempt's deadline the client itself gives up, for a transport that does
#: not enforce the deadline (the aiohttp transport does, and says what it knows first).
_DEADLINE_GRACE = 0.5


class GitLabClient:
    """Talks to one GitLab. Build one per app; call :meth:`session` per tool call.

    Args:
        settings: the ``[gitlab]`` configuration.
        metrics: where request counts, latencies and retries are recorded.
        http: an ``httpx.AsyncClient`` to use (tests); by default one is built from ``settings``.
        sleep: how to wait between retries, ``await sleep(seconds)`` (tests pass a fake).

    Raises:
        ValueError: ``settings.url`` is not a usable GitLab URL, ``ca_bundle`` cannot be read, or
            the environment names an unsupported proxy.
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
        # Calls go straight to aiohttp's pool when the HTTP client is the gateway's own (an
        # httpx Request and Response per call cost more CPU than the exchange itself); an
        # injected httpx client (respx in the unit tests) is sent through as given.
        self._direct = build_transport(settings) if http is None else None
        self.http = http if http is not None else build_http_client(settings, self._direct)
        self._timeouts = self.http.timeout.as_dict()
        self._static_headers = {
            "User-Agent": USER_AGENT,
            "Accept": "application/json",
        }
        self._json_headers = {**self._static_headers, "Content-Type": "application/json"}
        #: The GitLab's version and edition, which choose the documents operations send.
        self.instance = GitLabInstance(on_learnt=self._learnt)

    def _learnt(self, info: InstanceInfo) -> None:
        log.info(
            "GitLab version learnt", extra={"gitlab_version": info.version, "edition": info.edition.value}
        )
        if self.metrics is not None:
            self.metrics.gitlab_info.clear()
            self.metrics.gitlab_info.labels(info.version or "unknown", info.edition.value).set(1)

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
                answers, a 404 from the endpoint itself (a wrong ``GITLAB_URL``), GraphQL
                ``errors`` saying GitLab failed (internal error, timeout) once retries ran out.
            GitLabMaybeSent: a mutation failed after it may have reached GitLab, including a
                mutation answered with ``errors`` and non-null ``data`` (it ran, and failed part
                way), with GitLab's internal error or timeout, or with a success status and a
                body that is not a JSON object.
            GitLabNotFound: GraphQL said the resource does not exist or is not visible, or
                answered no data.
            GitLabBadRequest: other GraphQL ``errors`` (for a mutation: with null ``data``, so
                GitLab refused it before running it).
        """
        call = GitLabCall(
            method="POST",
            url=self.base.graphql_url,
            operation=operation,
            idempotent=not mutation,
            credential=credential,
            request_id=request_id,
            graphql=True,
            content=graphql_body(operation, variables),
            # Read at call time: the general cap may be set lower (tests do).
            max_bytes=min(transport.MAX_ANSWER_BYTES, MAX_GRAPHQL_ANSWER_BYTES),
        )
        data: dict[str, Any] = await self._call(call)
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
        max_bytes: int | None = None,
    ) -> Any:
        """Call a REST route (relative to ``/api/v4``) and return its decoded JSON.

        Args:
            route: a template such as ``/projects/{id}/repository/tags`` (the metrics label).
            path_params: values for the template, each already one encoded segment (integers,
                :class:`~gateway.gitlab.urls.EncodedId`, or the result of
                :func:`gateway.gitlab.urls.encode_project`, or ``urllib.parse.quote(x, safe="")``).
            idempotent: defaults to True for GET/HEAD, False otherwise.
            max_bytes: the most of the answer read, decoded (None: ``MAX_ANSWER_BYTES``); more is
                an upstream error naming the bound.

        Raises:
            ValueError: a path parameter is not one encoded segment (a programming error: the
                value would change the route).
            the same typed errors as :meth:`graphql`, and :class:`GitLabNotFound` for a 404
            with GitLab's JSON body.
        """
        method = method.upper()
        path = rest_path(route, path_params)
        call = GitLabCall(
            method=method,
            url=self.base.api_url + path,
            operation=f"{method} {route}",
            idempotent=method in ("GET", "HEAD") if idempotent is None else idempotent,
            credential=credential,
            request_id=request_id,
            params=params,
            json=json,
            max_bytes=max_bytes,
        )
        return await self._call(call)

    @asynccontextmanager
    async def stream(
        self,
        route: str,
        *,
        credential: Credential,
        path_params: Mapping[str, str | int] | None = None,
        suffix: str = "",
        request_id: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> AsyncIterator[BodyStream]:
        """GET a REST route whose body is read as it arrives (a job log; see
        :mod:`gateway.gitlab.streaming`); leaving the block stops reading it.

        Args:
            suffix: encoded path segments joined by ``/``, appended to the route (a wildcard
                route's tail, such as an artifact's path); each is checked as one segment.
            headers: request headers of this call (``Range``); never credentials.

        Raises:
            the typed errors of :meth:`rest`, before the block is entered.
        """
        path = rest_path(route, path_params, suffix)
        call = GitLabCall(
            method="GET",
            url=self.base.api_url + path,
            operation=f"GET {route}",
            idempotent=True,
            credential=credential,
            request_id=request_id,
            headers=headers,
        )
        body = await open_stream(self, call)
        try:
            yield body
        finally:
            await body.aclose()

    # What the streaming path (gateway.gitlab.streaming) shares with the buffered one.

    @property
    def sleep(self) -> SleepFn:
        return self._sleep

    @property
    def static_headers(self) -> Mapping[str, str]:
        return self._static_headers

    @property
    def direct_transport(self) -> AiohttpTransport | None:
        return self._direct

    @property
    def timeouts(self) -> Mapping[str, float | None]:
        return self._timeouts

    async def _call(self, call: GitLabCall) -> Any:
        async def attempt(deadline: float) -> Any:
            payload = decode_json(call, await self._send_once(call, deadline))
            return graphql_data(call, payload) if call.graphql else payload

        return await with_retries(call, attempt, self.settings, sleep=self._sleep, metrics=self.metrics)

    async def _exchange(self, call: GitLabCall, headers: dict[str, str], deadline: float) -> HttpReply:
        if self._direct is None:
            response = await self.http.request(
                call.method,
                call.url,
                params=call.params,
                json=call.json,
                content=call.content,
                headers=headers,
                extensions={"deadline": deadline},
            )
            if call.max_bytes is not None and len(response.content) > call.max_bytes:
                raise AnswerTooLarge(too_large(call.max_bytes))
            return HttpReply(response.status_code, response.headers, response.content)
        url, body = call.url, call.content
        if call.params:
            url = str(httpx.URL(url, params=call.params))  # httpx's query encoding, as above
        if call.json is not None:
            body = _json_body(call.json)
            headers["Content-Type"] = "application/json"
        status, _, answer_headers, content = await self._direct.exchange(
            call.method,
            url,
            headers,
            body,
            timeouts=self._timeouts,
            deadline=deadline,
            max_bytes=call.max_bytes,
        )
        return HttpReply(status, answer_headers, content)

    async def _send_once(self, call: GitLabCall, deadline: float) -> HttpReply:
        """One attempt, over by ``deadline`` (``loop.time()``), its body read; a success or a
        :class:`Transient`, else the typed error."""
        base = self._json_headers if call.content is not None else self._static_headers
        headers = {**base, **call.credential.headers()}
        if call.request_id:
            headers["X-Request-Id"] = call.request_id
        span = None
        if tracing.ENABLED:
            span = tracing.gitlab_span(call.method, call.operation, call.attempts, headers)
            call.attempts += 1
        started = time.perf_counter()
        try:
            async with asyncio.timeout_at(deadline + _DEADLINE_GRACE):
                response = await self._exchange(call, headers, deadline)
        except NOT_SENT as exc:
            record_attempt(self.metrics, call, "error", started, error=type(exc).__name__, span=span)
            raise not_connected(call, self.base.url, exc) from None
        except AnswerTooLarge as exc:
            record_attempt(self.metrics, call, "error", started, error="AnswerTooLarge", span=span)
            what = str(exc)
            if not call.idempotent:
                raise call.maybe_sent(what) from None
            # Not worth another try: the same request gets the same answer.
            raise GitLabUpstreamError(
                f"GitLab answered {call.operation}, but {what}: the gateway reads no more than "
                "that from one answer, and used none of it. GitLab's own answers to this tool are far "
                "smaller: check GITLAB_URL and any proxy between the gateway and GitLab.",
                request_id=call.request_id,
            ) from None
        except asyncio.CancelledError:
            # The MCP call was cancelled (its client went away, shutdown) with this attempt under
            # way: GitLab may have it, a mutation may have been made, so the access line says so.
            record_attempt(self.metrics, call, "cancelled", started, error="cancelled", span=span)
            raise
        except (httpx.HTTPError, TimeoutError) as exc:
            record_attempt(self.metrics, call, "error", started, error=type(exc).__name__, span=span)
            if not call.idempotent:
                raise call.maybe_sent(what_failed(exc)) from None
            raise not_answered(call, exc) from None
        record_attempt(
            self.metrics,
            call,
            f"{response.status_code // 100}xx",
            started,
            status=response.status_code,
            span=span,
        )
        return check_status(
            call, response, where=self.base.url, max_retry_after=self.settings.max_retry_after_seconds
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
        return await self._renewing(  # type: ignore[no-any-return]
            lambda credential: self.client.graphql(
                operation, variables, credential=credential, request_id=self.request_id, mutation=mutation
            )
        )

    async def rest(self, method: str, route: str, **kwargs: Any) -> Any:
        """See :meth:`GitLabClient.rest`."""
        return await self._renewing(
            lambda credential: self.client.rest(
                method, route, credential=credential, request_id=self.request_id, **kwargs
            )
        )

    async def _renewing(self, send: Callable[[Credential], Awaitable[Any]]) -> Any:
        """``send(credential)``, and once more with a renewed credential after GitLab's 401."""
        try:
            return await send(self.credential)
        except GitLabUnauthorized as err:
            if not await self._renewed(err):
                raise
            return await send(self.credential)

    async def _renewed(self, err: GitLabUnauthorized) -> bool:
        """After GitLab's 401 to a signed-in person's token: whether it was refreshed, so the
        request (which GitLab refused, so did not act on) may be sent once more with the new one.
        A failed refresh leaves the 401 as it is: the caller is then told to sign in again."""
        renew = self.credential.renew
        if err.status != 401 or renew is None:
            return False
        try:
            self.credential = await renew()
        except Exception as failure:  # revoked at GitLab, GitLab unreachable: the 401 stands
            log.info("a signed-in GitLab token could not be renewed after a 401 (%s)", type(failure).__name__)
            return False
        return True

    def stream(
        self,
        route: str,
        *,
        path_params: Mapping[str, str | int] | None = None,
        suffix: str = "",
        headers: Mapping[str, str] | None = None,
    ) -> contextlib.AbstractAsyncContextManager[BodyStream]:
        """See :meth:`GitLabClient.stream`."""
        return self.client.stream(
            route,
            credential=self.credential,
            request_id=self.request_id,
            path_params=path_params,
            suffix=suffix,
            headers=headers,
        )


def _json_body(value: Any) -> bytes:
    """A JSON request body, encoded as httpx encodes ``json=``."""
    return json_lib.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
