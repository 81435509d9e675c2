"""The optional second listener: ``/metrics``, ``/healthz`` and ``/readyz`` on
``server.metrics_host:server.metrics_port``, and nothing else.

Why: a sidecar keeps its MCP port on 127.0.0.1 inside the pod (only the agent beside it may call
tools), while Prometheus and the kubelet's probes reach the pod's own address. Serving the three
read-only endpoints from a separate aiohttp application makes it impossible to reach ``/mcp``
(or anything added later) through that port, whatever middlewares the main app has.

Its socket is bound when the app is built, before anything starts: a port in use is refused
before the broker opens (aiohttp does not clean up what already started when a start-up step
fails). It starts serving after the app's services (it shares their metrics registry and broker)
and stops before them.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from aiohttp import web

from gateway.config import Settings
from gateway.listening import bound_sockets
from gateway.observability.metrics import METRICS
from gateway.server import health
from gateway.server.metrics_endpoint import metrics_handler
from gateway.server.services import SERVICES

log = logging.getLogger("gateway")


def serve_metrics_port(app: web.Application, settings: Settings) -> None:
    """Add the metrics listener to ``app`` when ``server.metrics_port`` is set (else nothing).

    Raises (at start-up, from ``run_app``):
        OSError: the port cannot be bound.
    """
    port = settings.server.metrics_port
    if port is None:
        return
    host = settings.server.metrics_host
    socks = bound_sockets(host, port)

    async def listener(app: web.Application) -> AsyncIterator[None]:
        ops = web.Application()
        health.setup(ops, share_with=app)
        services = app.get(SERVICES)
        if services is not None:
            ops[SERVICES] = services
        ops.router.add_get("/metrics", metrics_handler(app[METRICS].registry, lambda: app.get(SERVICES)))
        runner = web.AppRunner(ops, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            for sock in socks:
                await web.SockSite(runner, sock).start()
            shown = f"[{host}]" if ":" in host else host
            log.info("Serving /metrics, /healthz and /readyz on http://%s:%d", shown, port)
            yield
        finally:
            await runner.cleanup()

    app.cleanup_ctx.append(listener)
