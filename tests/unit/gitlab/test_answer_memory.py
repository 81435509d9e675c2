"""What one GitLab answer costs in memory while it is read: a body near the byte bound is held
once (not copied whole at the end), a JSON answer of countless values is refused as it arrives,
long before the byte bound (a hostile GitLab's ``[{},{},...]``, gzip-compressed), and GitLab's
error words are kept brief however long they come."""

from __future__ import annotations

import asyncio
import gzip
import json
import ssl
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from gateway.config import Settings
from gateway.gitlab import json_budget
from gateway.gitlab.client import GitLabClient
from gateway.gitlab.credentials import service_credential
from gateway.gitlab.errors import GitLabBadRequest, GitLabUpstreamError
from gateway.gitlab.transport import AiohttpTransport
from tests.unit.gitlab.socket_gitlab import Received, SocketGitLab, http_response
from tests.unit.gitlab.test_socket_client import QUERY_VARS

MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def _no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def serving(body: bytes, headers: dict[str, str]) -> SocketGitLab:
    """A GitLab answering ``body``, written in slices (its own buffers stay out of the measure)."""
    whole = memoryview(http_response(200, body, headers))

    async def answer(request: Received, writer: asyncio.StreamWriter) -> bool:
        for at in range(0, len(whole), 64 * 1024):
            writer.write(whole[at : at + 64 * 1024])
            await writer.drain()
        return True

    return SocketGitLab(answer)


@pytest.fixture
async def client_of(make_settings: Callable[..., Settings]) -> AsyncIterator[Callable[[str], GitLabClient]]:
    made: list[GitLabClient] = []

    async def no_wait(seconds: float) -> None:
        return None

    def make(url: str) -> GitLabClient:
        made.append(GitLabClient(make_settings(gitlab={"url": url}).gitlab, sleep=no_wait))
        return made[-1]

    yield make
    for client in made:
        await client.aclose()


async def peak_of(read: Callable[[], Awaitable[object]]) -> tuple[object, float]:
    """What ``read()`` returned (or raised) and the most memory Python held meanwhile, in MiB."""
    tracemalloc.start()
    try:
        try:
            outcome: object = await read()
        except Exception as exc:
            outcome = exc
        return outcome, tracemalloc.get_traced_memory()[1] / MIB
    finally:
        tracemalloc.stop()


async def test_a_large_answer_is_held_once_while_read() -> None:
    body = b"x" * (16 * MIB)  # a raw file of 16 MiB, under the 64 MiB bound
    gitlab = serving(body, {"Content-Type": "text/plain"})
    await gitlab.start()
    transport = AiohttpTransport(ssl_context=ssl.create_default_context())
    deadline = asyncio.get_running_loop().time() + 30
    try:
        got, peak = await peak_of(
            lambda: transport.exchange("GET", f"{gitlab.url}/raw", {}, None, timeouts={}, deadline=deadline)
        )
    finally:
        await transport.aclose()
        await gitlab.stop()
    assert isinstance(got, tuple) and got[3] == body, got
    del got
    assert peak < 16 * 1.5, f"{peak:.1f} MiB held to read 16 MiB"  # a copy at the end would be 32


async def test_countless_values_are_refused_as_they_arrive_not_after_the_whole_answer(
    client_of: Callable[[str], GitLabClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(json_budget, "MAX_ANSWER_VALUES", 10_000)
    # 16 MiB of `{},` decoded from about 16 KB on the wire; the bound is met after 30 KB of it.
    bomb = gzip.compress(b"[" + b"{}," * (16 * MIB // 3) + b"{}]")
    gitlab = serving(bomb, {"Content-Encoding": "gzip", "Content-Type": "application/json"})
    await gitlab.start()
    client = client_of(gitlab.url)
    try:
        got, peak = await peak_of(
            lambda: client.rest(
                "GET",
                "/projects/{id}/jobs/{job_id}/artifacts/tree",
                credential=service_credential("glpat-x"),
                path_params={"id": 1, "job_id": 2},
            )
        )
    finally:
        await gitlab.stop()
    assert isinstance(got, GitLabUpstreamError), got
    assert "more than 10,000 JSON values in one answer" in got.message
    assert "check GITLAB_URL" in got.message
    assert len(gitlab.received) == 1  # not retried: the same request gets the same answer
    assert peak < 4, f"{peak:.1f} MiB held before the answer was refused"


async def test_a_graphql_error_of_megabytes_is_told_briefly(client_of: Callable[[str], GitLabClient]) -> None:
    # Within every bound on what an answer decodes to, but nothing a person reads: the caller
    # (and the log) get GitLab's first words, not 8 MiB of them searched and formatted.
    message = "a" * (8 * MIB)
    body = json.dumps({"data": None, "errors": [{"message": message}] * 2 + [{"message": "b"}] * 100})
    gitlab = serving(body.encode(), {"Content-Type": "application/json"})
    await gitlab.start()
    client = client_of(gitlab.url)
    try:
        with pytest.raises(GitLabBadRequest) as caught:
            await client.graphql("get_pipeline", QUERY_VARS, credential=service_credential("glpat-x"))
    finally:
        await gitlab.stop()
    assert caught.value.message.startswith("GitLab rejected the request: aaa")
    assert len(caught.value.message) < 600


async def test_a_graphql_answer_of_one_huge_string_is_refused_at_its_own_cap(
    client_of: Callable[[str], GitLabClient],
) -> None:
    # One string passes the count of values; decoding it would hold the bytes and the text at once.
    # GraphQL answers stop at 24 MiB, below the 64 MiB every other answer may reach.
    body = json.dumps({"data": {"x": "a" * (25 * MIB)}}).encode()
    gitlab = serving(body, {"Content-Type": "application/json"})
    await gitlab.start()
    client = client_of(gitlab.url)
    try:
        with pytest.raises(GitLabUpstreamError, match=r"answer was larger than 24 MiB"):
            await client.graphql("get_pipeline", QUERY_VARS, credential=service_credential("glpat-x"))
    finally:
        await gitlab.stop()
