"""``/healthz`` (the process answers) and ``/readyz`` (the state store is open).

``/readyz`` also reports whether GitLab answered recently, without failing on it: agents may
use the broker with GitLab down, and a probe that fails on an outside dependency restarts
healthy pods.
"""

from __future__ import annotations

import time

import httpx
from aiohttp import web

from gateway.tools.context import SERVICES

_GITLAB_CHECK_TTL = 30.0


async def healthz(request: web.Request) -> web.Response:
    """200 ``{"status": "ok"}`` while the process serves requests."""
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """200 when the broker's state store is open, else 503; GitLab reachability is reported.

    Body: ``{"status": "ready"|"not_ready", "state_store": "open"|"closed",
    "gitlab": {"url", "reachable", "checked_at"}}``.
    """
    services = request.app.get(SERVICES)
    if services is None:
        return web.json_response({"status": "not_ready", "state_store": "closed"}, status=503)
    store = "open" if services.broker is not None and services.broker.is_open() else "closed"
    gitlab = await _gitlab_reachability(request.app, services.gitlab)
    ready = store != "closed"
    return web.json_response(
        {"status": "ready" if ready else "not_ready", "state_store": store, "gitlab": gitlab},
        status=200 if ready else 503,
    )


_LAST_CHECK = web.AppKey("gitlab_reachability", dict)


def setup(app: web.Application) -> None:
    """Add ``/healthz`` and ``/readyz`` to ``app``."""
    app[_LAST_CHECK] = {}
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)


async def _gitlab_reachability(app: web.Application, gitlab: object) -> dict[str, object]:
    from gateway.gitlab.client import GitLabClient

    assert isinstance(gitlab, GitLabClient)
    last = app[_LAST_CHECK]
    now = time.time()
    if last and now - float(last["checked_at"]) < _GITLAB_CHECK_TTL:
        return dict(last)
    try:
        response = await gitlab.http.get(gitlab.base.url + "/api/v4/version", timeout=3.0)
        reachable = response.status_code < 500
    except httpx.HTTPError:
        reachable = False
    result: dict[str, object] = {"url": gitlab.base.url, "reachable": reachable, "checked_at": now}
    last.clear()
    last.update(result)
    return result
