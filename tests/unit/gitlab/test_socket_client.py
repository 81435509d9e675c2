"""The production HTTP client (aiohttp's pool; httpx's API for the rest) against GitLab stand-ins on real
sockets: what is resent and what is not, the deadline over a whole request, timeouts, redirects
and cookies."""

from __future__ import annotations

import asyncio
import gzip
import json
import ssl
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from gateway.config import Settings
from gateway.gitlab import json_budget, transport
from gateway.gitlab.client import GitLabClient
from gateway.gitlab.credentials import Credential, service_credential
from gateway.gitlab.errors import GitLabMaybeSent, GitLabUpstreamError
from gateway.gitlab.transport import AiohttpTransport
from tests.unit.gitlab.socket_gitlab import Received, SocketGitLab, http_response

# What is resent and what is not rests on socket-level events, which each event loop reports
# its own way: these run on asyncio's loop and on uvloop's, the gateway's default.
pytestmark = pytest.mark.both_loops

CREATED = {
    "data": {
        "pipelineCreate": {
            "pipeline": {
                "id": "gid://gitlab/Ci::Pipeline/7",
                "status": "CREATED",
                "ref": "main",
                "path": "/g/p/-/pipelines/7",
                "project": {"fullPath": "g/p", "webUrl": "http://x/g/p"},
            },
            "errors": [],
        }
    }
}
QUERY_VARS = {
    "byId": False,
    "fullPath": "g/p",
    "projectIds": [],
    "pipelineId": "gid://gitlab/Ci::Pipeline/1",
    "includeJobs": False,
    "includeDownstreamPipelines": False,
    "includeBridgeJobs": False,
}
PROJECT = {"data": {"project": None}}


@pytest.fixture(autouse=True)
def _no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def _client(
    make_settings: Callable[..., Settings], url: str, sleep: Any = None, **gitlab: Any
) -> GitLabClient:
    async def no_wait(seconds: float) -> None:
        return None

    settings = make_settings(gitlab={"url": url, **gitlab}).gitlab
    return GitLabClient(settings, sleep=sleep or no_wait)


async def _create(client: GitLabClient) -> dict[str, Any]:
    return await client.graphql(
        "pipeline_create",
        {"input": {"projectPath": "g/p", "ref": "main"}},
        credential=service_credential("glpat-x"),
        request_id="req-1",
        mutation=True,
    )


async def _query(client: GitLabClient, credential: Credential | None = None) -> dict[str, Any]:
    return await client.graphql(
        "get_pipeline", QUERY_VARS, credential=credential or service_credential("glpat-x"), request_id="r"
    )


class Pipelines:
    """A GitLab that creates one pipeline per create request it reads."""

    def __init__(self) -> None:
        self.created = 0

    async def answer(self, request: Received, writer: asyncio.StreamWriter) -> bool:
        self.created += 1
        writer.write(http_response(200, json.dumps(CREATED).encode()))
        await writer.drain()
        return True

    async def drop(self, request: Received, writer: asyncio.StreamWriter) -> bool:
        self.created += 1  # the mutation ran; the answer never left
        return False


async def test_refused_connection_is_retried_and_creates_one_pipeline(
    make_settings: Callable[..., Settings],
) -> None:
    pipelines = Pipelines()
    gitlab = SocketGitLab(pipelines.answer)  # not listening yet: the first connect is refused
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        if gitlab.server is None:
            await gitlab.start()  # GitLab comes up during the backoff

    client = _client(make_settings, gitlab.url, sleep)
    try:
        data = await _create(client)
    finally:
        await client.aclose()
        await gitlab.stop()
    assert data["pipelineCreate"]["pipeline"]["id"] == "gid://gitlab/Ci::Pipeline/7"
    assert len(waits) == 1  # one retry: nothing had been sent the first time
    assert pipelines.created == 1


async def test_connection_dropped_after_the_request_was_read_is_not_retried(
    make_settings: Callable[..., Settings],
) -> None:
    pipelines = Pipelines()
    gitlab = SocketGitLab(pipelines.drop)
    await gitlab.start()
    client = _client(make_settings, gitlab.url)
    try:
        with pytest.raises(GitLabMaybeSent) as caught:
            await _create(client)
    finally:
        await client.aclose()
        await gitlab.stop()
    assert len(gitlab.received) == 1
    assert pipelines.created == 1
    message = caught.value.message
    assert "may or may not have been made" in message
    assert "project's pipelines list" in message  # how to check before trying again


async def test_a_dropped_read_is_retried(make_settings: Callable[..., Settings]) -> None:
    answered = 0

    async def drop_once(request: Received, writer: asyncio.StreamWriter) -> bool:
        nonlocal answered
        answered += 1
        if answered == 1:
            return False
        writer.write(http_response(200, json.dumps(PROJECT).encode()))
        await writer.drain()
        return True

    gitlab = SocketGitLab(drop_once)
    await gitlab.start()
    client = _client(make_settings, gitlab.url)
    try:
        assert await _query(client) == PROJECT["data"]
    finally:
        await client.aclose()
        await gitlab.stop()
    assert len(gitlab.received) == 2


def _trickle(seconds_per_byte: float) -> Any:
    async def behaviour(request: Received, writer: asyncio.StreamWriter) -> bool:
        body = json.dumps(PROJECT).encode()
        writer.write(http_response(200, body)[: -len(body)])
        await writer.drain()
        for byte in body:
            await asyncio.sleep(seconds_per_byte)
            writer.write(bytes([byte]))
            await writer.drain()
        return True

    return behaviour


async def test_a_trickled_body_cannot_hold_a_call_past_its_deadline(
    make_settings: Callable[..., Settings],
) -> None:
    # Each byte comes well within the read timeout; the whole body would take ~7 s.
    gitlab = SocketGitLab(_trickle(0.25))
    await gitlab.start()
    client = _client(make_settings, gitlab.url, timeout_seconds=1, retry_deadline_seconds=2)
    started = time.monotonic()
    try:
        with pytest.raises(GitLabUpstreamError, match="did not answer get_pipeline in time"):
            await _query(client)
    finally:
        await client.aclose()
        await gitlab.stop()
    assert time.monotonic() - started < 3.0


async def test_a_trickled_mutation_answer_is_outcome_unknown(make_settings: Callable[..., Settings]) -> None:
    gitlab = SocketGitLab(_trickle(0.25))
    await gitlab.start()
    client = _client(make_settings, gitlab.url, timeout_seconds=1)
    started = time.monotonic()
    try:
        with pytest.raises(GitLabMaybeSent):
            await _create(client)
    finally:
        await client.aclose()
        await gitlab.stop()
    assert time.monotonic() - started < 2.0
    assert len(gitlab.received) == 1


async def test_a_silent_gitlab_times_out_reads_after_retries_and_mutations_at_once(
    make_settings: Callable[..., Settings],
) -> None:
    async def silent(request: Received, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(30)
        return False

    gitlab = SocketGitLab(silent)
    await gitlab.start()
    client = _client(make_settings, gitlab.url, timeout_seconds=0.3, retry_attempts=2)
    try:
        with pytest.raises(GitLabUpstreamError, match="in time"):
            await _query(client)
        assert len(gitlab.received) == 2
        with pytest.raises(GitLabMaybeSent):
            await _create(client)
        assert len(gitlab.received) == 3
    finally:
        await client.aclose()
        await gitlab.stop()


async def test_redirects_are_not_followed(make_settings: Callable[..., Settings]) -> None:
    async def redirect(request: Received, writer: asyncio.StreamWriter) -> bool:
        writer.write(http_response(302, headers={"Location": "http://127.0.0.1:1/users/sign_in?x=1"}))
        await writer.drain()
        return True

    gitlab = SocketGitLab(redirect)
    await gitlab.start()
    client = _client(make_settings, gitlab.url)
    try:
        with pytest.raises(
            GitLabUpstreamError, match=r"redirect \(302\) to http://127.0.0.1:1/users/sign_in"
        ):
            await _query(client)
    finally:
        await client.aclose()
        await gitlab.stop()
    assert len(gitlab.received) == 1


async def _endless(request: Received, writer: asyncio.StreamWriter) -> bool:
    """A 200 whose JSON body never ends (a proxy or GitLab gone wrong), until the reader leaves."""
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
    writer.write(b'{"data": {"project": {"x": "')
    try:
        for _ in range(10_000):
            writer.write(b"a" * 65536)
            await writer.drain()
    except ConnectionError:
        pass
    return False


async def test_an_endless_answer_is_cut_at_the_cap_and_not_retried(
    make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transport, "MAX_ANSWER_BYTES", 1024 * 1024)
    gitlab = SocketGitLab(_endless)
    await gitlab.start()
    client = _client(make_settings, gitlab.url)
    started = time.monotonic()
    try:
        with pytest.raises(GitLabUpstreamError, match=r"answer was larger than 1 MiB") as caught:
            await _query(client)
    finally:
        await client.aclose()
        await gitlab.stop()
    assert time.monotonic() - started < 5.0  # not the 30 s timeout: the read stopped at the cap
    assert len(gitlab.received) == 1  # the same request would get the same answer
    assert "check GITLAB_URL and any proxy" in caught.value.message


async def test_a_compressed_answer_is_capped_once_decoded_and_a_mutation_is_not_resent(
    make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transport, "MAX_ANSWER_BYTES", 1024 * 1024)
    bomb = gzip.compress(b'{"data": {"x": "' + b"a" * (8 * 1024 * 1024) + b'"}}')  # ~8 KiB on the wire

    async def compressed(request: Received, writer: asyncio.StreamWriter) -> bool:
        writer.write(http_response(200, bomb, {"Content-Encoding": "gzip"}))
        await writer.drain()
        return True

    gitlab = SocketGitLab(compressed)
    await gitlab.start()
    client = _client(make_settings, gitlab.url)
    try:
        with pytest.raises(GitLabMaybeSent, match=r"answer was larger than 1 MiB"):
            await _create(client)
    finally:
        await client.aclose()
        await gitlab.stop()
    assert len(gitlab.received) == 1


async def test_cookies_never_carry_over_between_callers(make_settings: Callable[..., Settings]) -> None:
    # One shared HTTP client serves every caller: a cookie GitLab (or a proxy) sets for one
    # caller's request must not ride along with the next caller's.
    async def set_cookie(request: Received, writer: asyncio.StreamWriter) -> bool:
        body = json.dumps(PROJECT).encode()
        writer.write(http_response(200, body, {"Set-Cookie": "_gitlab_session=abc; path=/"}))
        await writer.drain()
        return True

    gitlab = SocketGitLab(set_cookie)
    await gitlab.start()
    client = _client(make_settings, gitlab.url)
    try:
        await _query(client, Credential(header="PRIVATE-TOKEN", token="glpat-alice", source="passthrough"))
        await _query(client, Credential(header="PRIVATE-TOKEN", token="glpat-bob", source="passthrough"))
    finally:
        await client.aclose()
        await gitlab.stop()
    assert [r.headers.get("cookie") for r in gitlab.received] == [None, None]
    assert gitlab.received[1].headers["private-token"] == "glpat-bob"
    assert gitlab.connections == 1  # both went over one pooled keep-alive connection


async def test_a_deadline_already_passed_is_not_read_as_no_limit() -> None:
    async def silent(request: Received, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(30)
        return False

    gitlab = SocketGitLab(silent)
    await gitlab.start()
    http = httpx.AsyncClient(transport=AiohttpTransport(ssl_context=ssl.create_default_context()))
    started = time.monotonic()
    try:
        with pytest.raises((httpx.ReadTimeout, httpx.ConnectTimeout)):
            await http.get(gitlab.url, extensions={"deadline": asyncio.get_running_loop().time() - 1})
    finally:
        await http.aclose()
        await gitlab.stop()
    assert time.monotonic() - started < 2.0


async def test_rest_requests_carry_the_same_query_body_and_headers_as_through_httpx(
    make_settings: Callable[..., Settings],
) -> None:
    # Tool calls skip httpx's request building on the gateway's own client: what reaches GitLab
    # must stay what httpx sends (query encoding, JSON body, headers), gzip answers decoded.
    async def answer(request: Received, writer: asyncio.StreamWriter) -> bool:
        body = gzip.compress(json.dumps([{"name": "v1.0"}]).encode())
        writer.write(http_response(200, body, {"Content-Encoding": "gzip"}))
        await writer.drain()
        return True

    gitlab = SocketGitLab(answer)
    await gitlab.start()
    client = _client(make_settings, gitlab.url)
    credential = service_credential("glpat-x")
    try:
        tags = await client.rest(
            "GET",
            "/projects/{id}/repository/tags",
            credential=credential,
            path_params={"id": "g%2Fp"},
            params={"search": "^v1 é&x", "per_page": 100, "page": 2, "skip": None, "flag": True},
            request_id="req-7",
        )
        await client.rest(
            "POST",
            "/projects/{id}/thing",
            credential=credential,
            path_params={"id": 3},
            json={"a": "é", "n": 1},
        )
    finally:
        await client.aclose()
        await gitlab.stop()
    assert tags == [{"name": "v1.0"}]
    expected = httpx.Request(
        "GET",
        f"{gitlab.url}/api/v4/projects/g%2Fp/repository/tags",
        params={"search": "^v1 é&x", "per_page": 100, "page": 2, "skip": None, "flag": True},
    )
    get, post = gitlab.received
    assert get.line.split()[1] == expected.url.raw_path.decode()
    assert get.headers["private-token"] == "glpat-x" and get.headers["x-request-id"] == "req-7"
    assert "gzip" in get.headers["accept-encoding"] and get.headers["accept"] == "application/json"
    assert post.body == httpx.Request("POST", gitlab.url, json={"a": "é", "n": 1}).content
    assert post.headers["content-type"] == "application/json"


async def test_a_compressed_answer_of_countless_small_values_is_refused_before_decoding(
    make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The artifacts tree attack's shape, scaled down: `[{},{},...]` gzip-compressed, small on the
    # wire and within the byte cap, would decode to far more objects than bytes.
    monkeypatch.setattr(json_budget, "MAX_ANSWER_VALUES", 10_000)
    bomb = gzip.compress(b"[" + b"{}," * 50_000 + b"{}]")  # ~150 KB decoded, ~0.5 KB on the wire
    text = json.dumps({"content": "a, b, {c}, [d]; " * 20_000}).encode()  # commas inside a string

    async def answer(request: Received, writer: asyncio.StreamWriter) -> bool:
        if "/artifacts/tree" in request.line:
            writer.write(http_response(200, bomb, {"Content-Encoding": "gzip"}))
        else:
            writer.write(http_response(200, text))
        await writer.drain()
        return True

    gitlab = SocketGitLab(answer)
    await gitlab.start()
    client = _client(make_settings, gitlab.url)
    route = "/projects/{id}/jobs/{job_id}/artifacts/tree"
    try:
        with pytest.raises(
            GitLabUpstreamError, match=r"more than 10,000 JSON values in one answer"
        ) as caught:
            await client.rest(
                "GET", route, credential=service_credential("glpat-x"), path_params={"id": 1, "job_id": 2}
            )
        read = await client.rest(
            "GET", "/projects/{id}", credential=service_credential("glpat-x"), path_params={"id": 1}
        )
    finally:
        await client.aclose()
        await gitlab.stop()
    assert caught.value.reason == "upstream_error" and "check GITLAB_URL" in caught.value.message
    assert len(gitlab.received) == 2  # not retried: the same request gets the same answer
    assert read["content"].startswith("a, b, {c}")  # values inside a string are no structure


def test_nesting_deeper_than_the_decoders_is_refused_not_a_crash() -> None:
    from gateway.gitlab.call import HttpReply

    with pytest.raises(json_budget.AnswerTooComplex):
        HttpReply(200, {}, b"[" * 100_000 + b"]" * 100_000).json()


def test_separators_inside_a_string_that_began_in_the_first_bytes_are_not_refused_as_they_arrive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Values are counted only past the bound's worth of bytes; a string that opened before then
    # (a file's text) must still be told apart from structure, as the whole answer's check does.
    monkeypatch.setattr(json_budget, "MAX_ANSWER_VALUES", 10_000)
    answer = b'{"content": "' + b"a, [b], {c}; " * 5_000 + b'"}'
    budget = json_budget.ArrivingBudget()
    for start in range(0, len(answer), 4096):
        budget.feed(answer[start : start + 4096])
    json_budget.check_json_budget(answer)
    bomb = b"[" + b"{}," * 20_000 + b"{}]"
    budget = json_budget.ArrivingBudget()
    with pytest.raises(json_budget.AnswerTooComplex):
        for start in range(0, len(bomb), 4096):
            budget.feed(bomb[start : start + 4096])
    assert start < len(bomb) - 4096  # refused before its end arrived
