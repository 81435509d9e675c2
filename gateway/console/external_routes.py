"""``/broker/<service>/sign-in`` and ``/broker/<service>/done``: signing in to the console with
the external sign-in (GitLab), beside the console tokens.

The round trip (PKCE, ``state``, back to ``done`` exactly) is the external service's; here the
person's role is looked up (``external.role_of``) and the console's own session cookie set. A
person in neither list, or a sign-in that did not finish, gets the sign-in page with the reason.
"""

from __future__ import annotations

import html
import logging

from aiohttp import web

from gateway.broker.store import StoreError
from gateway.console.external import ExternalSignIn, SignInRefused, role_of
from gateway.console.routes import BASE, ConsoleRoutes, _forbidden, _html, _secure
from gateway.observability.metrics import METRICS

log = logging.getLogger("gateway.console")


class ExternalRoutes:
    """The external sign-in's two pages, beside the console's (``routes``)."""

    def __init__(self, console: ConsoleRoutes, external: ExternalSignIn) -> None:
        self._console = console
        self._external = external
        self.base = f"{BASE}/{external.name.lower()}"
        self.done_path = f"{self.base}/done"

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get(f"{self.base}/sign-in", self.start)
        app.router.add_get(self.done_path, self.done)

    async def start(self, request: web.Request) -> web.StreamResponse:
        """On to the external service, to come back to ``done``."""
        problem = self._console.auth.origin_problem(request)
        if problem is not None:
            return _forbidden(problem)
        try:
            response = await self._external.start(request, self.done_path)
        except StoreError:
            return _html("The gateway's database does not answer right now; try again shortly.", 503)
        return _secure(response)

    async def done(self, request: web.Request) -> web.Response:
        """Back from the external service: the person's role, then the console's session."""
        auth, console = self._console.auth, self._console.settings
        problem = auth.origin_problem(request)
        if problem is not None:
            return _forbidden(problem)
        metrics = request.app[METRICS]
        service = self._external.name
        try:
            person = await self._external.finish(request)
        except SignInRefused as err:
            metrics.console_sign_ins_failed.labels("sign_in_failed").inc()
            log.info("console sign-in with %s failed: %s (from %s)", service, err, request.remote)
            return self._refused(f"Signing in with {service} failed: {err}. Try again.", err.status)
        role = role_of(console, person)
        if role is None:
            metrics.console_sign_ins_failed.labels("not_listed").inc()
            log.warning(
                "console sign-in refused: %s user %s is in neither console.operators nor console.viewers "
                "(from %s)",
                service,
                person.username,
                request.remote,
            )
            return self._refused(
                f"{service} user {person.username} may not use this console: the name is in neither "
                "console.operators nor console.viewers (nor is one of its groups). Ask the gateway's "
                "operator to add it.",
                403,
            )
        session, cookie = auth.new_external_session(role, person.username)
        log.info("console sign-in: %s as %s with %s (from %s)", session.name, role, service, request.remote)
        # A page, not a redirect: the browser arrives here from another site, and a strict
        # cookie set now is sent on the next navigation only when this site starts it.
        response = _html(
            '<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="refresh" content="0;url={BASE}"><title>Broker console</title>'
            f'<link rel="stylesheet" href="{BASE}/static/console.css"></head><body><main class="login card">'
            f"<p>Signed in as <strong>{html.escape(person.username)}</strong> ({html.escape(role)}).</p>"
            f'<p><a href="{BASE}">Open the console</a></p></main></body></html>'
        )
        auth.set_cookie(response, request, cookie)
        self._external.forget(response, self.done_path)
        return response

    def _refused(self, message: str, status: int) -> web.Response:
        response = _html(self._console.login_page(message), status)
        self._external.forget(response, self.done_path)
        return response
