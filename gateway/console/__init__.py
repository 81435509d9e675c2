"""The live broker console at ``/broker``: the people behind the agents watch the pipeline and
act on it (instruct the PM, switch auto-advance, stop, start over).

Off unless ``console.operator_token`` or ``console.viewer_token`` is set. Server-rendered HTML
(``views``, ``templates/``, ``diagram``), a small script and a style sheet shipped with the package
(``static/``), live updates over server-sent events fed by the broker's change feed
(``gateway.broker.feed``), and its own sign-in (``auth``). The app factory calls :func:`setup`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from gateway.console.routes import BrokerOf, ConsoleRoutes

if TYPE_CHECKING:
    from gateway.config import Settings

__all__ = ["setup"]


def setup(app: web.Application, settings: Settings, broker: BrokerOf) -> None:
    """Serve the console on ``app`` when configured; nothing at all otherwise (``/broker`` is 404).

    Args:
        app: the gateway's application (before it starts).
        settings: the effective settings.
        broker: returns the opened broker (called per request, after start-up).
    """
    if settings.console.enabled:
        ConsoleRoutes(settings, broker).add_routes(app)
