"""The live broker console at ``/broker``: the people behind the agents watch the pipeline and
act on it (instruct the PM, switch auto-advance, stop, start over).

Off unless ``console.operator_token`` or ``console.viewer_token`` is set (or, with sign-in on,
``console.operators``/``viewers``: GitLab sign-in, ``external``). Server-rendered HTML
(``views``, ``templates/``, ``diagram``), a small script and a style sheet shipped with the package
(``static/``), live updates over server-sent events fed by the broker's change feed
(``gateway.broker.feed``), and its own sign-in (``auth``). The app factory calls :func:`setup`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from gateway.config import MIN_CONSOLE_TOKEN_CHARS

if TYPE_CHECKING:
    from gateway.config import Settings
    from gateway.console.external import ExternalSignIn
    from gateway.console.routes import BrokerOf, GitLabHealthOf

__all__ = ["setup"]


def setup(
    app: web.Application,
    settings: Settings,
    broker: BrokerOf,
    gitlab: GitLabHealthOf | None = None,
    external: ExternalSignIn | None = None,
) -> None:
    """Serve the console on ``app`` when configured; otherwise ``/broker`` and what is under it are
    404, and a page opened there says how to turn the console on.

    Args:
        app: the gateway's application (before it starts).
        settings: the effective settings.
        broker: returns the opened broker (called per request, after start-up).
        gitlab: returns what the gateway's last check of GitLab found (shown on the page).
        external: a sign-in offered beside the tokens (GitLab's, when sign-in is on), for the
            people in ``console.operators`` and ``console.viewers``.
    """
    if settings.console.enabled:
        # Its pages (jinja2, the templates) load only on a gateway that serves them.
        from gateway.console.routes import ConsoleRoutes

        routes = ConsoleRoutes(settings, broker, gitlab, external)
        routes.add_routes(app)
        if external is not None:
            from gateway.console.external_routes import ExternalRoutes

            ExternalRoutes(routes, external).add_routes(app)
    else:
        app.router.add_route("*", "/broker", _off)
        app.router.add_route("*", "/broker/{rest:.*}", _off)


async def _off(request: web.Request) -> web.Response:
    return web.Response(status=404, text=OFF)


#: What ``/broker`` answers on a gateway whose console is off.
OFF = (
    "The broker console is off on this gateway. To turn it on, set console.operator_token (or "
    f"GATEWAY_CONSOLE__OPERATOR_TOKEN) to a secret of at least {MIN_CONSOLE_TOKEN_CHARS} characters "
    "(console.viewer_token for people who only watch) and restart; see docs/broker.md, "
    '"The console".\n'
)
