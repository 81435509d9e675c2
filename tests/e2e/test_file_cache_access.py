"""Cached file content outlives no one's access: a read served from the gateway's content cache
needs GitLab's word, at most ``cache.access_check_seconds`` old, that the same credential still
reads the project's code. A revoked token and a member removed from the project are refused once
that window has passed, instead of being served for the cache's whole lifetime (600 s).

The window is shortened to 2 s here so the test does not wait 30 s.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from mcp import Client

from tests.e2e.harness import GatewayProcess, mcp_client, text_of
from tests.standin import dataset as ds
from tests.standin.fixtures import Standin, fresh_standin, standin  # noqa: F401  (fixtures)

pytestmark = pytest.mark.e2e

WINDOW = 2.0
SHA = ds.REF_SHAS["main"]
ARGS = {"project_id": ds.PROJECT_PATH, "file_path": ds.FILES["readme"], "ref": SHA}


@pytest.fixture(scope="module")
def gateway(standin: Standin, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:  # noqa: F811
    env = standin.env(GATEWAY_CACHE__ACCESS_CHECK_SECONDS=str(WINDOW))
    proc = GatewayProcess(env=env, state_dir=tmp_path_factory.mktemp("access") / "state").start()
    yield proc
    proc.stop()


async def read(client: Client) -> tuple[bool, dict[str, Any]]:
    result = await client.call_tool("get_repository_file", ARGS)
    structured = result.structured_content or {}
    assert json.loads(text_of(result.content[-1])) == structured
    return bool(result.is_error), structured


@pytest.mark.parametrize(
    ("lose_access", "reason"),
    [
        (lambda s: s.control.update_user("alice", tokens=[]), "unauthorized"),  # revoked
        (
            lambda s: s.control.update_project(ds.PROJECT_PATH, members={"alice": None}),
            "not_found",
        ),
    ],
    ids=["token-revoked", "removed-from-project"],
)
async def test_a_caller_who_lost_access_is_not_served_from_the_cache(
    gateway: GatewayProcess,
    fresh_standin: Standin,  # noqa: F811
    lose_access: Callable[[Standin], object],
    reason: str,
) -> None:
    async with mcp_client(gateway.mcp_url) as client:
        is_error, out = await read(client)
        assert not is_error and out["content"] == ds.README_MAIN
        lose_access(fresh_standin)
        await asyncio.sleep(WINDOW + 0.3)
        is_error, out = await read(client)
        assert is_error, "cached content was served to a caller who lost access"
        assert out["error"]["reason"] == reason
        assert ds.README_MAIN not in json.dumps(out)


async def test_what_the_check_costs_one_small_request_per_window(
    gateway: GatewayProcess,
    fresh_standin: Standin,  # noqa: F811
) -> None:
    async with mcp_client(gateway.mcp_url) as client:
        assert not (await read(client))[0]
        fresh_standin.control.clear_requests()
        for _ in range(3):  # within the window: the cache alone
            assert not (await read(client))[0]
        assert fresh_standin.control.request_count() == 0
        await asyncio.sleep(WINDOW + 0.3)
        for _ in range(3):  # past it: one confirmation, then the cache alone again
            assert not (await read(client))[0]
        assert fresh_standin.control.request_count() == 1
        assert fresh_standin.control.graphql_requests(operation="GetRepositoryFileExclusions") == 1
