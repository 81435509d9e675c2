"""The console's HTTP routes under ``/broker``: the page, sign-in, actions, live events, assets.

Every answer carries a Content-Security-Policy that allows only this gateway's own script and
style (``default-src 'self'``: no inline script, no CDN), and is never cached (the static assets
excepted). Actions are form posts: operator role, CSRF token, Origin/Host checks and a ticked
confirmation box, then one call on the broker's operator part (``gateway.broker.operator``),
whose line in ``pipeline.log`` names the operator.

A session is its signed cookie (``auth``) and not signed out: every request looks its nonce up in
the broker's record of sign-outs (``gateway.broker.console_sign_outs``), which every replica
shares. A body that cannot be read as a form (bad encoding, broken multipart) is a 400 and one
INFO line. Failed sign-ins count against the address's budget (``throttle``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import TYPE_CHECKING, Any

from aiohttp import web

from gateway.broker.errors import BrokerError
from gateway.broker.store import StoreError
from gateway.console.auth import CSRF_FIELD, ConsoleAuth, Session
from gateway.console.forms import read_form
from gateway.console.live import CSRF_PLACEHOLDER, SharedRendering
from gateway.console.throttle import SignInBudget
from gateway.console.views import Renderer, snapshot
from gateway.observability.metrics import METRICS
from gateway.tools.call_limits import Slots

if TYPE_CHECKING:
    from gateway.broker.service import BrokerService
    from gateway.config import Settings
    from gateway.console.external import ExternalSignIn

log = logging.getLogger("gateway.console")

BASE = "/broker"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; object-src 'none'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    # Not no-referrer: with it Chromium sends "Origin: null" on the page's own form posts.
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}
#: Seconds between two readings of the broker when nothing changed (lastSeen and "connected"
#: move with time, and a message delivered elsewhere changes a queue depth without a signal).
REFRESH_SECONDS = 5.0
#: After a change, wait this long for the rest of a burst before reading.
COALESCE_SECONDS = 0.1
#: What a finished action says (by name: nothing a caller sends is echoed into the page).
NOTICES = {
    "instruct": "Instruction sent to the PM: it reads it at its next wait (and calls resume when the "
    "pipeline waits for a person or is paused).",
    "auto-advance": "Auto-advance switched.",
    "cancel-advance": "The advance was cancelled: the pipeline is PAUSED until the PM resumes.",
    "stop": "The pipeline is stopped. Start over when you are ready.",
    "start-over": "Started over: the stopped pipeline is archived and a new one is IDLE.",
    "approve": "Approved: the waiting call acts now (once).",
    "refuse": "Refused: the waiting call ends declined, and nothing is done.",
}
_ASSETS = {"console.js": "text/javascript", "console.css": "text/css"}

BrokerOf = Callable[[], "BrokerService | None"]
#: What the gateway's last check of GitLab found, as ``/readyz`` shows it; None before the first.
GitLabHealthOf = Callable[[], "dict[str, Any] | None"]


class BrokerClosed(Exception):
    """The app's broker is not open (start-up failed, or shutting down)."""


def _secure(response: web.StreamResponse, *, cache: bool = False) -> web.StreamResponse:
    response.headers.update(SECURITY_HEADERS)
    response.headers["Cache-Control"] = "max-age=300" if cache else "no-store"
    return response


def _html(text: str, status: int = 200) -> web.Response:
    response = web.Response(text=text, status=status, content_type="text/html", charset="utf-8")
    _secure(response)
    return response


def _forbidden(problem: str) -> web.Response:
    return _html(problem if problem.startswith("Forbidden") else f"Forbidden: {problem}", 403)


def _unavailable() -> web.HTTPServiceUnavailable:
    return web.HTTPServiceUnavailable(
        text="The broker is not open or its database does not answer right now; try again shortly.",
        headers={**SECURITY_HEADERS, "Cache-Control": "no-store"},
    )


def _see_other(location: str) -> web.Response:
    response = web.Response(status=303, headers={"Location": location})
    _secure(response)
    return response


class ConsoleRoutes:
    """The handlers, bound to one app's settings and broker.

    Args:
        settings: the gateway's settings (``console``, ``server``).
        broker: returns the app's broker (opened at start-up, after the routes are added).
        gitlab: returns what the gateway's last check of GitLab found (``/readyz``'s ``gitlab``
            object), None before the first.
    """

    def __init__(
        self,
        settings: Settings,
        broker: BrokerOf,
        gitlab: GitLabHealthOf | None = None,
        external: ExternalSignIn | None = None,
    ) -> None:
        self._console = self.settings = settings.console
        self._broker = broker
        self._gitlab = gitlab
        self.external = external
        self.auth = ConsoleAuth(
            settings.console,
            settings.server,
            None if external is None else (external.name, external.secret),
            settings.sign_in.public_hosts,
        )
        self._renderer = Renderer(settings.console)
        self._budget = SignInBudget(
            settings.console.sign_in_failures,
            settings.console.sign_in_window_seconds,
            total_failures=settings.console.sign_in_failures_total,
            known_seconds=settings.console.session_hours * 3600,
        )
        self._closing = False
        self._live = SharedRendering(self._read_sections, REFRESH_SECONDS)
        self._slots = Slots(settings.console.max_streams_per_session)

    def login_page(self, error: str | None) -> str:
        """The sign-in page: the token form, and the external sign-in's button when there is one."""
        return Renderer.login(
            error=error,
            tokens=self._console.operator_token is not None or self._console.viewer_token is not None,
            external=None if self.external is None else self.external.name,
        )

    def _gitlab_health(self) -> dict[str, Any] | None:
        return self._gitlab() if self._gitlab is not None else None

    def add_routes(self, app: web.Application) -> None:
        """Register every route under ``/broker`` and the shutdown hook that ends live streams."""
        app.router.add_get(BASE, self.page)
        app.router.add_get(f"{BASE}/", self.page)
        app.router.add_post(f"{BASE}/login", self.login)
        app.router.add_post(f"{BASE}/logout", self.logout)
        app.router.add_get(f"{BASE}/events", self.events)
        app.router.add_post(f"{BASE}/actions/{{action}}", self.action)
        app.router.add_get(f"{BASE}/static/{{name}}", self.asset)
        app.on_shutdown.append(self._shutdown)

    async def _shutdown(self, app: web.Application) -> None:
        self._closing = True
        with contextlib.suppress(BrokerClosed):
            self._open_broker().feed.changed()  # wake every stream so it ends now

    def _open_broker(self) -> BrokerService:
        try:
            broker = self._broker()
        except KeyError:
            broker = None
        if broker is None:
            raise BrokerClosed("the broker is not open (the gateway is starting or stopping)")
        return broker

    async def _session(self, request: web.Request) -> Session | None:
        """The request's session: a valid cookie (``auth``) not signed out on any replica.

        Raises:
            web.HTTPServiceUnavailable: the broker's database cannot say (never let in unchecked).
        """
        session = self.auth.session(request)
        if session is None:
            return None
        try:
            signed_out = await self._open_broker().console_sign_outs.is_signed_out(session.nonce)
        except (BrokerClosed, StoreError):
            raise _unavailable() from None
        return None if signed_out else session

    # ---- pages ---------------------------------------------------------------------------------

    async def page(self, request: web.Request) -> web.Response:
        """The console, or the sign-in page without a session."""
        problem = self.auth.origin_problem(request)
        if problem is not None:
            return _forbidden(problem)
        session = await self._session(request)
        if session is None:
            return _html(self.login_page(None))
        done = request.query.get("done")
        return await self._render(request, session, notice=NOTICES.get(done or ""), error=None)

    async def _render(
        self,
        request: web.Request,
        session: Session,
        *,
        notice: str | None,
        error: str | None,
        status: int = 200,
    ) -> web.Response:
        before = request.query.get("before") or None
        try:
            snap = await snapshot(self._open_broker(), self._console, before, self._gitlab_health())
        except BrokerClosed:
            return _html("The broker is not open (the gateway is starting or stopping).", 503)
        except BrokerError as err:
            if before is not None and err.reason == "bad_request":
                return _see_other(BASE)
            return _html(f"The broker cannot be read right now: {err}", 503)
        except StoreError as err:
            return _html(f"The broker cannot be read right now: {err}", 503)
        ctx = self._renderer.context(
            snap, can_act=session.can_act, csrf=self.auth.csrf_token(session), before=before
        )
        text = self._renderer.page(ctx, name=session.name, role=session.role, notice=notice, error=error)
        return _html(text, status)

    async def login(self, request: web.Request) -> web.Response:
        """Check the token; on success set the session cookie and go to the console."""
        problem = self.auth.origin_problem(request)
        if problem is not None:
            return _forbidden(problem)
        metrics = request.app[METRICS]
        wait = self._budget.retry_after(request.remote)
        if wait is not None:
            metrics.console_sign_ins_failed.labels("throttled").inc()
            log.info("console sign-in refused: too many failed sign-ins (from %s)", request.remote)
            response = _html(
                self.login_page(
                    f"Too many failed sign-ins from this address, or from all addresses lately "
                    f"to this console: try again in {wait} seconds. An address that signed in here "
                    "lately is let in meanwhile."
                ),
                429,
            )
            response.headers["Retry-After"] = str(wait)
            return response
        form = await read_form(request, SECURITY_HEADERS)
        token = form.get("token")
        role = self.auth.role_of(token) if isinstance(token, str) else None
        if role is None:
            self._budget.failed(request.remote)
            metrics.console_sign_ins_failed.labels("wrong_token").inc()
            log.warning("console sign-in refused: wrong token (from %s)", request.remote)
            return _html(
                self.login_page(
                    "That token does not open this console. Use console.operator_token or "
                    "console.viewer_token from the gateway's configuration."
                ),
                401,
            )
        self._budget.succeeded(request.remote)
        name = form.get("name")
        session, cookie = self.auth.new_session(role, name if isinstance(name, str) else None)
        log.info("console sign-in: %s as %s (from %s)", session.name, role, request.remote)
        response = _see_other(BASE)
        self.auth.set_cookie(response, request, cookie)
        return response

    async def logout(self, request: web.Request) -> web.Response:
        """End the session everywhere: recorded as signed out in the broker's database, so its
        cookie opens nothing on any replica from now on (CSRF-checked, so no other site can sign a
        person out)."""
        session, refusal = await self._checked(request, act=False)
        if refusal is not None:
            return refusal
        assert session is not None
        try:
            broker = self._open_broker()
            await broker.console_sign_outs.sign_out(session.nonce, session.expires)
        except (BrokerClosed, StoreError):
            raise _unavailable() from None
        broker.feed.changed()  # this replica's open streams look now (the others within seconds)
        log.info("console sign-out: %s (from %s)", session.name, request.remote)
        response = _see_other(BASE)
        self.auth.clear_cookie(response, request)
        return response

    async def asset(self, request: web.Request) -> web.Response:
        """``console.js`` and ``console.css``, from the package (nothing from elsewhere)."""
        name = request.match_info["name"]
        kind = _ASSETS.get(name)
        if kind is None:
            raise web.HTTPNotFound()
        body = resources.files("gateway.console").joinpath("static", name).read_bytes()
        response = web.Response(body=body, content_type=kind, charset="utf-8")
        _secure(response, cache=True)
        return response

    # ---- actions -------------------------------------------------------------------------------

    async def _checked(
        self, request: web.Request, *, act: bool
    ) -> tuple[Session | None, web.Response | None]:
        """The session of a POST that passed the Origin/Host, session, role and CSRF checks."""
        problem = self.auth.origin_problem(request)
        if problem is not None:
            return None, _forbidden(problem)
        session = await self._session(request)
        if session is None:
            return None, _html(self.login_page("Sign in first (your session may have ended)."), 401)
        if act and not session.can_act:
            return None, _html("Forbidden: this sign-in is read-only (a viewer's).", 403)
        form = await read_form(request, SECURITY_HEADERS)
        csrf = form.get(CSRF_FIELD)
        if not self.auth.csrf_ok(session, csrf if isinstance(csrf, str) else None):
            return None, _html(
                "Forbidden: the form's CSRF token is missing or wrong. Reload the console and try again.", 403
            )
        return session, None

    async def action(self, request: web.Request) -> web.Response:
        """One operator action; then back to the console with a notice, or the page with an error."""
        name = request.match_info["action"]
        if name not in NOTICES:
            raise web.HTTPNotFound()
        session, refusal = await self._checked(request, act=True)
        if refusal is not None:
            return refusal
        assert session is not None
        form = await read_form(request, SECURITY_HEADERS)
        if form.get("confirm") != "yes":
            return await self._render(
                request, session, notice=None, error="Tick the confirmation box to do this.", status=400
            )
        try:
            operator = self._open_broker().operator
        except BrokerClosed:
            return _html("The broker is not open (the gateway is starting or stopping).", 503)
        ticket, note = str(form.get("ticket") or ""), form.get("note")
        note = note if isinstance(note, str) else None
        calls: dict[str, Callable[[], Awaitable[dict[str, Any]]]] = {
            "instruct": lambda: operator.instruct(session.name, str(form.get("text") or "")),
            "auto-advance": lambda: operator.set_auto_advance(session.name, form.get("enabled") == "true"),
            "cancel-advance": lambda: operator.cancel_auto_advance(session.name),
            "stop": lambda: operator.stop(session.name),
            "start-over": lambda: operator.start_over(session.name),
            "approve": lambda: operator.decide(session.name, ticket, approve=True, note=None),
            "refuse": lambda: operator.decide(session.name, ticket, approve=False, note=note),
        }
        try:
            await calls[name]()
        except BrokerError as err:
            status = 503 if err.reason == "upstream_error" else 409
            return await self._render(request, session, notice=None, error=str(err), status=status)
        log.info("console action %s by %s", name, session.name)
        return _see_other(f"{BASE}?done={name}")

    # ---- live ----------------------------------------------------------------------------------

    async def events(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: the sections that changed, after every change the broker signals
        (its change feed: this process's commits and, on PostgreSQL, every replica's)."""
        problem = self.auth.origin_problem(request)
        if problem is not None:
            return _forbidden(problem)
        session = await self._session(request)
        if session is None:
            raise web.HTTPUnauthorized(text="Sign in at /broker first.")
        before = request.query.get("before") or None
        try:
            broker = self._open_broker()
        except BrokerClosed:
            return _html("The broker is not open (the gateway is starting or stopping).", 503)
        if not self._slots.take(session.nonce):
            request.app[METRICS].console_streams_refused.inc()
            log.info("console live view refused: %s has %d open", session.name, self._slots.cap)
            return _html(
                f"This sign-in already has {self._slots.cap} live views open "
                "(console.max_streams_per_session): close a tab of the console, then reload.",
                429,
            )
        try:
            response = web.StreamResponse(
                headers={"Content-Type": "text/event-stream", "X-Accel-Buffering": "no"}
            )
            _secure(response)
            await response.prepare(request)
            # ConnectionResetError: the page went away (a reload, a closed tab); nothing to finish.
            with contextlib.suppress(ConnectionResetError):
                await self._stream(response, broker, session, before)
        finally:
            self._slots.give_back(session.nonce)
        return response

    async def _read_sections(self, before: str | None, can_act: bool) -> tuple[dict[str, str], str]:
        """One reading of the broker, every section rendered for a view (shared by the streams)."""
        snap = await snapshot(self._open_broker(), self._console, before, self._gitlab_health())
        ctx = self._renderer.context(snap, can_act=can_act, csrf=CSRF_PLACEHOLDER, before=before)
        return self._renderer.sections(ctx), str(snap.status["state"])

    async def _stream(
        self, response: web.StreamResponse, broker: BrokerService, session: Session, before: str | None
    ) -> None:
        await response.write(b"retry: 2000\n\n")
        shown: dict[str, str] = {}
        csrf = self.auth.csrf_token(session)
        seen = -1
        while not self._closing:
            if session.expires <= time.time() or await self._signed_out(broker, session):
                await response.write(b"event: signed-out\ndata: {}\n\n")
                break
            version = broker.feed.version
            try:
                sections, state = await self._live.sections(version, before, session.can_act, csrf)
            except (BrokerError, StoreError, BrokerClosed) as err:
                await response.write(f"event: problem\ndata: {json.dumps(str(err))}\n\n".encode())
            else:
                changed = {k: v for k, v in sections.items() if shown.get(k) != v}
                if changed or seen < 0:
                    data = {"version": version, "state": state, "sections": changed}
                    await response.write(f"event: sections\ndata: {json.dumps(data)}\n\n".encode())
                    shown = sections
                else:
                    await response.write(b": keep-alive\n\n")
            seen = version
            if await broker.feed.wait(seen, REFRESH_SECONDS) != seen:
                await asyncio.sleep(COALESCE_SECONDS)

    @staticmethod
    async def _signed_out(broker: BrokerService, session: Session) -> bool:
        """Whether an open stream's session was signed out meanwhile (on any replica). While the
        database does not answer, the stream shows nothing new (its reading fails too and says
        so) and the check is made again at its next look."""
        try:
            return await broker.console_sign_outs.is_signed_out(session.nonce)
        except StoreError:
            return False
