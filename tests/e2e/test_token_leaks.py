"""No token reaches a caller: GitLab or a proxy in front of it may echo the request's token in an
error body, and the gateway quotes GitLab's words in tool errors. Every tool result is redacted
like the logs (``gateway.tools.result_redaction``). Checked on the raw HTTP answers, so no client
library can hide a leak.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.e2e.figures import figure_fixture
from tests.e2e.harness import GatewayProcess
from tests.e2e.rpc import Rpc
from tests.standin import dataset as ds
from tests.standin.fixtures import Standin, fresh_standin, standin  # noqa: F401  (fixtures)

pytestmark = pytest.mark.e2e

PIPELINE_ARGS = {"id": ds.PROJECT_PATH, "pipeline_id": ds.PIPELINE_ID}
#: Answers read, and how many held a token, for the printed figure.
ANSWERS = {"read": 0, "with a token": 0}
TOKENS = (ds.ALICE_TOKEN, ds.BOB_TOKEN)


def _leak_figure() -> str | None:
    if not ANSWERS["read"]:
        return None
    return (
        f"token leaks: {ANSWERS['read']} answers to calls whose GitLab answer echoed a token, "
        f"{ANSWERS['with a token']} held one"
    )


_figure = figure_fixture(_leak_figure)


@pytest.fixture(scope="module")
def gateway(standin: Standin, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:  # noqa: F811
    """Service mode with alice's token, GitLab answers not retried (each fault is seen once)."""
    env = standin.env(GATEWAY_GITLAB__RETRY_ATTEMPTS="1")
    proc = GatewayProcess(env=env, state_dir=tmp_path_factory.mktemp("leaks") / "state").start()
    yield proc
    proc.stop()


def rpc(gateway: GatewayProcess, tool: str, arguments: dict[str, Any], headers: dict[str, str]) -> str:
    """One tools/call in a fresh session; the whole answer body as text (no client decodes it)."""
    with Rpc(gateway.mcp_url, headers=headers) as session:
        message = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": tool, "arguments": arguments},
        }
        answer = session.post(json.dumps(message))
        assert answer.status_code == 200, answer.text
        ANSWERS["read"] += 1
        ANSWERS["with a token"] += any(token in answer.text for token in TOKENS)
        return answer.text


def echo_bodies(token: str) -> list[tuple[int, str, str]]:
    """Error bodies of the kinds seen in the wild: GitLab's JSON, a proxy's debug page, plain text."""
    return [
        (401, json.dumps({"message": f"401 Unauthorized: token {token} is invalid"}), "application/json"),
        (400, json.dumps({"error": f"bad request, headers were PRIVATE-TOKEN: {token}"}), "application/json"),
        (403, json.dumps({"message": f"forbidden for ?private_token={token}&x=1"}), "application/json"),
        (502, f"upstream said: {token}\n", "text/plain"),
    ]


@pytest.mark.parametrize("index", range(4))
async def test_the_service_token_echoed_in_an_error_never_reaches_the_caller(
    fresh_standin: Standin,  # noqa: F811
    gateway: GatewayProcess,
    index: int,
) -> None:
    status, body, ctype = echo_bodies(ds.ALICE_TOKEN)[index]
    fresh_standin.control.fail(status, body=body, content_type=ctype, count=None)
    text = rpc(gateway, "get_pipeline", PIPELINE_ARGS, {})
    assert '"isError":true' in text.replace(" ", "")
    assert ds.ALICE_TOKEN not in text
    assert "standin-alice" not in text


async def test_a_callers_own_token_echoed_in_an_error_never_comes_back(
    fresh_standin: Standin,  # noqa: F811
    start_gateway: Callable[..., GatewayProcess],
) -> None:
    gateway = start_gateway(
        env=fresh_standin.env(
            token=None, GATEWAY_GITLAB__CREDENTIAL_MODE="passthrough", GATEWAY_GITLAB__RETRY_ATTEMPTS="1"
        )
    )
    fresh_standin.control.fail(400, body=json.dumps({"message": f"token {ds.BOB_TOKEN} refused"}), count=None)
    text = rpc(gateway, "get_pipeline", PIPELINE_ARGS, {"PRIVATE-TOKEN": ds.BOB_TOKEN})
    assert '"isError":true' in text.replace(" ", "")
    assert ds.BOB_TOKEN not in text


async def test_file_content_keeps_its_bytes_but_never_the_service_token(
    fresh_standin: Standin,  # noqa: F811
    gateway: GatewayProcess,
) -> None:
    # Someone committed the gateway's own token; a neighbour file merely looks like a secret.
    fresh_standin.control.commit_file(ds.PROJECT_PATH, "leak.txt", f"token = {ds.ALICE_TOKEN}\n")
    lookalike = "variables:\n  token: $CI_JOB_TOKEN\nAuthorization: Bearer example-not-a-secret\n"
    fresh_standin.control.commit_file(ds.PROJECT_PATH, "ci-notes.txt", lookalike)
    text = rpc(gateway, "get_repository_file", {"project_id": ds.PROJECT_PATH, "file_path": "leak.txt"}, {})
    assert ds.ALICE_TOKEN not in text and "token = [REDACTED]" in text
    text = rpc(
        gateway, "get_repository_file", {"project_id": ds.PROJECT_PATH, "file_path": "ci-notes.txt"}, {}
    )
    assert json.dumps(lookalike)[1:-1] in text  # GitLab's data, byte for byte


async def test_a_token_pasted_into_an_activity_line_is_stored_redacted(gateway: GatewayProcess) -> None:
    # An agent logs what it did, token and all: neither the file people tail, nor the database
    # behind get_activity_log, nor the answer may keep it.
    pasted = "glpat-" + "abcdefghij" * 2
    line = f"pushed with {ds.ALICE_TOKEN} and {pasted}"
    rpc(gateway, "log_activity", {"message": line}, {"X-Agent-Id": "dev"})
    text = rpc(gateway, "get_activity_log", {"agent": "dev"}, {"X-Agent-Id": "dev"})
    on_disk = (gateway.state_dir / "logs" / "dev.log").read_text(encoding="utf-8")
    for stored in (text, on_disk):
        assert "pushed with [REDACTED] and glpat-[REDACTED]" in stored
        assert ds.ALICE_TOKEN not in stored and pasted not in stored
