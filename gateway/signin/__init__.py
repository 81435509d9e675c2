"""Sign-in to ``/mcp`` through GitLab (OAuth 2.1), off unless ``[sign_in] enabled``.

The gateway is the authorization server of its own ``/mcp``
(https://modelcontextprotocol.io/specification/2025-11-25/basic/authorization): clients discover
it (``metadata``), register (``registration``, ``clients``), send the person to the consent page
and on to GitLab (``consent``, ``gitlab_oauth``), and get the gateway's own tokens (``tokens``);
GitLab's tokens stay in the broker's database, sealed (``sealing``, ``storage``), and are used and
refreshed for the person's ``/mcp`` calls (``grants``). The app factory calls :func:`setup`; with
sign-in off it adds nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from gateway.observability.metrics import METRICS
from gateway.signin.metadata import AS_PATH, PRM_PATH, authorization_server, protected_resource
from gateway.signin.responses import cross_origin, json_answer, preflight

if TYPE_CHECKING:
    import httpx

    from gateway.broker.service import BrokerService
    from gateway.config import Settings
    from gateway.signin.clients import MetadataDocuments, RedirectRule
    from gateway.signin.service import SignIn

__all__ = ["SIGN_IN", "setup"]

log = logging.getLogger("gateway.signin")

#: How often expired sign-in rows (codes, tokens, sign-ins under way or ended) are deleted, and
#: abandoned sign-ins revoked at GitLab (one query when there is nothing to do).
PRUNE_SECONDS = 60.0

#: The app's sign-in parts, once its services are open.
SIGN_IN: web.AppKey[SignIn] = web.AppKey("sign_in")


def setup(
    app: web.Application,
    settings: Settings,
    broker: Callable[[], BrokerService | None],
    gitlab_http: Callable[[], httpx.AsyncClient],
    *,
    documents: MetadataDocuments | None = None,
    redirect_matches: RedirectRule | None = None,
) -> None:
    """Serve sign-in on ``app`` when it is enabled (nothing otherwise).

    Args:
        broker, gitlab_http: return the app's broker and GitLab HTTP client (open after start-up).
        documents, redirect_matches: tests' stand-ins for the Client ID Metadata Document fetcher
            and the redirect URI rule (by default ``client_metadata`` and ``redirects``).
    """
    config = settings.sign_in
    if not config.enabled:
        return
    from gateway.signin import account, consent, registration, tokens
    from gateway.signin.service import SignIn

    async def sign_in_ctx(app: web.Application) -> AsyncIterator[None]:
        opened = broker()
        if opened is None:
            raise RuntimeError("sign-in needs the broker's database, and it is not open")
        fetcher, rule = documents, redirect_matches
        owned = None
        if rule is None:
            from gateway.signin.redirects import redirect_uri_matches

            rule = redirect_uri_matches
        if fetcher is None and config.client_metadata_documents:
            from gateway.signin.client_metadata import ClientMetadataFetcher

            fetcher = owned = ClientMetadataFetcher(
                allow_private_addresses=config.allow_loopback_client_metadata
            )
        built = app[SIGN_IN] = SignIn.build(
            settings,
            opened.store,
            gitlab_http(),
            settings.gitlab.url,
            documents=fetcher,
            redirect_matches=rule,
            metrics=app[METRICS],
        )

        async def prune() -> None:
            while True:
                await asyncio.sleep(PRUNE_SECONDS)
                try:
                    await built.grants.prune()
                except Exception as err:  # the database is down: next time
                    log.warning("could not delete expired sign-in rows: %s", err)

        pruning = asyncio.create_task(prune())
        try:
            yield
        finally:
            pruning.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pruning
            if owned is not None:
                await owned.aclose()

    app.cleanup_ctx.append(sign_in_ctx)

    def bound(
        handler: Callable[[web.Request, SignIn], Awaitable[web.StreamResponse]],
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(request: web.Request) -> web.StreamResponse:
            return await handler(request, request.app[SIGN_IN])

        return handle

    resource, server = protected_resource(config), authorization_server(config)

    async def resource_metadata(request: web.Request) -> web.Response:
        return json_answer(resource)

    async def server_metadata(request: web.Request) -> web.Response:
        return json_answer(server)

    app.router.add_get(PRM_PATH, cross_origin(resource_metadata))
    app.router.add_get(f"{PRM_PATH}/mcp", cross_origin(resource_metadata))
    app.router.add_get(AS_PATH, cross_origin(server_metadata))
    app.router.add_post("/oauth/register", cross_origin(bound(registration.register)))
    app.router.add_get("/oauth/authorize", bound(consent.authorize_page))
    app.router.add_post("/oauth/authorize", bound(consent.authorize_decision))
    app.router.add_get("/oauth/gitlab/callback", bound(consent.gitlab_callback))
    app.router.add_post("/oauth/token", cross_origin(bound(tokens.token)))
    app.router.add_post("/oauth/revoke", cross_origin(bound(tokens.revoke)))
    # Browser-based clients (the MCP Inspector's web page) call these from their own origin.
    for path in (PRM_PATH, f"{PRM_PATH}/mcp", AS_PATH, "/oauth/register", "/oauth/token", "/oauth/revoke"):
        app.router.add_route("OPTIONS", path, preflight)
    app.router.add_post("/oauth/sign-out", bound(tokens.sign_out_everywhere))
    app.router.add_get(account.PATH, bound(account.page))
    app.router.add_post(account.PATH, bound(account.act))
    app.router.add_get(f"{account.PATH}/sign-in", bound(account.start))
    app.router.add_get(f"{account.PATH}/done", bound(account.done))
