"""The app factory: ``create_app(settings)`` builds every service and route; nothing is global.

Routes: ``/mcp`` (MCP Streamable HTTP, ``gateway.mcp.transport``), ``/healthz`` (process alive),
``/readyz`` (state store open; GitLab reachability reported, not required) and ``/metrics``
(Prometheus text format). Tests build their own app with ``create_app(settings, gitlab_http=...)``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import httpx
from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from gateway.broker.service import open_broker
from gateway.cache import CacheRegistry
from gateway.config import Settings
from gateway.gitlab.client import GitLabClient
from gateway.mcp import transport
from gateway.observability import health
from gateway.observability.metrics import Metrics
from gateway.tools import all_tools
from gateway.tools.context import Services
from gateway.tools.registry import Registry, Tool

SETTINGS = web.AppKey("settings", Settings)
METRICS = web.AppKey("metrics", Metrics)
REGISTRY = web.AppKey("registry", Registry)
SERVICES = web.AppKey("services", Services)


def create_app(
    settings: Settings, *, gitlab_http: httpx.AsyncClient | None = None, tools: Sequence[Tool] | None = None
) -> web.Application:
    """Build the gateway's aiohttp application.

    Args:
        settings: the effective configuration.
        gitlab_http: an ``httpx.AsyncClient`` for GitLab (tests inject one); built from settings
            otherwise.
        tools: the tools to serve instead of every declared one (tests).
    """
    app = web.Application(client_max_size=settings.server.max_request_bytes)
    metrics = Metrics()
    app[SETTINGS] = settings
    app[METRICS] = metrics
    app[REGISTRY] = Registry(
        all_tools() if tools is None else tools, read_only=settings.read_only, toolsets=settings.toolsets
    )

    async def services_ctx(app: web.Application) -> AsyncIterator[None]:
        gitlab = GitLabClient(settings.gitlab, metrics=metrics, http=gitlab_http)
        caches = CacheRegistry(
            enabled=settings.cache.enabled,
            max_entries=settings.cache.max_entries,
            max_bytes=settings.cache.max_bytes,
            metrics=metrics,
        )
        try:
            async with open_broker(settings, metrics) as broker:
                app[SERVICES] = Services(
                    settings=settings, gitlab=gitlab, caches=caches, metrics=metrics, broker=broker
                )
                yield
        finally:
            await gitlab.aclose()

    app.cleanup_ctx.append(services_ctx)

    async def wake_broker_waits(app: web.Application) -> None:
        # Before the server waits for in-flight calls: answer every wait_for_message now.
        services = app.get(SERVICES)
        if services is not None and services.broker is not None:
            await services.broker.shutdown("the gateway is shutting down")

    app.on_shutdown.append(wake_broker_waits)
    transport.setup(app)
    health.setup(app)
    app.router.add_get("/metrics", make_aiohttp_handler(metrics.registry))
    return app
