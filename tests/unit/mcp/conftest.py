"""Fixtures: in-process gateway apps serving the test tools of ``helpers``, with a raw client."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import httpx
import pytest
from aiohttp import web

from gateway.config import Settings
from gateway.server.app import create_app
from gateway.server.services import build_services
from gateway.tools.registry import Tool
from tests.unit.mcp.helpers import Mcp, Probe, make_tools


@pytest.fixture
def probe() -> Probe:
    return Probe()


MakeMcp = Callable[..., Awaitable[Mcp]]


@pytest.fixture
def mcp_factory(
    aiohttp_client: Any,
    make_settings: Callable[..., Settings],
    at_head: Callable[[Settings], Settings],
    probe: Probe,
) -> MakeMcp:
    """``await mcp_factory(tools=None, handler_cancellation=False, **settings_overrides)`` → a raw
    client on a fresh app, its broker on a copy of a database already at the newest schema."""

    async def make(
        *, tools: list[Tool] | None = None, handler_cancellation: bool = False, **overrides: Any
    ) -> Mcp:
        settings = at_head(make_settings(**overrides))
        # No GitLab behind these apps: a mock transport also spares building a TLS context per app.
        gitlab_requests: list[httpx.Request] = []

        def gitlab(request: httpx.Request) -> httpx.Response:
            gitlab_requests.append(request)
            return httpx.Response(503)

        gitlab_http = httpx.AsyncClient(transport=httpx.MockTransport(gitlab))
        app = create_app(
            settings,
            services=partial(build_services, gitlab_http=gitlab_http),
            tools=make_tools(probe) if tools is None else tools,
        )

        async def close_gitlab_http(app: web.Application) -> None:
            await gitlab_http.aclose()

        app.on_cleanup.append(close_gitlab_http)
        client = await aiohttp_client(app)
        # aiohttp's TestServer cancels handlers when a client disconnects; web.run_app (production)
        # does not. Serve like production.
        client.server.runner.server.handler_cancellation = handler_cancellation
        mcp = Mcp(client, app)
        mcp.gitlab_requests = gitlab_requests
        return mcp

    return make


@pytest.fixture
async def mcp(mcp_factory: MakeMcp) -> Mcp:
    """A raw client on an app with default settings and the test tools, initialized."""
    client = await mcp_factory()
    await client.initialize()
    return client
