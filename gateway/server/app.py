"""The application factory: ``create_app(settings)`` composes the layers; nothing is global, and
nothing imports this module back.

Routes: ``/mcp`` (MCP Streamable HTTP, both protocol eras: ``gateway.mcp.http``, over the
protocol core ``gateway.mcp.protocol``), ``/healthz``
(process alive), ``/readyz`` (state store open and ``GITLAB_URL`` not something other than GitLab;
GitLab's state reported: ``gateway.server.health``), ``/metrics`` (Prometheus text format) and
``/broker`` (the live broker console, when configured: ``gateway.console``). The app-wide
services come from the caller's factory (:mod:`gateway.server.services`); tests build their own
app with ``create_app(settings, services=partial(build_services, gitlab_http=...))``.
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Callable, Sequence

from aiohttp import web

from gateway import console, signin
from gateway.broker.ended_sessions import EndedSessions
from gateway.config import Settings
from gateway.mcp.http.delivery import finish_read_checks
from gateway.mcp.http.endpoint import McpEndpoint
from gateway.mcp.http.middlewares import mcp_middlewares
from gateway.mcp.http.sessions import SessionSealer, decode_key
from gateway.mcp.protocol.calls import ActiveCalls
from gateway.mcp.protocol.input_required import StateSealer
from gateway.mcp.protocol.server import McpServer
from gateway.mcp.protocol.telemetry import Telemetry
from gateway.observability.metrics import METRICS, Metrics
from gateway.server import health
from gateway.server.metrics_endpoint import metrics_handler
from gateway.server.services import SERVICES, ServicesFactory, build_services
from gateway.tools import all_tools
from gateway.tools.call_limits import CallsInFlight, RejectedTokens
from gateway.tools.rate_limits import build_limiter
from gateway.tools.registry import Registry, Tool


def _declared_tools() -> list[Tool]:
    tools = all_tools()
    if gc.get_freeze_count():  # a served gateway froze its start-up heap (gateway.server.serve)
        gc.freeze()  # the tool modules live as long as it does: out of the collector's passes too
    return tools


def create_app(
    settings: Settings, *, services: ServicesFactory = build_services, tools: Sequence[Tool] | None = None
) -> web.Application:
    """Build the gateway's aiohttp application.

    Args:
        settings: the effective configuration.
        services: builds the app-wide services at start-up and closes them at clean-up
            (:func:`~gateway.server.services.build_services`: everything from ``settings``).
        tools: the tools to serve instead of every declared one (tests).

    With ``server.conformance_fixtures`` (a test mode), the conformance suite's fixture tools are
    served too, and the protocol core answers its two extra methods.
    """
    server = settings.server
    metrics = Metrics()
    # The agent label's values: the broker's agents and the client tokens' (a closed set).
    agents = dict.fromkeys([*settings.broker.agents, *(c.agent_id for c in settings.client_tokens)])
    telemetry = Telemetry(metrics, agents=agents)
    app = web.Application(
        client_max_size=server.max_request_bytes,
        middlewares=mcp_middlewares(settings, telemetry),
        # Request bodies are decoded by the /mcp middlewares, which answer a bad encoding with a
        # JSON-RPC error and keep the connection; aiohttp's parser would answer 500 or drop it.
        handler_args={"auto_decompress": False},
    )
    app[METRICS] = metrics
    # The tool modules are imported at the first MCP request that needs them, not at start.
    served: Sequence[Tool] | Callable[[], Sequence[Tool]] = _declared_tools if tools is None else tools
    extension = None
    if server.conformance_fixtures:  # a test mode: its modules load only when it is on
        from gateway.testing.conformance import fixtures, tasks

        served = [*(all_tools() if tools is None else tools), *fixtures.TOOLS, *tasks.TOOLS]
        extension = fixtures.EXTENSION

    def limited(limit: str) -> Callable[[str], None]:
        """Counts a refusal by ``limit``, one of the three below (a closed set), per agent."""

        def count(agent: str) -> None:
            metrics.rate_limited.labels(agent=agent, limit=limit).inc()

        return count

    registry = Registry(
        served,
        read_only=settings.read_only,
        toolsets=settings.toolsets,
        enabled_tools=settings.tools,
        limiter=build_limiter(settings, limited("calls_per_second")),
        in_flight=CallsInFlight(settings.limits.max_calls_in_flight, limited("max_calls_in_flight")),
        rejected_tokens=RejectedTokens(
            settings.limits.passthrough_auth_failures,
            settings.limits.passthrough_auth_failure_window_seconds,
            limited("passthrough_auth_failures"),
        )
        if settings.gitlab.credential_mode == "passthrough"
        else None,
    )

    async def services_ctx(app: web.Application) -> AsyncIterator[None]:
        async with services(settings, metrics) as built:
            app[SERVICES] = built
            yield

    app.cleanup_ctx.append(services_ctx)

    async def read_checks_ctx(app: web.Application) -> AsyncIterator[None]:
        yield
        # Ends before services_ctx (cleanup runs in reverse): the answers still under their read
        # check (at most broker.read_check_seconds) are settled while the broker is open.
        await finish_read_checks()

    app.cleanup_ctx.append(read_checks_ctx)

    calls = ActiveCalls()

    async def stop_calls(app: web.Application) -> None:
        # Before the server waits for in-flight calls: answer every wait_for_message now, and end
        # long-running calls so their streams close at once rather than at the shutdown timeout.
        running = app.get(SERVICES)
        if running is not None and running.broker is not None:
            await running.broker.shutdown("the gateway is shutting down")
        calls.shutdown()

    app.on_shutdown.append(stop_calls)

    sealer = SessionSealer(
        key=decode_key(server.session_key.get_secret_value()) if server.session_key else None,
        previous_key=(
            decode_key(server.session_previous_key.get_secret_value())
            if server.session_previous_key
            else None
        ),
        ttl_seconds=server.session_ttl_seconds,
        metrics=metrics,
    )
    core = McpServer(
        registry=registry,
        telemetry=telemetry,
        calls=calls,
        services=lambda: app[SERVICES],
        page_size=server.tools_page_size,
        extension=extension,
        state_sealer=StateSealer(*sealer.root_keys),
        batch_concurrency=server.batch_concurrency,
    )

    def ended_sessions() -> EndedSessions:
        broker = app[SERVICES].broker
        if broker is None:  # build_services always opens one; only tools' own tests go without
            raise RuntimeError("the gateway has no broker database to keep ended sessions in")
        return broker.ended_sessions

    gate = None
    if settings.sign_in.enabled:
        from gateway.signin.gate import Gate

        def changes_things(name: str) -> bool:
            tool = registry.declared(name)
            return tool is not None and not tool.annotations.read_only

        gate = Gate(settings.sign_in, lambda: app[signin.SIGN_IN].grants, changes_things)
    McpEndpoint(settings, telemetry, sealer, calls, core, ended_sessions, gate).add_routes(app)
    signin.setup(app, settings, lambda: app[SERVICES].broker, lambda: app[SERVICES].gitlab.http)
    health.setup(app)
    external = None
    if settings.sign_in.enabled and settings.console.signs_in_people:
        from gateway.console.external import SignInRefused
        from gateway.signin.console_sign_in import ConsoleSignIn

        external = ConsoleSignIn(settings.sign_in, lambda: app[signin.SIGN_IN], SignInRefused)
    console.setup(app, settings, lambda: app[SERVICES].broker, lambda: health.gitlab_health(app), external)
    app.router.add_get("/metrics", metrics_handler(metrics.registry, lambda: app.get(SERVICES)))
    return app
