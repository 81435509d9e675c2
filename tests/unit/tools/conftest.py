"""Fixtures of the tool tests that mock GitLab's REST API with respx: ``router`` (every request
must match a route) and ``env`` (the tools over it). A test module that needs another GitLab
(``FakeGitLab``'s GraphQL) defines its own fixtures of these names, which take precedence."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import httpx
import pytest
import respx

from gateway.config import Settings
from tests.unit.gitlab.tool_env import ToolEnv


@pytest.fixture
def router() -> Iterator[respx.MockRouter]:
    with respx.mock(assert_all_mocked=True, assert_all_called=False) as mocked:
        yield mocked


@pytest.fixture
async def env(make_settings: Callable[..., Settings], router: respx.MockRouter) -> AsyncIterator[ToolEnv]:
    async with httpx.AsyncClient() as http:
        yield ToolEnv(make_settings(), http)
