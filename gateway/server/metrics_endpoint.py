"""``/metrics``: the broker's gauges read from its database, then the registry in Prometheus's format.

Both listeners (``/metrics`` on the main port and on ``server.metrics_port``) serve this handler.
The read is bounded and never fails the scrape (``Housekeeping.refresh_for_scrape``): Prometheus
always gets the gateway's own metrics, with ``gateway_broker_database_up`` saying whether the
broker's gauges are current.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.aiohttp import make_aiohttp_handler

from gateway.server.services import Services


def metrics_handler(
    registry: CollectorRegistry, services: Callable[[], Services | None]
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The ``/metrics`` handler for ``registry``; ``services()`` is None while starting or stopping."""
    exposition = make_aiohttp_handler(registry)

    async def handler(request: web.Request) -> web.StreamResponse:
        current = services()
        if current is not None and current.broker is not None:
            await current.broker.housekeeping.refresh_for_scrape()
        return await exposition(request)

    return handler
