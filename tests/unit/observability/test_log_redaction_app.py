"""Tokens sent to the running app in every place a token can travel reach no log line, and the
request id is on the MCP line, on the GitLab line, in the ``X-Request-Id`` sent to GitLab and in
the error the caller gets.

The app runs in-process with the gateway's own log handler at DEBUG (so aiohttp's access log,
httpx's request lines and the GitLab client's debug lines are all written), in ``passthrough``
mode with client tokens configured; GitLab is mocked with respx and echoes the caller's token in
its error, as a misconfigured proxy or an old GitLab might.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any

import httpx
import pytest
import respx
from pydantic import Field

from gateway.config import Settings
from gateway.gitlab.attempt_errors import AGENT_ADVICE
from gateway.observability.logging import secrets_of
from gateway.server.app import create_app
from gateway.server.services import build_services
from gateway.tools import all_tools
from gateway.tools.context import ToolContext
from gateway.tools.registry import Annotations, Tool, ToolInput
from tests.unit.mcp.helpers import Mcp
from tests.unit.observability.conftest import LogCapture

GITLAB = "https://gitlab.example.com"
CLIENT_TOKEN = "pm-client-secret-7e1f0c2b9a8d"  # the caller's gateway secret (Authorization: Bearer)
GITLAB_TOKEN = "glpat-PassThrough0123456789"  # the caller's own GitLab token (PRIVATE-TOKEN)
OAUTH_TOKEN = "3f0c7a1e9b2d4c6a8e0f1b3d5c7a9e2f4b6d8c0a1e3f5b7d9c2a4e6f8b0d1c3e"  # no prefix at all
QUERY_TOKEN = "glpat-InTheQueryString000000"
ARG_TOKEN = "glpat-InsideAnArgument0000000"
SECRETS = [CLIENT_TOKEN, GITLAB_TOKEN, OAUTH_TOKEN, QUERY_TOKEN, ARG_TOKEN]


class LeakInput(ToolInput):
    note: str = Field(description="Anything")


async def _careless(ctx: ToolContext, args: LeakInput) -> dict[str, Any]:
    """A tool written carelessly: logs what it got, then fails with it in the message."""
    credential = ctx.call.caller.credential
    token = credential.token if credential is not None else ""
    logging.getLogger("gateway.tools").info(
        "careless tool got %s",
        args.note,
        extra={"headers": {"PRIVATE-TOKEN": token}, "credential": credential},
    )
    raise RuntimeError(f"upstream rejected Authorization: Bearer {OAUTH_TOKEN} and token {token}")


CARELESS = Tool(
    name="careless",
    description="Fails loudly.",
    input_model=LeakInput,
    handler=_careless,
    annotations=Annotations(read_only=True, open_world=False),
    toolset="ci",
)


@pytest.fixture
async def mcp(
    aiohttp_client: Any,
    make_settings: Callable[..., Settings],
    at_head: Callable[[Settings], Settings],
    capture_logs: Callable[..., LogCapture],
) -> AsyncIterator[tuple[Mcp, LogCapture]]:
    settings = make_settings(
        gitlab={"url": GITLAB, "token": None, "credential_mode": "passthrough"},
        client_tokens=[{"token": CLIENT_TOKEN, "agent_id": "pm"}],
    )
    capture = capture_logs(format="json", level="DEBUG", secrets=secrets_of(settings))
    async with httpx.AsyncClient() as gitlab_http:
        app = create_app(
            at_head(settings),
            services=partial(build_services, gitlab_http=gitlab_http),
            tools=[*all_tools(), CARELESS],
        )
        client = Mcp(await aiohttp_client(app), app)
        client.headers = {"Authorization": f"Bearer {CLIENT_TOKEN}", "PRIVATE-TOKEN": GITLAB_TOKEN}
        await client.initialize()
        yield client, capture


def _unauthorized(request: httpx.Request) -> httpx.Response:
    echoed = request.headers.get("PRIVATE-TOKEN", "")
    return httpx.Response(
        401,
        json={"message": f"401 Unauthorized: token {echoed} is invalid, also tried Bearer {OAUTH_TOKEN}"},
        headers={"X-Request-Id": request.headers.get("X-Request-Id", "")},
    )


async def test_no_token_in_any_log_line_and_one_request_id_throughout(mcp: tuple[Mcp, LogCapture]) -> None:
    client, capture = mcp
    with respx.mock(base_url=GITLAB, assert_all_called=False) as gitlab:
        graphql = gitlab.post("/api/graphql").mock(side_effect=_unauthorized)
        gitlab.route(host="gitlab.example.com").mock(side_effect=_unauthorized)

        # 1. a GitLab tool: the token goes to GitLab in a header, comes back in GitLab's error
        answer = await client.rpc(
            "tools/call", {"name": "get_pipeline", "arguments": {"id": "grp/proj", "pipeline_id": 7}}
        )
        # 2. a token inside an argument (a file URL with private_token=)
        await client.rpc(
            "tools/call",
            {
                "name": "get_repository_file",
                "arguments": {"url": f"{GITLAB}/grp/proj/-/blob/main/README.md?private_token={ARG_TOKEN}"},
            },
        )
        # 3. a token in the query string of the MCP request itself
        response = await client.client.post(
            f"/mcp?private_token={QUERY_TOKEN}&access_token={OAUTH_TOKEN}",
            json={"jsonrpc": "2.0", "id": 99, "method": "ping"},
            headers=client.request_headers(),
        )
        await response.read()
        # 4. a tool that logs the credential and crashes with tokens in the exception text
        crashed = await client.rpc("tools/call", {"name": "careless", "arguments": {"note": CLIENT_TOKEN}})
        # 5. a wrong client token (refused: 401) and a bearer where none is expected
        refused = await client.post(
            {"jsonrpc": "2.0", "id": 100, "method": "ping"},
            headers={"Authorization": f"Bearer {OAUTH_TOKEN}"},
        )
        await refused.read()

    assert graphql.called
    assert "error" in crashed or crashed["result"].get("isError")
    assert refused.status == 401

    records = capture.records()  # every line is one JSON object
    assert len(records) >= 8
    for secret in SECRETS:
        assert secret not in capture.text, [line for line in capture.lines if secret in line]
        assert secret[-12:] not in capture.text  # not even a tail of one

    # The request id of the get_pipeline call: one id on the MCP line, on the GitLab line,
    # in X-Request-Id to GitLab and in the error the caller got.
    error = answer["result"]["structuredContent"]["error"]
    assert error["reason"] == "unauthorized"
    request_id = error["request_id"]
    assert graphql.calls[0].request.headers["X-Request-Id"] == request_id
    lines = [r for r in records if r.get("request_id") == request_id]
    loggers = {r["logger"] for r in lines}
    assert {"gateway.mcp", "gateway.gitlab"} <= loggers, lines
    (mcp_line,) = [r for r in lines if r["logger"] == "gateway.mcp"]
    assert (mcp_line["method"], mcp_line["tool"]) == ("tools/call", "get_pipeline")
    assert (mcp_line["gitlab_requests"], mcp_line["gitlab"]) == (1, "get_pipeline:401")
    (gitlab_line,) = [r for r in lines if r["logger"] == "gateway.gitlab"]
    assert (gitlab_line["message"], gitlab_line["level"]) == ("gitlab request", "DEBUG")
    assert (gitlab_line["operation"], gitlab_line["status"]) == ("get_pipeline", 401)
    # A line a tool logs without naming the request still carries its id (bound by the transport).
    (careless,) = [r for r in records if r["logger"] == "gateway.tools"]
    (crash_line,) = [r for r in records if r["message"] == "mcp request" and r.get("tool") == "careless"]
    assert careless["request_id"] == crash_line["request_id"]


async def _call_get_pipeline(
    aiohttp_client: Any,
    settings: Settings,
    capture: LogCapture,
    gitlab_answers: list[httpx.Response] | Exception,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One get_pipeline call with GitLab answering ``gitlab_answers``: its answer and the log
    records written while it ran."""
    async with httpx.AsyncClient() as gitlab_http:
        app = create_app(settings, services=partial(build_services, gitlab_http=gitlab_http))
        client = Mcp(await aiohttp_client(app), app)
        await client.initialize()
        with respx.mock(base_url=GITLAB) as gitlab:
            gitlab.post("/api/graphql").mock(side_effect=gitlab_answers)
            before = len(capture.lines)
            answer = await client.rpc(
                "tools/call", {"name": "get_pipeline", "arguments": {"id": "grp/proj", "pipeline_id": 7}}
            )
    return answer, capture.records()[before:]


async def test_one_access_line_per_mcp_request_at_info(
    aiohttp_client: Any,
    make_settings: Callable[..., Settings],
    at_head: Callable[[Settings], Settings],
    capture_logs: Callable[..., LogCapture],
) -> None:
    settings = make_settings(gitlab={"url": GITLAB, "token": "glpat-service0123456789"})
    capture = capture_logs(format="json", level="INFO", secrets=secrets_of(settings))
    answer, records = await _call_get_pipeline(
        aiohttp_client,
        at_head(settings),
        capture,
        [httpx.Response(503), httpx.Response(200, json={"data": {"project": None}})],
    )
    assert answer["result"]["isError"] is True  # the project is not visible: not_found
    request_id = answer["result"]["structuredContent"]["error"]["request_id"]
    mine = [
        r for r in records if r.get("request_id") == request_id and r["message"] != "retrying GitLab request"
    ]
    (line,) = mine  # one line for the whole call, whatever it did upstream
    assert line["level"] == "INFO" and line["logger"] == "gateway.mcp"
    assert line["tool"] == "get_pipeline" and line["outcome"] == "not_found"
    assert line["duration_ms"] > 0
    assert (line["gitlab_requests"], line["gitlab"]) == (2, "get_pipeline:503 get_pipeline:200")
    assert "glpat-service0123456789" not in capture.text


async def test_a_call_gitlab_failed_is_a_warning_with_the_advice_whole(
    aiohttp_client: Any,
    make_settings: Callable[..., Settings],
    at_head: Callable[[Settings], Settings],
    capture_logs: Callable[..., LogCapture],
) -> None:
    settings = make_settings(gitlab={"url": GITLAB, "token": "glpat-service0123456789", "retry_attempts": 2})
    capture = capture_logs(format="json", level="INFO", secrets=secrets_of(settings))
    answer, records = await _call_get_pipeline(
        aiohttp_client, at_head(settings), capture, httpx.ConnectError("connection refused")
    )
    error = answer["result"]["structuredContent"]["error"]
    assert error["reason"] == "upstream_error"
    (line,) = [r for r in records if r["message"] == "mcp request"]
    # GitLab failing is what an operator acts on: WARNING, not INFO.
    assert (line["level"], line["outcome"], line["gitlab"]) == (
        "WARNING",
        "upstream_error",
        "get_pipeline:ConnectError get_pipeline:ConnectError",
    )
    # The retry line keeps GitLab's reason whole, advice included, however long.
    (retry,) = [r for r in records if r["message"] == "retrying GitLab request"]
    assert "more characters]" not in retry["reason"]
    assert retry["reason"].endswith(f"and that GitLab is up. {AGENT_ADVICE}.")
