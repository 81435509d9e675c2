"""Start, step three: serve until SIGINT/SIGTERM.

In order: logging as configured, tracing when an OTLP endpoint is set, the listening socket
(a port in use is refused before the broker database is created), the app
(:func:`~gateway.server.app.create_app`), the optional metrics listener and operator socket, the
start-up check of GitLab, the start-up line, then aiohttp's ``run_app`` until a signal. Exit
statuses: see ``gateway.__main__``.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import math
import socket
import sys
from pathlib import Path

from aiohttp import web

from gateway import PROG, __version__
from gateway.config import ServerSettings, Settings

log = logging.getLogger("gateway")

#: Container objects allocated (net) before a young-generation collection; CPython's default is
#: 700. A call leaves no reference cycles behind, so collections reclaim almost nothing, but one
#: call's live objects (20 jobs decoded, validated and shaped) pass 700, and so at 32 concurrent
#: calls CPython collected about every 6 calls, promoting what was in flight to older generations
#: that then needed full passes: about 5% of the CPU per call. At 10,000 it collects rarely.
YOUNG_GC_THRESHOLD = 10_000


async def freeze_startup_heap(app: web.Application) -> None:
    """Move what start-up built (modules, settings: alive as long as the process)
    out of the garbage collector's view, so that its passes walk only what calls allocate, and
    collect the young generation less often (:data:`YOUNG_GC_THRESHOLD`).
    Without the freeze, at 32 concurrent calls, full passes over the start-up heap made p99
    latency over 3 times the median (1.3 times with it), and cost about a tenth of the CPU per
    call."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_GC_THRESHOLD, older, oldest)
    gc.enable()  # off while the gateway started (gateway.__main__)


def limits_shown(settings: Settings) -> str:
    """The per-agent limits for the start-up line: ``off``, or the rate and burst, and which
    agents' client tokens have their own."""
    glob = settings.limits
    own = sorted({c.agent_id for c in settings.client_tokens if c.calls_per_second or c.burst})
    parts = []
    if glob.calls_per_second:
        parts.append(f"{glob.calls_per_second:g}/s burst {glob.burst or math.ceil(glob.calls_per_second)}")
    if own:
        parts.append(f"own limits for {', '.join(own)}")
    return "; ".join(parts) or "off"


def confirm_by_shown(settings: Settings) -> dict[str, str]:
    """``confirm_by=operator`` on the start-up line when set (it changes what a confirmed tool
    waits for: a person at the console or the CLI); nothing for the default."""
    return {"confirm_by": settings.confirm_by} if settings.confirm_by != "client" else {}


def _bind_error(err: OSError) -> bool:
    # socket.gaierror: server.host is no address and no name the resolver knows.
    return isinstance(err, socket.gaierror) or err.errno in (
        errno.EADDRINUSE,
        errno.EACCES,
        errno.EADDRNOTAVAIL,
    )


def _bind_hint(err: OSError, server: ServerSettings, *, metrics: bool = False) -> str:
    """For a port in use: which option moves the gateway to another port; for a host that is no
    address: what to give instead. ``metrics``: the error is the metrics listener's."""
    if isinstance(err, socket.gaierror):
        if metrics:
            return (
                f" (server.metrics_host {server.metrics_host!r}). Give an IP address or a name this "
                "machine resolves, e.g. 0.0.0.0 (the default) or 127.0.0.1"
            )
        return (
            f" (server.host {server.host!r}). Give an IP address or a name this machine resolves, e.g. "
            "--host 127.0.0.1 (the default) or --host 0.0.0.0 in a container"
        )
    if err.errno != errno.EADDRINUSE:
        return ""
    option = (
        "server.metrics_port (GATEWAY_SERVER__METRICS_PORT=N)"
        if metrics
        else "server.port (--port N, or GATEWAY_SERVER__PORT=N)"
    )
    return f". Another process listens there: stop it, or choose another port with {option}"


def _cannot_listen(err: OSError, server: ServerSettings, *, metrics: bool = False) -> int:
    if not _bind_error(err):
        raise err
    print(
        f"{PROG}: cannot listen: {err.strerror or err}{_bind_hint(err, server, metrics=metrics)}",
        file=sys.stderr,
    )
    return 1


def serve(settings: Settings, *, gitlab_url: str, warnings: list[str]) -> int:
    """Run the gateway until SIGINT/SIGTERM; the exit status.

    Args:
        settings: the effective configuration.
        gitlab_url: ``gitlab.url`` in its normal form, for the start-up line.
        warnings: lines logged as warnings after the start-up line (environment variables that
            name no option).
    """
    from gateway.listening import bound_sockets
    from gateway.observability import tracing
    from gateway.observability.logging import configure_logging, redact, secrets_of

    configure_logging(settings.logging, secrets=secrets_of(settings))
    if tracing.configure():
        log.info(
            "tracing on: spans go to %s (OTLP/HTTP), sampler %s",
            redact(tracing.traces_endpoint()),
            tracing.sampler(),
        )
    server = settings.server
    try:
        # Before anything starts: a port in use is refused before the broker database is created.
        listening = bound_sockets(server.host, server.port)
    except OSError as err:
        return _cannot_listen(err, server)

    from gateway.allocator import fix_mmap_threshold
    from gateway.broker.store import DatabaseUnusable, StoreError
    from gateway.server.app import create_app
    from gateway.server.metrics_listener import serve_metrics_port
    from gateway.server.operator_socket import serve_operator_socket

    fix_mmap_threshold()
    app = create_app(settings)
    try:
        serve_metrics_port(app, settings)
    except OSError as err:
        return _cannot_listen(err, server, metrics=True)
    serve_operator_socket(app, settings)
    if settings.gitlab.startup_check:
        from gateway.server.startup_check import check_gitlab_at_start

        check_gitlab_at_start(app, settings)

    serving: list[bool] = []  # set once the gateway listens: a start that fails to bind never served

    def on_listening(message: str) -> None:
        serving.append(True)
        log.info(message.splitlines()[0].strip("= ") + "/mcp")

    async def on_shutdown(app: web.Application) -> None:
        if serving:
            log.info(
                "shutting down: no new connections; in-flight calls get %gs", server.shutdown_timeout_seconds
            )

    async def on_cleanup(app: web.Application) -> None:
        # The spans of the last calls are exported before the process ends.
        await asyncio.to_thread(tracing.shutdown)
        if serving:
            log.info("stopped")

    app.on_startup.append(freeze_startup_heap)
    app.on_shutdown.insert(0, on_shutdown)
    app.on_cleanup.append(on_cleanup)
    from gateway.event_loop import new_event_loop

    loop, loop_name = new_event_loop(server.event_loop)
    log.info(
        "starting gitlab-mcp-gateway %s",
        __version__,
        extra={
            "gitlab_url": redact(gitlab_url),
            "credential_mode": settings.gitlab.credential_mode,
            "state_dir": str(Path(settings.state_dir).resolve()),
            "read_only": settings.read_only,
            "cache_enabled": settings.cache.enabled,
            "metrics_port": server.metrics_port,
            "event_loop": loop_name,
            "limits": limits_shown(settings),
            "tracing": "on" if tracing.ENABLED else "off",
            "console": "on" if settings.console.enabled else "off",
            **confirm_by_shown(settings),
        },
    )
    for line in warnings:
        log.warning(line)
    _log_what_needs_care(settings)
    try:
        web.run_app(
            app,
            loop=loop,  # run_app closes it
            sock=listening,
            shutdown_timeout=server.shutdown_timeout_seconds,
            print=on_listening,
            # One line per MCP request comes from the transport; aiohttp's access log only at DEBUG.
            access_log=logging.getLogger("aiohttp.access"),
        )
    except DatabaseUnusable as err:
        # broker.database_url names a database this gateway cannot use: a configuration error.
        log.debug("start-up failed", exc_info=True)
        print(f"{PROG}: configuration error: {err}", file=sys.stderr)
        return 2
    except (StoreError, ValueError) as err:
        # Start-up refusals with a message written for the operator (state folder in use, an
        # unreadable CA bundle...); run_app only lets start-up and clean-up failures out.
        log.debug("start-up failed", exc_info=True)
        print(f"{PROG}: cannot start: {err}", file=sys.stderr)
        return 1
    return 0


def _log_what_needs_care(settings: Settings) -> None:
    """The start-up lines after the first: where the console is, and an anonymous GitLab."""
    server = settings.server
    if settings.console.enabled:
        console = settings.console
        roles = " and ".join(
            role
            for role, given in (
                ("operators", console.operator_token is not None),
                ("viewers", console.viewer_token is not None),
                ("GitLab operators", bool(console.operators)),
                ("GitLab viewers", bool(console.viewers)),
            )
            if given
        )
        log.info("broker console on for %s at http://%s:%s/broker", roles, server.host, server.port)
    if settings.sign_in.enabled:
        log.info(
            "sign-in through GitLab on: issuer %s, resource %s/mcp, GitLab application redirect URI "
            "%s/oauth/gitlab/callback",
            settings.sign_in.issuer,
            settings.sign_in.issuer,
            settings.sign_in.issuer,
        )
    elif settings.gitlab.credential_mode == "service" and settings.gitlab.token is None:
        log.warning(
            "GITLAB_TOKEN is not set, so the GitLab tools read public projects only, anonymously; set "
            "GITLAB_TOKEN (gitlab.token; scope api, or read_api with --read-only), or set "
            'gitlab.credential_mode = "passthrough" (GATEWAY_GITLAB__CREDENTIAL_MODE) to use each '
            "caller's own token"
        )
