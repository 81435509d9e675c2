"""The GitLab client: retries, ``Retry-After``, typed errors, headers, encoding, TLS and proxies.

GitLab is mocked with respx (https://lundberg.github.io/respx/); sleeps are faked and recorded,
except in the one test that measures that a real wait does not block the event loop.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
import respx

from gateway.config import Settings
from gateway.gitlab import retries
from gateway.gitlab.attempt_errors import AGENT_ADVICE
from gateway.gitlab.client import GitLabClient
from gateway.gitlab.credentials import ANONYMOUS, Credential, service_credential
from gateway.gitlab.errors import (
    GitLabBadRequest,
    GitLabConflict,
    GitLabCursorRefused,
    GitLabError,
    GitLabMaybeSent,
    GitLabNotFound,
    GitLabRateLimited,
    GitLabUnauthorized,
    GitLabUpstreamError,
)
from gateway.gitlab.http import build_ssl_context
from gateway.gitlab.operation_loader import load_operation, operation_name
from gateway.gitlab.urls import EncodedId, encode_project
from gateway.observability.metrics import Metrics
from gateway.tools.failures import as_tool_error

GITLAB = "https://gitlab.example.com"
GRAPHQL = f"{GITLAB}/api/graphql"
API = f"{GITLAB}/api/v4"
SERVICE = service_credential("glpat-service-token")
DATA = {"data": {"project": {"id": "gid://gitlab/Project/1"}}}
VARS = {
    "byId": False,
    "fullPath": "g/p",
    "projectIds": [],
    "pipelineId": "gid://gitlab/Ci::Pipeline/1",
    "includeJobs": False,
    "includeDownstreamPipelines": False,
    "includeBridgeJobs": False,
}


class Sleeps(list[float]):
    """A fake ``sleep`` that records what it was asked to wait."""

    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def router() -> Any:
    with respx.mock(assert_all_called=False) as mock:
        yield mock


@pytest.fixture
async def make_client(
    make_settings: Callable[..., Settings], sleeps: Sleeps
) -> AsyncIterator[Callable[..., GitLabClient]]:
    clients: list[httpx.AsyncClient] = []

    def make(**gitlab: Any) -> GitLabClient:
        http = httpx.AsyncClient()
        clients.append(http)
        return GitLabClient(make_settings(gitlab=gitlab).gitlab, metrics=Metrics(), http=http, sleep=sleeps)

    yield make
    for http in clients:
        await http.aclose()


async def query(client: GitLabClient, credential: Credential = SERVICE) -> dict[str, Any]:
    return await client.graphql("get_pipeline", VARS, credential=credential, request_id="req-1")


async def mutate(client: GitLabClient) -> dict[str, Any]:
    return await client.graphql("get_pipeline", VARS, credential=SERVICE, request_id="req-1", mutation=True)


# -- the request ----------------------------------------------------------------------------------


async def test_graphql_request_body_and_headers(
    make_client: Callable[..., GitLabClient], router: Any
) -> None:
    route = router.post(GRAPHQL).respond(200, json=DATA)
    data = await query(make_client())
    assert data == DATA["data"]
    request = route.calls.last.request
    body = json.loads(request.content)
    assert body == {
        "query": load_operation("get_pipeline"),
        "operationName": "getPipeline",
        "variables": VARS,
    }
    assert request.headers["PRIVATE-TOKEN"] == "glpat-service-token"
    assert request.headers["X-Request-Id"] == "req-1"
    assert request.headers["Accept"] == "application/json"
    assert request.headers["User-Agent"].startswith("gitlab-mcp-gateway/")
    assert "Authorization" not in request.headers


async def test_none_variables_are_not_sent(make_client: Callable[..., GitLabClient], router: Any) -> None:
    route = router.post(GRAPHQL).respond(200, json=DATA)
    await make_client().graphql("get_pipeline", {**VARS, "after": None}, credential=SERVICE)
    assert "after" not in json.loads(route.calls.last.request.content)["variables"]
    assert "X-Request-Id" not in route.calls.last.request.headers


def test_operation_name_is_read_from_the_document() -> None:
    assert operation_name("get_pipeline") == "getPipeline"
    with pytest.raises(FileNotFoundError):
        load_operation("no_such_operation")


@pytest.mark.parametrize(
    ("credential", "expected", "absent"),
    [
        (service_credential("glpat-svc"), {"PRIVATE-TOKEN": "glpat-svc"}, ["Authorization"]),
        (
            Credential(header="PRIVATE-TOKEN", token="glpat-caller", source="passthrough"),
            {"PRIVATE-TOKEN": "glpat-caller"},
            ["Authorization"],
        ),
        (
            Credential(header="Authorization", token="oauth-caller", source="passthrough"),
            {"Authorization": "Bearer oauth-caller"},
            ["PRIVATE-TOKEN"],
        ),
        (ANONYMOUS, {}, ["PRIVATE-TOKEN", "Authorization"]),
    ],
    ids=["service", "passthrough-private-token", "passthrough-bearer", "anonymous"],
)
async def test_credential_modes_send_exactly_their_header(
    make_client: Callable[..., GitLabClient],
    router: Any,
    credential: Credential,
    expected: dict[str, str],
    absent: list[str],
) -> None:
    route = router.post(GRAPHQL).respond(200, json=DATA)
    await query(make_client(), credential)
    headers = route.calls.last.request.headers
    for name, value in expected.items():
        assert headers[name] == value
    for name in absent:
        assert name not in headers


async def test_rest_path_parameters_are_encoded_exactly_once(
    make_client: Callable[..., GitLabClient], router: Any
) -> None:
    route = router.get(f"{API}/projects/grp%2Fsub%2Fproj/repository/tags").respond(200, json=[{"name": "v1"}])
    client = make_client()
    for project in ("grp/sub/proj", "grp%2Fsub%2Fproj"):
        tags = await client.rest(
            "GET",
            "/projects/{id}/repository/tags",
            credential=SERVICE,
            path_params={"id": encode_project(project)},
            params={"search": "^v"},
        )
        assert tags == [{"name": "v1"}]
        assert (
            route.calls.last.request.url.raw_path
            == b"/api/v4/projects/grp%2Fsub%2Fproj/repository/tags?search=%5Ev"
        )
    route_id = router.get(f"{API}/projects/42/pipelines/7").respond(200, json={"id": 7})
    assert await client.rest(
        "GET",
        "/projects/{id}/pipelines/{pipeline_id}",
        credential=SERVICE,
        path_params={"id": 42, "pipeline_id": EncodedId(7)},
    ) == {"id": 7}
    assert route_id.call_count == 1


@pytest.mark.parametrize("value", ["grp/proj", "..", "a?b=1", "a#b", "a b", ""])
async def test_rest_refuses_a_path_parameter_that_is_not_one_segment(
    make_client: Callable[..., GitLabClient], router: Any, value: str
) -> None:
    with pytest.raises(ValueError, match="not one encoded path segment"):
        await make_client().rest("GET", "/projects/{id}", credential=SERVICE, path_params={"id": value})
    assert not router.calls


async def test_sub_path_and_api_suffix_are_normalised(
    make_client: Callable[..., GitLabClient], router: Any
) -> None:
    route = router.post("https://gitlab.example.com/gitlab/api/graphql").respond(200, json=DATA)
    rest = router.get("https://gitlab.example.com/gitlab/api/v4/version").respond(200, json={"version": "18"})
    client = make_client(url="https://GitLab.example.com/gitlab/api/v4/")
    await query(client)
    await client.rest("GET", "/version", credential=SERVICE)
    assert route.call_count == 1 and rest.call_count == 1
    assert (
        client.web_url("/gitlab/g/p/-/pipelines/1") == "https://gitlab.example.com/gitlab/g/p/-/pipelines/1"
    )


# -- retries and Retry-After ------------------------------------------------------------------------


async def test_429_with_retry_after_seconds_is_retried_after_that_wait(
    make_client: Callable[..., GitLabClient], router: Any, sleeps: Sleeps
) -> None:
    route = router.post(GRAPHQL).mock(
        side_effect=[httpx.Response(429, headers={"Retry-After": "1"}), httpx.Response(200, json=DATA)]
    )
    client = make_client()
    assert await query(client) == DATA["data"]
    assert route.call_count == 2
    assert len(sleeps) == 1 and 1.0 <= sleeps[0] < 1.3
    assert client.metrics is not None
    assert client.metrics.gitlab_retries.labels("get_pipeline")._value.get() == 1


async def test_retry_after_as_an_http_date(
    make_client: Callable[..., GitLabClient], router: Any, sleeps: Sleeps
) -> None:
    when = email.utils.formatdate(time.time() + 6, usegmt=True)
    router.post(GRAPHQL).mock(
        side_effect=[httpx.Response(429, headers={"Retry-After": when}), httpx.Response(200, json=DATA)]
    )
    await query(make_client())
    assert 4.0 <= sleeps[0] <= 6.3


async def test_ratelimit_reset_is_used_without_retry_after(
    make_client: Callable[..., GitLabClient], router: Any, sleeps: Sleeps
) -> None:
    reset = str(int(time.time()) + 3)
    router.post(GRAPHQL).mock(
        side_effect=[httpx.Response(429, headers={"RateLimit-Reset": reset}), httpx.Response(200, json=DATA)]
    )
    await query(make_client())
    assert 1.5 <= sleeps[0] <= 3.3


async def test_429_without_hints_backs_off_and_advertises_a_period(
    make_client: Callable[..., GitLabClient], router: Any, sleeps: Sleeps
) -> None:
    router.post(GRAPHQL).respond(429)
    with pytest.raises(GitLabRateLimited) as caught:
        await query(make_client(retry_attempts=3))
    assert len(sleeps) == 2 and all(0 < s <= 8.5 for s in sleeps)
    assert caught.value.retry_after_seconds == 60
    assert caught.value.message == "Rate limited by GitLab. Retry after 60 seconds."


async def test_429_past_the_retry_budget_is_rate_limited(
    make_client: Callable[..., GitLabClient], router: Any, sleeps: Sleeps
) -> None:
    route = router.post(GRAPHQL).respond(429, headers={"Retry-After": "2", "RateLimit-Name": "throttle_api"})
    with pytest.raises(GitLabRateLimited) as caught:
        await query(make_client(retry_attempts=4))
    err = caught.value
    assert route.call_count == 4 and len(sleeps) == 3
    assert err.retry_after_seconds == 2 and err.limit_name == "throttle_api"
    assert as_tool_error(err).to_structured() == {
        "error": {
            "reason": "rate_limited",
            "message": "Rate limited by GitLab (throttle_api). Retry after 2 seconds.",
            "status": 429,
            "request_id": "req-1",
            "retry_after_seconds": 2,
            "limit": "throttle_api",
        }
    }


async def test_a_retry_after_longer_than_the_gateway_waits_fails_at_once(
    make_client: Callable[..., GitLabClient], router: Any, sleeps: Sleeps
) -> None:
    route = router.post(GRAPHQL).respond(429, headers={"Retry-After": "120"})
    with pytest.raises(GitLabRateLimited) as caught:
        await query(make_client(max_retry_after_seconds=10))
    assert route.call_count == 1 and sleeps == []
    assert caught.value.retry_after_seconds == 120


async def test_no_wait_crosses_the_deadline(
    make_client: Callable[..., GitLabClient], router: Any, sleeps: Sleeps
) -> None:
    route = router.post(GRAPHQL).respond(503, headers={"Retry-After": "5"})
    with pytest.raises(GitLabUpstreamError):
        await query(make_client(retry_deadline_seconds=3))
    assert route.call_count == 1 and sleeps == []


@pytest.mark.parametrize("status", [502, 503, 504])
async def test_gateway_errors_are_retried_for_reads(
    make_client: Callable[..., GitLabClient], router: Any, sleeps: Sleeps, status: int
) -> None:
    route = router.post(GRAPHQL).mock(side_effect=[httpx.Response(status), httpx.Response(200, json=DATA)])
    assert await query(make_client()) == DATA["data"]
    assert route.call_count == 2 and len(sleeps) == 1


async def test_persistent_503_ends_as_upstream_error(
    make_client: Callable[..., GitLabClient], router: Any, sleeps: Sleeps
) -> None:
    route = router.post(GRAPHQL).respond(503, json={"message": "down for maintenance"})
    with pytest.raises(GitLabUpstreamError) as caught:
        await query(make_client(retry_attempts=2))
    assert route.call_count == 2
    assert caught.value.status == 503
    assert caught.value.message == "GitLab failed with status 503: down for maintenance; try again later."


async def test_500_is_not_retried(
    make_client: Callable[..., GitLabClient], router: Any, sleeps: Sleeps
) -> None:
    route = router.post(GRAPHQL).respond(500)
    with pytest.raises(GitLabUpstreamError):
        await query(make_client())
    assert route.call_count == 1 and sleeps == []


@pytest.mark.parametrize(
    "failure",
    [
        httpx.ConnectError("refused"),
        httpx.ConnectTimeout("slow"),
        httpx.ReadTimeout("slow"),
        httpx.RemoteProtocolError("reset"),
    ],
)
async def test_reads_are_retried_on_transport_errors(
    make_client: Callable[..., GitLabClient], router: Any, sleeps: Sleeps, failure: Exception
) -> None:
    route = router.post(GRAPHQL).mock(side_effect=[failure, httpx.Response(200, json=DATA)])
    assert await query(make_client()) == DATA["data"]
    assert route.call_count == 2


async def test_unreachable_gitlab_says_what_to_check(
    make_client: Callable[..., GitLabClient], router: Any
) -> None:
    router.post(GRAPHQL).mock(side_effect=httpx.ConnectError("refused"))
    with pytest.raises(GitLabUpstreamError) as caught:
        await query(make_client(retry_attempts=2))
    message = caught.value.message
    assert message.startswith(
        "Could not connect to GitLab at https://gitlab.example.com (connection refused; 2 attempts over "
    )
    assert message.endswith(
        "s): check gitlab.url (GITLAB_URL), the network and proxy settings (HTTPS_PROXY, NO_PROXY) "
        f"between the gateway and GitLab, and that GitLab is up. {AGENT_ADVICE}."
    )


def test_an_unreachable_gitlab_com_names_its_status_page() -> None:
    # Only gitlab.com has https://status.gitlab.com; a self-managed GitLab is not sent there.
    from types import SimpleNamespace

    from gateway.gitlab.attempt_errors import not_connected

    call: Any = SimpleNamespace(request_id=None)
    failure = not_connected(call, "https://gitlab.com", httpx.ConnectError("refused"))
    message = failure.final.message
    assert message.endswith(f"and that GitLab is up (https://status.gitlab.com). {AGENT_ADVICE}.")


@pytest.mark.parametrize(
    "failure, reason",
    [
        (
            httpx.ConnectError("ClientConnectorError: Cannot connect to host [Connection refused]"),
            "connection refused",
        ),
        (
            httpx.ConnectError("ClientConnectorDNSError: Cannot connect to host [Name or service not known]"),
            "host name not resolved",
        ),
    ],
    ids=["refused", "dns"],
)
async def test_a_gitlab_that_cannot_be_reached_is_retried_briefly(
    make_client: Callable[..., GitLabClient], router: Any, sleeps: Sleeps, failure: Exception, reason: str
) -> None:
    # The default policy gives reads 4 attempts over up to 30 s; a GitLab that refuses or does
    # not resolve gets 3 attempts, short waits, and an answer that says so.
    route = router.post(GRAPHQL).mock(side_effect=failure)
    with pytest.raises(GitLabUpstreamError) as caught:
        await query(make_client())
    assert route.call_count == 3
    assert len(sleeps) == 2 and all(0.2 <= s <= 0.5 for s in sleeps) and sum(sleeps) <= 1.0
    assert f"({reason}; 3 attempts over " in caught.value.message
    assert "gitlab.url (GITLAB_URL)" in caught.value.message
    # A name that does not resolve points at the name and the DNS, not at GitLab's status page.
    dns = reason == "host name not resolved"
    assert ("check the host name in gitlab.url" in caught.value.message) is dns
    assert ("that GitLab is up" in caught.value.message) is not dns


async def test_a_certificate_that_does_not_verify_is_not_retried(
    make_client: Callable[..., GitLabClient], router: Any, sleeps: Sleeps
) -> None:
    route = router.post(GRAPHQL).mock(
        side_effect=httpx.ConnectError("ClientConnectorCertificateError: [SSL: CERTIFICATE_VERIFY_FAILED]")
    )
    with pytest.raises(GitLabUpstreamError) as caught:
        await query(make_client())
    assert route.call_count == 1 and sleeps == []
    assert caught.value.message == (
        "Could not connect to GitLab at https://gitlab.example.com (TLS handshake failed; 1 attempt): "
        f"check GitLab's TLS certificate; for a private CA set gitlab.ca_bundle. {AGENT_ADVICE}."
    )


async def test_a_connect_timeout_is_not_retried_past_the_connect_window(
    make_client: Callable[..., GitLabClient], router: Any, sleeps: Sleeps, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A connect timeout takes gitlab.connect_timeout_seconds (5 s) by itself: past the window.
    monkeypatch.setattr(retries, "CONNECT_RETRY_SECONDS", 0.0)
    route = router.post(GRAPHQL).mock(side_effect=httpx.ConnectTimeout("slow"))
    with pytest.raises(GitLabUpstreamError, match=r"\(connecting timed out; 1 attempt\)"):
        await query(make_client())
    assert route.call_count == 1 and sleeps == []


async def test_server_errors_on_reads_keep_their_retries(
    make_client: Callable[..., GitLabClient], router: Any, sleeps: Sleeps
) -> None:
    route = router.post(GRAPHQL).respond(502)
    with pytest.raises(GitLabUpstreamError):
        await query(make_client())
    assert route.call_count == 4 and len(sleeps) == 3


async def test_the_tool_error_for_an_unreachable_gitlab_names_it_without_the_token(
    make_client: Callable[..., GitLabClient], router: Any
) -> None:
    router.post(GRAPHQL).mock(side_effect=httpx.ConnectError("refused"))
    with pytest.raises(GitLabUpstreamError) as caught:
        await query(make_client())
    error = as_tool_error(caught.value).to_structured()["error"]
    assert "https://gitlab.example.com" in error["message"] and "3 attempts" in error["message"]
    assert "glpat-service-token" not in json.dumps(error)


# -- mutations: never resent once they may have reached GitLab ---------------------------------------


@pytest.mark.parametrize(
    "failure",
    [
        httpx.ReadTimeout("slow"),
        httpx.RemoteProtocolError("connection reset"),
        httpx.WriteError("broken"),
        httpx.Response(502),
        httpx.Response(503),
        httpx.Response(500),
    ],
    ids=["timeout", "reset", "write-error", "502", "503", "500"],
)
async def test_mutation_is_not_retried_after_it_may_have_been_sent(
    make_client: Callable[..., GitLabClient], router: Any, sleeps: Sleeps, failure: Any
) -> None:
    route = router.post(GRAPHQL).mock(side_effect=[failure, httpx.Response(200, json=DATA)])
    with pytest.raises(GitLabMaybeSent) as caught:
        await mutate(make_client())
    assert route.call_count == 1 and sleeps == []
    assert caught.value.reason == "upstream_error"
    assert "may or may not have been made" in caught.value.message


@pytest.mark.parametrize(
    "failure",
    [
        httpx.ConnectError("refused"),
        httpx.ConnectTimeout("slow"),
        httpx.PoolTimeout("busy"),
        httpx.Response(429, headers={"Retry-After": "1"}),
    ],
)
async def test_mutation_is_retried_when_it_provably_never_arrived(
    make_client: Callable[..., GitLabClient], router: Any, failure: Any
) -> None:
    route = router.post(GRAPHQL).mock(side_effect=[failure, httpx.Response(200, json=DATA)])
    assert await mutate(make_client()) == DATA["data"]
    assert route.call_count == 2


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(
            200, json={"data": {"pipelineCreate": None}, "errors": [{"message": "Internal server error"}]}
        ),
        httpx.Response(200, content=b"{oops", headers={"Content-Type": "application/json"}),
        httpx.Response(200, json=[1, 2]),
    ],
    ids=["errors-with-data", "not-json", "not-an-object"],
)
async def test_mutation_answer_that_may_follow_a_change_is_maybe_sent(
    make_client: Callable[..., GitLabClient], router: Any, sleeps: Sleeps, response: httpx.Response
) -> None:
    route = router.post(GRAPHQL).mock(return_value=response)
    with pytest.raises(GitLabMaybeSent) as caught:
        await mutate(make_client())
    assert route.call_count == 1 and sleeps == []
    assert "may or may not have been made" in caught.value.message
    assert caught.value.request_id == "req-1"


async def test_mutation_refused_before_it_ran_is_bad_request(
    make_client: Callable[..., GitLabClient], router: Any
) -> None:
    refused = {"errors": [{"message": "Argument 'ref' on InputObject is required"}]}
    router.post(GRAPHQL).respond(200, json=refused)
    with pytest.raises(GitLabBadRequest, match="GitLab rejected the request: Argument 'ref'"):
        await mutate(make_client())


@pytest.mark.parametrize(
    ("errors", "said"),
    [
        ([{"message": None, "path": ["project"]}], '{"message": null, "path": ["project"]}'),
        ([{"extensions": {"code": "x"}}], '{"extensions": {"code": "x"}}'),
        (["Field 'x' is missing", 7], "Field 'x' is missing; 7"),
        ("Field 'x' is missing", "Field 'x' is missing"),
    ],
)
async def test_graphql_errors_are_quoted_as_gitlab_wrote_them(
    make_client: Callable[..., GitLabClient], router: Any, errors: Any, said: str
) -> None:
    router.post(GRAPHQL).respond(200, json={"errors": errors})
    with pytest.raises(GitLabBadRequest) as caught:
        await query(make_client())
    assert caught.value.message == f"GitLab rejected the request: {said}"


#: GitLab's answer to a cursor its keyset connection cannot decode: the connection null in
#: ``data``, the error beside it with its path.
CURSOR_REFUSED: dict[str, Any] = {
    "data": {"project": {"pipeline": {"jobs": None}}},
    "errors": [
        {
            "message": "Please provide a valid cursor",
            "locations": [{"line": 5, "column": 7}],
            "path": ["project", "pipeline", "jobs"],
        }
    ],
}


@pytest.mark.parametrize(
    "message", ["Please provide a valid cursor", 'Invalid cursor: "garbage"'], ids=["keyset", "graphql-ruby"]
)
async def test_a_read_whose_cursor_gitlab_refuses_is_cursor_refused_at_once(
    make_client: Callable[..., GitLabClient], router: Any, sleeps: Sleeps, message: str
) -> None:
    payload = {**CURSOR_REFUSED, "errors": [{**CURSOR_REFUSED["errors"][0], "message": message}]}
    route = router.post(GRAPHQL).respond(200, json=payload)
    with pytest.raises(GitLabCursorRefused) as caught:
        await query(make_client())
    assert route.call_count == 1 and sleeps == []
    assert caught.value.reason == "bad_request" and caught.value.said == message
    assert caught.value.request_id == "req-1"


async def test_a_mutation_answered_with_a_cursor_error_keeps_the_mutation_rules(
    make_client: Callable[..., GitLabClient], router: Any
) -> None:
    """A cursor error is reported as a cursor refusal for reads only: a mutation that ran (data
    present) may have changed something, one refused before it ran is a plain bad request."""
    router.post(GRAPHQL).respond(200, json=CURSOR_REFUSED)
    with pytest.raises(GitLabMaybeSent):
        await mutate(make_client())
    router.post(GRAPHQL).respond(200, json={"errors": CURSOR_REFUSED["errors"]})
    with pytest.raises(GitLabBadRequest) as caught:
        await mutate(make_client())
    assert not isinstance(caught.value, GitLabCursorRefused)
    assert caught.value.message == "GitLab rejected the request: Please provide a valid cursor"


async def test_post_rest_answer_that_is_not_json_is_maybe_sent(
    make_client: Callable[..., GitLabClient], router: Any
) -> None:
    router.post(f"{API}/projects/1/pipeline").respond(201, content=b"created")
    with pytest.raises(GitLabMaybeSent, match="status 201 with a body that is not JSON"):
        await make_client().rest(
            "POST", "/projects/{id}/pipeline", credential=SERVICE, path_params={"id": 1}, json={"ref": "main"}
        )


async def test_post_rest_is_not_idempotent_by_default(
    make_client: Callable[..., GitLabClient], router: Any
) -> None:
    route = router.post(f"{API}/projects/1/pipeline").mock(
        side_effect=[httpx.Response(502), httpx.Response(201, json={})]
    )
    with pytest.raises(GitLabMaybeSent):
        await make_client().rest(
            "POST", "/projects/{id}/pipeline", credential=SERVICE, path_params={"id": 1}, json={"ref": "main"}
        )
    assert route.call_count == 1


# -- typed errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body", "error", "reason", "says"),
    [
        (
            401,
            {"message": "401 Unauthorized"},
            GitLabUnauthorized,
            "unauthorized",
            "GitLab refused the gateway's GITLAB_TOKEN (401: 401 Unauthorized). Its operator should "
            "check that it is valid and not expired",
        ),
        (403, {"message": "403 Forbidden"}, GitLabUnauthorized, "unauthorized", "`api` or `read_api` scope"),
        (404, {"message": "404 Project Not Found"}, GitLabNotFound, "not_found", "404 Project Not Found"),
        (
            400,
            {"message": {"ref": ["is missing"]}},
            GitLabBadRequest,
            "bad_request",
            "GitLab rejected the request (400): ref is missing.",
        ),
        (422, {"error": "name is invalid"}, GitLabBadRequest, "bad_request", "(422): name is invalid"),
        (409, {"message": "Resource lock"}, GitLabConflict, "conflict", "conflict (409): Resource lock"),
        (408, {}, GitLabUpstreamError, "upstream_error", "status 408"),
    ],
)
async def test_rest_statuses_become_typed_errors(
    make_client: Callable[..., GitLabClient],
    router: Any,
    status: int,
    body: Any,
    error: type[GitLabError],
    reason: str,
    says: str,
) -> None:
    router.get(f"{API}/projects/1").respond(status, json=body)
    with pytest.raises(error) as caught:
        await make_client().rest(
            "GET", "/projects/{id}", credential=SERVICE, path_params={"id": 1}, request_id="req-9"
        )
    assert caught.value.reason == reason
    assert says in caught.value.message
    assert caught.value.status == status and caught.value.request_id == "req-9"


@pytest.mark.parametrize(
    ("credential", "says"),
    [
        (
            SERVICE,
            "GitLab refused the gateway's GITLAB_TOKEN (403: 403 Forbidden). Its operator should",
        ),
        (
            Credential(header="PRIVATE-TOKEN", token="glpat-caller", source="passthrough"),
            "GitLab refused your token (403: 403 Forbidden). Check that the token you send is valid",
        ),
        (
            ANONYMOUS,
            "GitLab refused a request without a token (403: 403 Forbidden): this gateway has no GITLAB_TOKEN",
        ),
    ],
    ids=["service", "passthrough", "anonymous"],
)
async def test_a_refusal_names_whose_token_and_who_can_fix_it(
    make_client: Callable[..., GitLabClient], router: Any, credential: Credential, says: str
) -> None:
    router.get(f"{API}/projects/1").respond(403, json={"message": "403 Forbidden"})
    with pytest.raises(GitLabUnauthorized) as caught:
        await make_client().rest("GET", "/projects/{id}", credential=credential, path_params={"id": 1})
    assert caught.value.message.startswith(says)
    assert "glpat-" not in caught.value.message


async def test_graphql_404_means_a_wrong_gitlab_url(
    make_client: Callable[..., GitLabClient], router: Any
) -> None:
    router.post(GRAPHQL).respond(404, json={"message": "404 Not Found"})
    with pytest.raises(GitLabUpstreamError) as caught:
        await query(make_client())
    assert "has no GraphQL endpoint (/api/graphql answered 404)" in caught.value.message
    assert "Check GITLAB_URL, including any sub-path" in caught.value.message


@pytest.mark.parametrize(
    ("payload", "error", "says"),
    [
        (
            {
                "data": {"project": None},
                "errors": [
                    {
                        "message": "The resource that you are attempting to access does "
                        "not exist or you don't have permission to perform "
                        "this action"
                    }
                ],
            },
            GitLabNotFound,
            "does not exist",
        ),
        (
            {
                "errors": [
                    {"message": "Variable $pipelineId of type CiPipelineID! was provided invalid value"}
                ]
            },
            GitLabBadRequest,
            "GitLab rejected the request: Variable $pipelineId",
        ),
        ({"data": None}, GitLabNotFound, "GitLab returned no data for this request."),
        ([1, 2], GitLabUpstreamError, "something other than a JSON object"),
    ],
)
async def test_graphql_answers_become_typed_errors(
    make_client: Callable[..., GitLabClient], router: Any, payload: Any, error: type[GitLabError], says: str
) -> None:
    router.post(GRAPHQL).respond(200, json=payload)
    with pytest.raises(error) as caught:
        await query(make_client())
    assert says in caught.value.message


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(
            200, text="<!DOCTYPE html><html>Sign in</html>", headers={"Content-Type": "text/html"}
        ),
        httpx.Response(200, content=b"  <html><body>login</body></html>"),
    ],
    ids=["text/html", "no-content-type"],
)
async def test_html_page_is_an_error_saying_so(
    make_client: Callable[..., GitLabClient], router: Any, response: httpx.Response
) -> None:
    router.post(GRAPHQL).mock(return_value=response)
    with pytest.raises(GitLabUpstreamError) as caught:
        await query(make_client())
    assert caught.value.message == (
        "GitLab at https://gitlab.example.com answered get_pipeline with an HTML page instead of JSON "
        "(status 200): a proxy, SSO or login page probably sits in front of it. Check GITLAB_URL and the "
        "proxy settings (HTTPS_PROXY, NO_PROXY)."
    )


async def test_html_403_from_a_proxy_says_so(make_client: Callable[..., GitLabClient], router: Any) -> None:
    router.post(GRAPHQL).respond(
        403, text="<html>Access denied</html>", headers={"Content-Type": "text/html"}
    )
    with pytest.raises(GitLabUnauthorized) as caught:
        await query(make_client())
    assert "an HTML page, not GitLab's JSON" in caught.value.message


async def test_redirect_is_not_followed(make_client: Callable[..., GitLabClient], router: Any) -> None:
    route = router.post(GRAPHQL).respond(
        302, headers={"Location": "https://sso.example.com/login?SAMLRequest=x"}
    )
    with pytest.raises(GitLabUpstreamError) as caught:
        await query(make_client())
    assert route.call_count == 1
    assert "with a redirect (302) to https://sso.example.com/login." in caught.value.message
    assert "SAMLRequest" not in caught.value.message


async def test_json_that_is_not_json(make_client: Callable[..., GitLabClient], router: Any) -> None:
    router.post(GRAPHQL).respond(200, content=b"{oops", headers={"Content-Type": "application/json"})
    with pytest.raises(GitLabUpstreamError, match="a body that is not JSON"):
        await query(make_client())


async def test_errors_never_carry_the_token(make_client: Callable[..., GitLabClient], router: Any) -> None:
    router.post(GRAPHQL).respond(401, json={"message": "401 Unauthorized"})
    with pytest.raises(GitLabUnauthorized) as caught:
        await query(make_client())
    dumped = json.dumps(as_tool_error(caught.value).to_structured())
    assert "glpat-service-token" not in dumped
    assert "glpat-service-token" not in repr(SERVICE)


# -- waits really are asynchronous -----------------------------------------------------------------------


async def test_a_real_retry_after_wait_does_not_block_the_event_loop(
    make_settings: Callable[..., Settings],
) -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1

    with respx.mock() as router:
        router.post(GRAPHQL).mock(
            side_effect=[httpx.Response(429, headers={"Retry-After": "1"}), httpx.Response(200, json=DATA)]
        )
        async with httpx.AsyncClient() as http:
            client = GitLabClient(make_settings().gitlab, http=http)  # the default sleep: asyncio.sleep
            task = asyncio.create_task(ticker())
            started = time.monotonic()
            assert await query(client) == DATA["data"]
            elapsed = time.monotonic() - started
            task.cancel()
    assert elapsed >= 1.0
    assert ticks >= 15  # the loop kept running while the call waited


# -- the shared HTTP client --------------------------------------------------------------------------------


def test_bad_ca_bundle_is_a_clear_configuration_error(tmp_path: Any) -> None:
    bogus = tmp_path / "ca.pem"
    bogus.write_text("not a certificate")
    for path in (bogus, tmp_path / "missing.pem"):
        with pytest.raises(ValueError, match=r"gitlab.ca_bundle .* cannot be used"):
            build_ssl_context(path)


async def test_client_owns_and_closes_only_its_own_http_client(
    make_settings: Callable[..., Settings],
) -> None:
    own = GitLabClient(make_settings().gitlab)
    assert own.http.follow_redirects is False
    await own.aclose()
    assert own.http.is_closed
    async with httpx.AsyncClient() as injected:
        await GitLabClient(make_settings().gitlab, http=injected).aclose()
        assert not injected.is_closed


# -- GraphQL errors that say GitLab failed -------------------------------------------------------------

GITLAB_FAILED = [
    {"errors": [{"message": "Internal server error"}]},
    {
        "errors": [{"message": "Internal server error: undefined method `id' for nil"}],
        "data": {"project": None},
    },
    {
        "errors": [
            {"message": "Request timed out. Please try a less complex query or a smaller set of records."}
        ]
    },
    {"errors": [{"message": "Timeout on Project.pipeline", "path": ["project", "pipeline"]}], "data": {}},
]


@pytest.mark.parametrize(
    "payload", GITLAB_FAILED, ids=["internal", "internal-partial", "timed-out", "timeout-on"]
)
async def test_graphql_errors_saying_gitlab_failed_are_retried_upstream_errors_for_reads(
    make_client: Callable[..., GitLabClient], router: Any, sleeps: Sleeps, payload: Any
) -> None:
    route = router.post(GRAPHQL).mock(
        side_effect=[httpx.Response(200, json=payload), httpx.Response(200, json=DATA)]
    )
    assert await query(make_client()) == DATA["data"]
    assert route.call_count == 2 and len(sleeps) == 1

    route.mock(side_effect=None, return_value=httpx.Response(200, json=payload))
    with pytest.raises(GitLabUpstreamError) as caught:
        await query(make_client(retry_attempts=2))
    assert caught.value.reason == "upstream_error"
    assert "not the request's: try again later" in caught.value.message


@pytest.mark.parametrize(
    "payload", GITLAB_FAILED, ids=["internal", "internal-partial", "timed-out", "timeout-on"]
)
async def test_graphql_errors_saying_gitlab_failed_leave_a_mutation_outcome_unknown(
    make_client: Callable[..., GitLabClient], router: Any, sleeps: Sleeps, payload: Any
) -> None:
    route = router.post(GRAPHQL).respond(200, json=payload)
    with pytest.raises(GitLabMaybeSent):
        await mutate(make_client())
    assert route.call_count == 1 and sleeps == []


async def test_a_mutation_cancelled_while_gitlab_has_it_is_on_the_access_line(
    make_client: Callable[..., GitLabClient], router: Any
) -> None:
    """The MCP call was cancelled (its client went away) after the mutation was sent: the access
    line must still say that GitLab was asked, or nobody can tell the change may have been made."""
    from gateway.observability.logging import bind_request_id

    arrived = asyncio.Event()

    async def slow(request: httpx.Request) -> httpx.Response:
        arrived.set()
        await asyncio.sleep(60)
        return httpx.Response(200, json=DATA)

    router.post(GRAPHQL).mock(side_effect=slow)
    client = make_client()
    with bind_request_id("req-1") as trace:
        task = asyncio.create_task(mutate(client))
        await asyncio.wait_for(arrived.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert trace.fields() == {"gitlab_requests": 1, "gitlab": "get_pipeline:cancelled"}
