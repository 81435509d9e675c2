"""The start-up check's wiring: once the app's services are up, send GitLab the check of
``gateway.gitlab.startup_check`` in the background and log the one line it found; then the same
check every 15 s (``gateway.server.health.watch_gitlab``), which keeps
``gateway_gitlab_reachable`` fresh and logs each change. GitLab's version and edition, when it
told them, are kept (``GitLabClient.instance``), and the line says what differs on that version
from the newest (``gateway.tools.compatibility``).

``gateway.__main__`` adds it when ``gitlab.startup_check`` is on (the default); in-process tests
leave it out, so no request reaches their GitLab at a moment they do not control.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from aiohttp import web

from gateway.config import Settings
from gateway.gitlab.startup_check import check_gitlab
from gateway.server import health
from gateway.server.services import SERVICES
from gateway.tools import all_tools
from gateway.tools.compatibility import limits_line

log = logging.getLogger("gateway")


def check_gitlab_at_start(app: web.Application, settings: Settings) -> None:
    """Run the check once ``app``'s services are up; cancel it if the app stops first.

    Args:
        app: an app of :func:`gateway.server.app.create_app` (its cleanup context is extended).
        settings: the effective configuration (the token, the credential mode).
    """

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        token = settings.gitlab.token.get_secret_value() if settings.gitlab.token else None
        passthrough = settings.gitlab.credential_mode == "passthrough"

        async def run() -> None:
            found = await check_gitlab(app[SERVICES].gitlab, token, passthrough=passthrough)
            line = found.line
            # The tool modules are imported only to say what differs on a version GitLab told.
            limits = limits_line(all_tools(), found.instance) if found.instance.known else ""
            if limits:
                line += f'. {limits[0].upper()}{limits[1:]} (README, "GitLab versions")'
            log.log(found.level, line)
            health.note_check(app, found)  # kept, the version and edition too

        task = asyncio.create_task(run(), name="gitlab-startup-check")
        yield
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    app.cleanup_ctx.append(ctx)
    health.watch_gitlab(app)
