"""A person confirms a pipeline cancel (``confirm_destructive = true``), end to end: the gateway
process against the GitLab stand-in, driven by the official ``mcp`` SDK client in both eras.

The SDK (2.3.0) answers the question itself through its ``elicitation_callback``: in 2026-07-28 it
fulfils the input-required result and sends the request again with ``inputResponses`` and the
``requestState``; in a 2025-11-25 session it answers the ``elicitation/create`` the gateway sends
on the call's stream. The stand-in records every request: ``pipelineCancel`` must not reach it
before the answer, nor ever after a "no".
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.e2e.harness import GatewayProcess
from tests.local_http import TLS
from tests.standin import dataset as ds
from tests.standin.fixtures import Standin

pytestmark = pytest.mark.e2e

CANCEL = {"pipeline_id": ds.RUNNING_PIPELINE_ID, "action": "cancel"}
#: mode="auto" speaks 2026-07-28 with this gateway; "legacy" a 2025-11-25 session.
ERAS = {"2026-07-28": "auto", "2025-11-25": "legacy"}


@pytest.fixture(scope="module")
def gateway(standin: Standin, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    env = {**standin.env(), "GATEWAY_CONFIRM_DESTRUCTIVE": "true"}
    proc = GatewayProcess(env=env, state_dir=tmp_path_factory.mktemp("gateway") / "state").start()
    yield proc
    proc.stop()


@asynccontextmanager
async def client(url: str, mode: str, elicitation: Any = None) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(timeout=httpx2.Timeout(30.0, read=None), verify=TLS)
    async with (
        http,
        Client(
            streamable_http_client(url, http_client=http),
            mode=mode,
            read_timeout_seconds=60,
            elicitation_callback=elicitation,
        ) as session,
    ):
        yield session


def cancels(standin: Standin) -> int:
    return standin.control.graphql_requests(field="pipelineCancel")


@pytest.mark.parametrize("era", sorted(ERAS))
async def test_cancel_is_sent_only_after_a_person_says_yes(
    gateway: GatewayProcess, fresh_standin: Standin, era: str
) -> None:
    asked: list[tuple[str, int]] = []

    async def yes(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append((params.message, cancels(fresh_standin)))  # nothing sent while the person reads
        return types.ElicitResult(action="accept", content={"confirm": True})

    async with client(gateway.mcp_url, ERAS[era], yes) as session:
        assert session.protocol_version == era
        result = await session.call_tool("save_pipeline", CANCEL)
    assert not result.is_error, result.content
    assert result.structured_content["status"] == "canceled"
    assert asked == [
        (
            f"An agent asks to cancel GitLab pipeline {ds.RUNNING_PIPELINE_ID}: its running and pending "
            "jobs stop. Cancel it?",
            0,
        )
    ]
    assert cancels(fresh_standin) == 1


@pytest.mark.parametrize("era", sorted(ERAS))
@pytest.mark.parametrize("answer", ["no", "decline"])
async def test_no_sends_nothing_to_gitlab(
    gateway: GatewayProcess, fresh_standin: Standin, era: str, answer: str
) -> None:
    async def no(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        if answer == "decline":
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"confirm": False})

    async with client(gateway.mcp_url, ERAS[era], no) as session:
        result = await session.call_tool("save_pipeline", CANCEL)
    assert result.is_error
    error = result.structured_content["error"]
    assert error["reason"] == "declined"
    assert error["message"].startswith("The person asked did not confirm, so nothing was done")
    assert cancels(fresh_standin) == 0
    assert fresh_standin.control.pipeline(ds.RUNNING_PIPELINE_ID)["status"].lower() == "running"


@pytest.mark.parametrize("era", sorted(ERAS))
async def test_a_client_without_elicitation_is_told_how_to_proceed(
    gateway: GatewayProcess, fresh_standin: Standin, era: str
) -> None:
    async with client(gateway.mcp_url, ERAS[era]) as session:
        result = await session.call_tool("save_pipeline", CANCEL)
    assert result.is_error
    message = result.structured_content["error"]["message"]
    assert "did not declare the `elicitation` capability" in message
    assert "confirm_destructive" in message
    assert cancels(fresh_standin) == 0


async def test_the_same_answered_request_sent_again_does_not_cancel_twice(
    gateway: GatewayProcess, fresh_standin: Standin
) -> None:
    # Driven by hand through the SDK's low-level session: the client's answer is sent twice, as a
    # client retrying after a lost response would.
    async def unused(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        raise AssertionError("answered by hand")

    async with client(gateway.mcp_url, "auto", unused) as session:
        first = await session.session.call_tool("save_pipeline", CANCEL, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        assert first.input_requests is not None and list(first.input_requests) == ["confirm"]
        assert cancels(fresh_standin) == 0
        answer = {"confirm": types.ElicitResult(action="accept", content={"confirm": True})}
        results = [
            await session.session.call_tool(
                "save_pipeline",
                CANCEL,
                input_responses=answer,  # type: ignore[arg-type]
                request_state=first.request_state,
                allow_input_required=True,
            )
            for _ in range(2)
        ]
    assert isinstance(results[0], types.CallToolResult) and not results[0].is_error
    assert isinstance(results[1], types.CallToolResult) and results[1].is_error
    assert results[1].structured_content is not None
    assert results[1].structured_content["error"]["reason"] == "conflict"
    assert cancels(fresh_standin) == 1
