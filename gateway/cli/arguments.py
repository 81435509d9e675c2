"""The command line: ``gitlab-mcp-gateway [flags] [broker COMMAND ...]`` parsed, and the options its
flags set (the last of the sources of ``gateway.config``: defaults < TOML < environment < flags).

Parsing imports only argparse and what names the choices: ``--help``, ``--version`` and a bad
flag never load the gateway's layers.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from gateway import PROG, REVISION, __version__
from gateway.broker.migrations import HEAD

#: The broker's own activity log (``gateway.broker.activity_log.PIPELINE_LOG``, which imports the
#: logging layer and aiohttp: not worth loading for ``--help``; a test keeps the two equal).
PIPELINE_LOG = "pipeline"


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
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_broker_parser(commands)
    _add_database_parser(commands)
    return parser.parse_args(argv)


def _add_broker_parser(subparsers: Any) -> None:
    """Add ``broker`` and its subcommands (run by ``gateway.cli.broker``) to the main parser's
    subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON instead of text")
    common.add_argument(
        "--as",
        dest="operator",
        metavar="NAME",
        help="your name in the activity log (default: your login name)",
    )
    common.add_argument(
        "--config", type=Path, default=argparse.SUPPRESS, help="TOML configuration file (as before 'broker')"
    )
    broker = subparsers.add_parser(
        "broker",
        help="watch and steer the phase broker from the command line",
        description="Watch and steer the phase broker, against the configured state store (the SQLite "
        "file in GATEWAY_STATE_DIR, or broker.database_url). The same actions as the console at /broker.",
        epilog=f"Example: {PROG} broker status; {PROG} broker instruct 'Keep v1; add v2 beside it.'",
    )
    commands = broker.add_subparsers(dest="broker_command", metavar="COMMAND", required=True)
    commands.add_parser("status", parents=[common], help="the pipeline's state, issues, agents, plan")
    history = commands.add_parser("history", parents=[common], help="the message history, newest page first")
    history.add_argument("--limit", type=int, default=50, help="messages per page (1-1000, default 50)")
    history.add_argument("--issue", help="only messages whose body.issue is this")
    history.add_argument("--before", metavar="CURSOR", help="an older page: the end_cursor a page gave")
    history.add_argument(
        "--pipeline",
        type=int,
        metavar="N",
        help="an archived pipeline's messages (its number from 'broker status' or 'broker reset')",
    )
    log = commands.add_parser("log", parents=[common], help="an activity log's last lines")
    log.add_argument("agent", metavar="AGENT", help=f"an agent id, or {PIPELINE_LOG!r} for the broker's own")
    log.add_argument("--lines", type=int, default=40, help="how many lines (default 40)")
    instruct = commands.add_parser(
        "instruct",
        parents=[common],
        help="send the PM an instruction (it reads it at its next wait; to answer a HUMAN_NEEDED or "
        "PAUSED pipeline, the PM then calls resume)",
    )
    instruct.add_argument("text", metavar="TEXT", help="what the PM should do")
    switch = commands.add_parser(
        "auto-advance",
        parents=[common],
        help="pause (off) or resume (on) auto-advance: the console's Pause/Resume auto-advance",
    )
    switch.add_argument("switch", choices=("on", "off"), help="on: resume it (needs a plan); off: pause it")
    commands.add_parser(
        "cancel-advance",
        parents=[common],
        help="cancel the advance under way (PAUSED until the PM resumes)",
    )
    for name, text in (
        ("stop", "stop the pipeline (every agent is told; until someone starts over)"),
        ("reset", "start over after a stop: archive the stopped pipeline, a new one starts in IDLE"),
    ):
        sub = commands.add_parser(name, parents=[common], help=text)
        sub.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    commands.add_parser(
        "confirmations",
        parents=[common],
        help='the destructive actions agents asked for that wait for an operator (confirm_by = "operator"): '
        "ticket, who asked, what, why",
    )
    for name, text in (
        ("approve", "approve the destructive action of a pending confirmation: the waiting call acts, once"),
        ("refuse", "refuse it: the call ends declined, and nothing is done"),
    ):
        sub = commands.add_parser(name, parents=[common], help=text)
        sub.add_argument("ticket", metavar="TICKET", help="the ticket 'broker confirmations' lists")
        sub.add_argument("--note", help="a sentence for the agent (why, or what to do instead)")


def _add_database_parser(subparsers: Any) -> None:
    """Add ``database`` and its subcommands (run by ``gateway.cli.database``) to the main parser's
    subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        type=Path,
        default=argparse.SUPPRESS,
        help="TOML configuration file (as before 'database')",
    )
    database = subparsers.add_parser(
        "database",
        help="the broker database's schema: status, upgrade, downgrade, backup, restore",
        description="The broker database's schema and copies (the SQLite file in GATEWAY_STATE_DIR, or "
        "broker.database_url). docs/operations.md, 'Schema migrations', gives the upgrade and rollback "
        "steps.",
    )
    commands = database.add_subparsers(dest="database_command", metavar="COMMAND", required=True)
    commands.add_parser("status", parents=[common], help="the schema revision, this install's, who uses it")
    force = argparse.ArgumentParser(add_help=False)
    force.add_argument(
        "--force",
        action="store_true",
        help="PostgreSQL: migrate although connections that may be gateways of another schema are open",
    )
    commands.add_parser(
        "upgrade", parents=[common, force], help=f"migrate to this install's newest revision ({HEAD})"
    )
    down = commands.add_parser(
        "downgrade",
        parents=[common, force],
        help="roll the schema back by one revision (stop the gateways first; what it added is dropped)",
    )
    down.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    save = commands.add_parser(
        "backup",
        parents=[common],
        help="copy the database to FILE (SQLite: while gateways run; PostgreSQL: pg_dump)",
    )
    save.add_argument("file", type=Path, metavar="FILE", help="the copy to write (must not exist)")
    load = commands.add_parser(
        "restore",
        parents=[common],
        help="replace the database with a backup (stop the gateways first)",
    )
    load.add_argument("file", type=Path, metavar="FILE", help="a file 'database backup' wrote")
    load.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    load.add_argument(
        "--force",
        action="store_true",
        help="PostgreSQL: restore although connections that may be gateways are open",
    )


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The options set by a flag, as ``load_settings`` takes them (flags win over the rest)."""
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


def flags(args: argparse.Namespace) -> dict[str, str]:
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
