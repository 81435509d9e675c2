"""The app-wide services every tool call shares, how the application builds them by default,
and the app key they are found under.

:func:`~gateway.server.app.create_app` takes a :data:`ServicesFactory` from its caller: the
command line uses :func:`build_services`; a test passes its own (a GitLab behind a mock
transport, a broker on a database it prepared).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field

import httpx
from aiohttp import web

from gateway.broker.service import BrokerService, open_broker
from gateway.cache import CacheRegistry
from gateway.config import Settings
from gateway.gitlab.capabilities import Capabilities
from gateway.gitlab.client import GitLabClient
from gateway.observability.metrics import Metrics
from gateway.tools.waiting import SharedPolls


@dataclass
class Services:
    """App-wide services, built once at start-up and shared by every call (what
    :class:`gateway.tools.context.ToolServices` describes to the tools)."""

    settings: Settings
    gitlab: GitLabClient
    caches: CacheRegistry
    metrics: Metrics
    broker: BrokerService | None = None
    #: What the configured GitLab's answers told (whether it lists artifacts archives).
    capabilities: Capabilities = field(default_factory=Capabilities)
    #: Server-side waits (``wait_seconds``), one shared poll per resource and credential.
    polls: SharedPolls = field(default_factory=SharedPolls)


#: The app's :class:`Services`, set once they are built at start-up.
SERVICES = web.AppKey("services", Services)

#: ``factory(settings, metrics)`` → an async context manager that yields the app's services
#: while the app runs and closes them when it stops. ``metrics`` is the app's registry (the one
#: ``/metrics`` serves).
ServicesFactory = Callable[[Settings, Metrics], AbstractAsyncContextManager[Services]]


@asynccontextmanager
async def build_services(
    settings: Settings, metrics: Metrics, *, gitlab_http: httpx.AsyncClient | None = None
) -> AsyncIterator[Services]:
    """The services as ``settings`` describe them: the GitLab client, the caches, and the broker
    opened on its database (migrated first when it is new or behind).

    Args:
        gitlab_http: the ``httpx.AsyncClient`` GitLab is reached with (tests pass one on a mock
            transport; bind it with ``functools.partial``); built from ``settings`` otherwise.

    Raises:
        StoreError: the state folder is in use by another gateway or the database is unusable.
    """
    gitlab = GitLabClient(settings.gitlab, metrics=metrics, http=gitlab_http)
    caches = CacheRegistry(
        enabled=settings.cache.enabled,
        max_entries=settings.cache.max_entries,
        max_bytes=settings.cache.max_bytes,
        metrics=metrics,
    )
    try:
        async with open_broker(settings, metrics) as broker:
            yield Services(settings=settings, gitlab=gitlab, caches=caches, metrics=metrics, broker=broker)
    finally:
        await gitlab.aclose()
