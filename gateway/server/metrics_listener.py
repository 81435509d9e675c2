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
import os
import socket
from collections.abc import AsyncIterator

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from gateway.config import Settings
from gateway.observability.metrics import METRICS
from gateway.server import health
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
    sock = _bound_socket(host, port)

    async def listener(app: web.Application) -> AsyncIterator[None]:
        ops = web.Application()
        health.setup(ops, share_with=app)
        services = app.get(SERVICES)
        if services is not None:
            ops[SERVICES] = services
        ops.router.add_get("/metrics", make_aiohttp_handler(app[METRICS].registry))
        runner = web.AppRunner(ops, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            await web.SockSite(runner, sock).start()
            shown = f"[{host}]" if ":" in host else host
            log.info("Serving /metrics, /healthz and /readyz on http://%s:%d", shown, port)
            yield
        finally:
            await runner.cleanup()

    app.cleanup_ctx.append(listener)


def _bound_socket(host: str, port: int) -> socket.socket:
    """A listening-ready TCP socket bound to ``host:port`` (the first address ``host`` resolves to).

    Raises:
        OSError: as asyncio words a bind failure (``error while attempting to bind on address
            ('0.0.0.0', 9090): address already in use``), so that it reads like the MCP port's.
    """
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        # As asyncio's create_server does on POSIX: a restart may bind while old connections linger.
        if os.name == "posix":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
    except OSError as err:
        sock.close()
        reason = (err.strerror or str(err)).lower()
        raise OSError(
            err.errno, f"error while attempting to bind on address {(host, port)!r}: {reason}"
        ) from None
    return sock
