"""``structured_text``: the text block of a result with ``structuredContent`` is the JSON copy (default,
as MCP 2025-11-25 advises) or, opted in per deployment or per client token, a short summary."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest
import respx

from gateway.config import Settings
from gateway.errors import not_found
from gateway.gitlab.credentials import service_credential
from gateway.mcp.http.auth import Authenticator
from gateway.mcp.protocol.shaping import shaped_tool_result
from gateway.tools.caller import Caller
from gateway.tools.context import CallInfo, ToolContext
from gateway.tools.result import ToolResult
from tests.unit.gitlab.tool_env import ToolEnv

GITLAB = "https://gitlab.example.com"
JOB_URL = f"{GITLAB}/api/v4/projects/grp%2Fsub%2Fproj/jobs/5024"
FILE_URL = f"{JOB_URL}/artifacts/logs/integration.log"
#: A 38.8 KB text artifact.
LOG = "".join(f"{i:05d} INFO step {i % 97} finished in {i % 89} ms\n" for i in range(1100)).encode()[:38_800]
VERSION = "2025-11-25"
PM_TOKEN = "pm-client-token-0123456789abcdef"
DEV_TOKEN = "dev-client-token-0123456789abcdef"


@pytest.fixture
def router() -> Iterator[respx.MockRouter]:
    with respx.mock(assert_all_mocked=True, assert_all_called=False) as mocked:
        yield mocked


@pytest.fixture
async def env(make_settings: Callable[..., Settings], router: respx.MockRouter) -> AsyncIterator[ToolEnv]:
    async with httpx.AsyncClient() as http:
        yield ToolEnv(make_settings(), http)


def size(answer: dict[str, Any]) -> int:
    return len(json.dumps(answer, ensure_ascii=False, separators=(",", ":")).encode())


async def test_summary_halves_a_large_artifact_answer(env: ToolEnv, router: respx.MockRouter) -> None:
    router.get(JOB_URL).respond(
        200,
        json={
            "id": 5024,
            "name": "integration",
            "status": "failed",
            "web_url": f"{GITLAB}/grp/sub/proj/-/jobs/5024",
            "artifacts": [{"file_type": "archive", "size": 40960, "filename": "artifacts.zip"}],
            "artifacts_expire_at": "2099-01-01T00:00:00.000Z",
        },
    )
    router.get(FILE_URL).respond(200, content=LOG)
    tool = env.registry.resolve("get_artifact_file")
    assert tool is not None
    caller = Caller(agent_id=None, credential=service_credential("glpat-service-token"))
    ctx = ToolContext(env.services, CallInfo(request_id="req-1", caller=caller))
    arguments = {"project_id": "grp/sub/proj", "job_id": 5024, "artifact_path": "logs/integration.log"}
    result = await env.registry.call(tool, ctx, {**arguments, "byte_limit": 65536})
    assert not result.is_error and result.structured["content"] == LOG.decode()

    before = shaped_tool_result(VERSION, result)
    after = shaped_tool_result(VERSION, result, summary_text=True)
    assert after["structuredContent"] == before["structuredContent"]
    assert [block["text"] for block in before["content"]][-1] == result.structured_json
    assert len(after["content"]) == 1 and result.structured_json not in after["content"][0]["text"]
    print(
        f"\nget_artifact_file, {len(LOG)} B artifact: json {size(before)} B, summary {size(after)} B "
        f"({size(after) / size(before):.0%})"
    )
    print("summary text:", after["content"][0]["text"][:300])
    assert size(after) < 0.55 * size(before)


def test_summary_keeps_the_tools_own_text_else_names_the_keys() -> None:
    with_text = ToolResult(structured={"id": 1, "status": "ok"}, text="Pipeline 1 passed.")
    assert with_text.to_mcp(summary_text=True)["content"] == [{"type": "text", "text": "Pipeline 1 passed."}]
    plain = ToolResult(structured={"id": 1, "status": "ok"})
    assert plain.to_mcp(summary_text=True)["content"] == [
        {"type": "text", "text": "The answer is in structuredContent; its top-level keys: id, status."}
    ]
    # Default: the JSON copy, for clients that do not read structuredContent.
    assert plain.to_mcp()["content"] == [{"type": "text", "text": '{"id":1,"status":"ok"}'}]


def test_error_results_keep_their_message_and_details() -> None:
    result = ToolResult.from_error(not_found("Job 9 not found.", job_id=9))
    assert result.to_mcp(summary_text=True) == result.to_mcp()
    assert result.to_mcp(summary_text=True)["content"][0]["text"] == "Job 9 not found."


def test_the_deployment_default_and_a_client_tokens_own_choice(
    make_settings: Callable[..., Settings],
) -> None:
    tokens = [
        {"token": PM_TOKEN, "agent_id": "pm"},
        {"token": DEV_TOKEN, "agent_id": "dev", "structured_text": "json"},
    ]
    auth = Authenticator(make_settings(structured_text="summary", client_tokens=tokens))

    def caller(token: str) -> Caller:
        return auth.authenticate({"Authorization": f"Bearer {token}"}, "127.0.0.1", require_gitlab=True)

    assert caller(PM_TOKEN).summary_text and not caller(DEV_TOKEN).summary_text
    default = Authenticator(make_settings(client_tokens=[{**tokens[0], "structured_text": "summary"}]))
    assert default.authenticate(
        {"Authorization": f"Bearer {PM_TOKEN}"}, "127.0.0.1", require_gitlab=True
    ).summary_text
    assert not Authenticator(make_settings()).authenticate({}, "127.0.0.1", require_gitlab=True).summary_text
