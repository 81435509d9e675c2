"""Command line: ``gitlab-mcp-gateway`` / ``python -m gateway``.

Flags: ``--host`` (default 127.0.0.1), ``--port`` (8080), ``--config FILE`` (TOML),
``--read-only``, ``--conformance-fixtures`` (test mode, loopback only), ``--print-config`` (the
effective configuration as JSON, secrets masked, then exit), ``--example-config`` (the example
configuration file, every option commented, then exit), ``--migrate`` (bring the broker
database's schema up to date, then exit: ``database upgrade``), ``--version``; the ``broker``
subcommands (``gateway.cli.broker``: status, history, log, instruct, stop, reset) and the
``database`` subcommands (``gateway.cli.database``: status, upgrade, downgrade, backup,
restore). Precedence: defaults < TOML file < environment < flags (``gateway.config``).

Exit status: 0 after a clean stop (SIGTERM or SIGINT: stop accepting, let in-flight calls finish
within ``server.shutdown_timeout_seconds``, wake broker waiters, close the database); 2 for a
configuration error, printed as one line per bad option naming it (``server.port: ...``, or the
variable or flag it came from, then the option: ``GATEWAY_SERVER__PORT (server.port): ...``)
with no stack trace (a
``broker.database_url`` whose database refuses the credentials, does not exist, has a newer
schema or stays unreachable for ``broker.connect_timeout_seconds`` included); 1
when the gateway cannot start (the listening address cannot be bound, the state folder is in use
by another gateway...), with one line saying why.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import gc
import json
import logging
import math
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web
from pydantic import ValidationError

from gateway import REVISION, __version__

if TYPE_CHECKING:
    from gateway.config import ServerSettings, Settings

PROG = "gitlab-mcp-gateway"
log = logging.getLogger("gateway")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line (``argparse`` exits with status 2 and a usage line on bad flags)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="MCP gateway to GitLab (Streamable HTTP on /mcp), with a phase broker for agents.",
        epilog="Every option of the TOML file can also be set from the environment: --example-config "
        "prints them all, with their defaults and environment names.",
    )
    parser.add_argument("--host", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to listen on (default 8080)")
    parser.add_argument(
        "--config", type=Path, help="TOML configuration file (--example-config prints one to start from)"
    )
    parser.add_argument("--read-only", action="store_true", default=None, help="serve only read-only tools")
    parser.add_argument(
        "--toolsets",
        help="serve only these toolsets, comma-separated: ci, repository, duo_agent_platform, broker, "
        "superseded, or the keywords default and all (default: default, every toolset but superseded)",
    )
    parser.add_argument(
        "--tools",
        help="serve these tools besides --toolsets, comma-separated (with no --toolsets: only these)",
    )
    parser.add_argument(
        "--conformance-fixtures",
        action="store_true",
        default=None,
        help="test mode: add the MCP conformance suite's fixture tools (refused unless bound to loopback)",
    )
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the effective configuration (JSON, secrets masked) and exit",
    )
    parser.add_argument(
        "--example-config",
        action="store_true",
        help="print an example configuration file (every option, set to its default, with what it does) "
        "and exit: --example-config > gateway.toml",
    )
    parser.add_argument(
        "--migrate",
        action="store_true",
        help="bring the broker database's schema up to date and exit, as 'database upgrade' (a "
        "deployment step; the gateway also does it at start)",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__} (revision {REVISION})"
    )
    from gateway.cli import broker as broker_cli
    from gateway.cli import database as database_cli

    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    broker_cli.add_parser(commands, PROG)
    database_cli.add_parser(commands)
    return parser.parse_args(argv)


#: The example configuration, shipped inside the package so that every installation has it.
EXAMPLE_CONFIG = "config_example.toml"


def example_config() -> str:
    """The text of the example configuration file (``--example-config``)."""
    from importlib.resources import files

    return files("gateway").joinpath(EXAMPLE_CONFIG).read_text(encoding="utf-8")


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    server: dict[str, Any] = {}
    if args.host is not None:
        server["host"] = args.host
    if args.port is not None:
        server["port"] = args.port
    out: dict[str, Any] = {}
    if args.conformance_fixtures:
        server["conformance_fixtures"] = True
    if server:
        out["server"] = server
    if args.read_only:
        out["read_only"] = True
    if args.toolsets is not None:
        out["toolsets"] = args.toolsets
    if args.tools is not None:
        out["tools"] = args.tools
    return out


def _flags(args: argparse.Namespace) -> dict[str, str]:
    """The options set by a flag, with that flag: what a configuration error names."""
    given = {
        "server.host": ("--host", args.host is not None),
        "server.port": ("--port", args.port is not None),
        "read_only": ("--read-only", bool(args.read_only)),
        "toolsets": ("--toolsets", args.toolsets is not None),
        "tools": ("--tools", args.tools is not None),
        "server.conformance_fixtures": ("--conformance-fixtures", bool(args.conformance_fixtures)),
    }
    return {option: flag for option, (flag, used) in given.items() if used}


def masked_config(settings: Settings) -> dict[str, Any]:
    """The effective configuration as JSON-ready data with every secret masked.

    Tokens (``SecretStr``) print as ``**********`` (None when unset); passwords in URLs and any
    configured secret found elsewhere are redacted as in the logs.
    """
    from gateway.observability.logging import secrets_of
    from gateway.observability.redaction import Redactor

    redactor = Redactor(secrets_of(settings))
    data: dict[str, Any] = redactor.redact_strings(settings.model_dump(mode="json"))
    if settings.broker.database_url is not None:
        from gateway.broker.database import shown_url

        data["broker"]["database_url"] = shown_url(settings.broker.database_url.get_secret_value())
    return data


def _limits_shown(settings: Settings) -> str:
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


#: Container objects allocated (net) before a young-generation collection; CPython's default is
#: 700. A call leaves no reference cycles behind, so collections reclaim almost nothing, but one
#: call's live objects (20 jobs decoded, validated and shaped) pass 700, and so at 32 concurrent
#: calls CPython collected about every 6 calls, promoting what was in flight to older generations
#: that then needed full passes: about 5% of the CPU per call. At 10,000 it collects rarely.
YOUNG_GC_THRESHOLD = 10_000


async def freeze_startup_heap(app: web.Application) -> None:
    """Move what start-up built (modules, tool schemas, settings: alive as long as the process)
    out of the garbage collector's view, so that its passes walk only what calls allocate, and
    collect the young generation less often (:data:`YOUNG_GC_THRESHOLD`).
    Without the freeze, at 32 concurrent calls, full passes over the start-up heap made p99
    latency over 3 times the median (1.3 times with it), and cost about a tenth of the CPU per
    call."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_GC_THRESHOLD, older, oldest)


def main(argv: list[str] | None = None) -> int:
    """Run the gateway until SIGINT/SIGTERM; return the exit status (see the module docstring)."""
    from gateway.config import load_settings
    from gateway.config_errors import (
        config_error_lines,
        environment_source,
        unknown_environment,
        value_error_line,
    )

    args = parse_args(argv)
    if args.example_config:  # before the configuration is read: it may be what is broken
        sys.stdout.write(example_config())
        return 0
    try:
        settings = load_settings(args.config, **_overrides(args))
    except ValidationError as err:
        for line in config_error_lines(err, flags=_flags(args)):
            print(f"{PROG}: configuration error: {line}", file=sys.stderr)
        return 2
    except FileNotFoundError as err:
        print(f"{PROG}: configuration error: {err}", file=sys.stderr)
        return 2
    except ValueError as err:  # TOML syntax (tomllib.TOMLDecodeError), environment JSON (SettingsError)
        print(f"{PROG}: configuration error: {value_error_line(err, args.config)}", file=sys.stderr)
        return 2
    from gateway.tools import undeclared_tool_names

    tools_source = environment_source(("tools",))
    undeclared = undeclared_tool_names(
        settings, _flags(args).get("tools") or (tools_source[0] if tools_source else "tools")
    )
    for line in undeclared:
        print(f"{PROG}: configuration error: {line}", file=sys.stderr)
    if undeclared:
        return 2
    from gateway.gitlab.urls import normalize_base_url

    try:
        gitlab_url = normalize_base_url(settings.gitlab.url).url
    except ValueError as err:  # credentials, a query, a fragment or a bad port in the URL
        source = environment_source(("gitlab", "url"))
        named = f"{source[0]} (gitlab.url)" if source else "gitlab.url"
        print(f"{PROG}: configuration error: {named}: {err}", file=sys.stderr)
        return 2
    from gateway.config_errors import refused_environment, unknown_environment_line

    unknown = unknown_environment()
    for name in filter(refused_environment, unknown):  # the others are warned about below
        print(f"{PROG}: configuration error: {unknown_environment_line(name, refused=True)}", file=sys.stderr)
    if any(map(refused_environment, unknown)):
        return 2
    if args.print_config:
        for name in unknown:
            print(f"{PROG}: warning: {unknown_environment_line(name)}", file=sys.stderr)
        print(json.dumps(masked_config(settings), indent=2))
        return 0

    from gateway.observability.logging import configure_logging, redact, secrets_of

    configure_logging(settings.logging, secrets=secrets_of(settings))
    if args.migrate or args.command == "database":
        from gateway.cli import database as database_cli

        if args.migrate:
            args.database_command = "upgrade"
        return database_cli.run(args, settings)
    if args.command == "broker":
        from gateway.cli import broker as broker_cli

        return broker_cli.run(args, settings, prog=PROG)

    from gateway.listening import bound_sockets
    from gateway.observability import tracing

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
        if not _bind_error(err):
            raise
        print(f"{PROG}: cannot listen: {err.strerror or err}{_bind_hint(err, server)}", file=sys.stderr)
        return 1

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
        if not _bind_error(err):
            raise
        print(
            f"{PROG}: cannot listen: {err.strerror or err}{_bind_hint(err, settings.server, metrics=True)}",
            file=sys.stderr,
        )
        return 1
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
            "limits": _limits_shown(settings),
            "tracing": "on" if tracing.ENABLED else "off",
            "console": "on" if settings.console.enabled else "off",
        },
    )
    for name in unknown:
        log.warning(unknown_environment_line(name))
    if settings.console.enabled:
        roles = " and ".join(
            role
            for role, token in (
                ("operators", settings.console.operator_token),
                ("viewers", settings.console.viewer_token),
            )
            if token is not None
        )
        log.info("broker console on for %s at http://%s:%s/broker", roles, server.host, server.port)
    if settings.gitlab.credential_mode == "service" and settings.gitlab.token is None:
        log.warning(
            "GITLAB_TOKEN is not set, so the GitLab tools read public projects only, anonymously; set "
            "GITLAB_TOKEN (gitlab.token; scope api, or read_api with --read-only), or set "
            'gitlab.credential_mode = "passthrough" (GATEWAY_GITLAB__CREDENTIAL_MODE) to use each '
            "caller's own token"
        )
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


if __name__ == "__main__":
    sys.exit(main())
