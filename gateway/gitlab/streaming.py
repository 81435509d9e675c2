"""GETs whose body is read as it arrives: job logs (``GET /projects/:id/jobs/:job_id/trace``).

GitLab sends a job's whole log in one answer, with no ``Range`` support to rely on, and a log may
be hundreds of megabytes: far past the 64 MiB every other answer is capped at
(:data:`gateway.gitlab.transport.MAX_ANSWER_BYTES`). So a log is never held whole: the reader
(``gateway.tools.ci.log_reads``) keeps a bounded part of it and closes the answer as soon as it
has what it needs, which stops GitLab's body mid-way.

- Opening is one read like any other: retried on connection errors, timeouts, 429, 502-504
  (:mod:`gateway.gitlab.retries`), errors typed by :func:`gateway.gitlab.answers.check_status`
  (an error body is read up to :data:`ERROR_BODY_BYTES`).
- Once the body flows nothing is retried (the reader has already used part of it): a connection
  dropped mid-way is a :class:`~gateway.gitlab.errors.GitLabUpstreamError`.
- The whole exchange, body included, is over within :data:`STREAM_SECONDS` (or
  ``gitlab.timeout_seconds`` if longer); each read waits at most ``gitlab.timeout_seconds``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Protocol

import aiohttp
import httpx

from gateway.gitlab.answers import check_status
from gateway.gitlab.attempt_errors import NOT_SENT, not_answered, not_connected
from gateway.gitlab.attempt_log import record_attempt
from gateway.gitlab.call import GitLabCall, Headers, HttpReply
from gateway.gitlab.errors import GitLabUpstreamError
from gateway.gitlab.retries import SleepFn, with_retries
from gateway.gitlab.transport import AiohttpTransport, map_error
from gateway.observability import tracing

if TYPE_CHECKING:
    from gateway.config import GitLabSettings
    from gateway.gitlab.urls import GitLabBase
    from gateway.observability.metrics import Metrics


class GitLabClient(Protocol):
    """What the streaming path uses of :class:`gateway.gitlab.client.GitLabClient`, which
    imports this module: named by its shape, so the two modules do not import each other."""

    @property
    def settings(self) -> GitLabSettings: ...

    @property
    def base(self) -> GitLabBase: ...

    @property
    def metrics(self) -> Metrics | None: ...

    @property
    def http(self) -> httpx.AsyncClient: ...

    @property
    def sleep(self) -> SleepFn: ...

    @property
    def static_headers(self) -> Mapping[str, str]: ...

    @property
    def direct_transport(self) -> AiohttpTransport | None: ...

    @property
    def timeouts(self) -> Mapping[str, float | None]: ...


#: The most of an error answer read (GitLab's JSON error bodies are tiny).
ERROR_BODY_BYTES = 64 * 1024
#: How long one streamed answer may last in all, body included.
STREAM_SECONDS = 120.0


class BodyStream:
    """A successful answer whose body has not been read yet.

    Attributes:
        headers: the answer's headers.
        content_length: ``Content-Length`` when GitLab sent one (the log's size in bytes), else None.
    """

    def __init__(
        self,
        call: GitLabCall,
        headers: Headers,
        chunks: AsyncIterator[bytes],
        close: Callable[[], Awaitable[None]],
    ) -> None:
        self._call = call
        self.headers = headers
        self._chunks = chunks
        self._close = close
        length = headers.get("content-length")
        encoded = headers.get("content-encoding", "identity").lower() not in ("", "identity")
        self.content_length = int(length) if length and length.isdigit() and not encoded else None

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive.

        Raises:
            GitLabUpstreamError: the connection dropped or went quiet mid-way.
        """
        try:
            async for chunk in self._chunks:
                if chunk:
                    yield chunk
        except (httpx.HTTPError, TimeoutError, OSError) as exc:
            raise self._cut(type(exc).__name__) from None
        except Exception as exc:
            mapped = map_error(exc, None)
            if mapped is None:
                raise
            raise self._cut(type(mapped).__name__) from None

    def _cut(self, what: str) -> GitLabUpstreamError:
        return GitLabUpstreamError(
            f"GitLab's answer to {self._call.operation} was cut off while it was read ({what}); "
            "try again later.",
            request_id=self._call.request_id,
        )

    async def aclose(self) -> None:
        """Stop reading: the rest of the body is never fetched (the connection is closed)."""
        await self._close()


async def open_stream(client: GitLabClient, call: GitLabCall) -> BodyStream:
    """Send ``call`` (a GET) and return its answer with the body unread; retried as any read.

    Raises:
        the typed errors of :meth:`GitLabClient.rest`.
    """

    async def attempt(deadline: float) -> BodyStream:
        return await _attempt(client, call, deadline)

    return await with_retries(call, attempt, client.settings, sleep=client.sleep, metrics=client.metrics)


async def _attempt(client: GitLabClient, call: GitLabCall, deadline: float) -> BodyStream:
    headers = {**client.static_headers, **(call.headers or {}), **call.credential.headers()}
    if call.request_id:
        headers["X-Request-Id"] = call.request_id
    span = None
    if tracing.ENABLED:  # the span ends when GitLab's status comes; the log is read after it
        span = tracing.gitlab_span(call.method, call.operation, call.attempts, headers)
        call.attempts += 1
    loop = asyncio.get_running_loop()
    body_deadline = loop.time() + max(STREAM_SECONDS, client.settings.timeout_seconds)
    started = time.perf_counter()
    try:
        async with asyncio.timeout_at(deadline):
            stream = await _open(client, call, headers, body_deadline)
    except NOT_SENT as exc:
        record_attempt(client.metrics, call, "error", started, error=type(exc).__name__, span=span)
        raise not_connected(call, client.base.url, exc) from None
    except (httpx.HTTPError, TimeoutError) as exc:
        record_attempt(client.metrics, call, "error", started, error=type(exc).__name__, span=span)
        raise not_answered(call, exc) from None
    status, answer_headers, body = stream
    record_attempt(client.metrics, call, f"{status // 100}xx", started, status=status, span=span)
    if status >= 300:
        try:
            content = await _read_some(body.chunks(), ERROR_BODY_BYTES)
        except GitLabUpstreamError:
            content = b""
        finally:
            await body.aclose()
        check_status(
            call,
            HttpReply(status, answer_headers, content),
            where=client.base.url,
            max_retry_after=client.settings.max_retry_after_seconds,
        )
        raise AssertionError("check_status raises for every status from 300 up")  # pragma: no cover
    try:
        check_status(
            call,
            HttpReply(status, answer_headers, b""),
            where=client.base.url,
            max_retry_after=client.settings.max_retry_after_seconds,
        )
    except BaseException:
        await body.aclose()
        raise
    return body


async def _open(
    client: GitLabClient, call: GitLabCall, headers: dict[str, str], body_deadline: float
) -> tuple[int, Headers, BodyStream]:
    url = call.url if not call.params else str(httpx.URL(call.url, params=call.params))
    transport = client.direct_transport
    if transport is not None:
        response = await transport.open(url, headers, timeouts=client.timeouts, deadline=body_deadline)

        async def close_direct() -> None:
            response.close()

        body = BodyStream(call, response.headers, _pieces(response.content), close_direct)
        return response.status, response.headers, body
    request = client.http.build_request("GET", url, headers=headers, extensions={"deadline": body_deadline})
    answer = await client.http.send(request, stream=True)
    body = BodyStream(call, answer.headers, answer.aiter_bytes(), answer.aclose)
    return answer.status_code, answer.headers, body


async def _pieces(content: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """The body as the pieces it arrived in. ``iter_any`` would join the pieces buffered into a
    new ``bytes`` each time: a copy of the whole log (hundreds of MB), in fresh large blocks."""
    async for piece, _ in content.iter_chunks():
        yield piece


async def _read_some(chunks: AsyncIterator[bytes], limit: int) -> bytes:
    out = bytearray()
    async for chunk in chunks:
        out += chunk
        if len(out) >= limit:
            break
    return bytes(out[:limit])
