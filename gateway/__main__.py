"""Command line: ``gitlab-mcp-gateway`` / ``python -m gateway``.

Flags: ``--host`` (default 127.0.0.1), ``--port`` (8080), ``--config FILE`` (TOML),
``--read-only``, ``--print-config`` (effective configuration, secrets masked, then exit).
Configuration errors are printed as one line per bad option and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from gateway import __version__


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(
        prog="gitlab-mcp-gateway",
        description="MCP gateway to GitLab (Streamable HTTP on /mcp), with a phase broker for agents.",
    )
    parser.add_argument("--host", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to listen on (default 8080)")
    parser.add_argument("--config", type=Path, help="TOML configuration file (see config/gateway.example.toml)")
    parser.add_argument("--read-only", action="store_true", default=None, help="serve only read-only tools")
    parser.add_argument("--print-config", action="store_true", help="print the effective configuration and exit")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser.parse_args(argv)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    server: dict[str, Any] = {}
    if args.host is not None:
        server["host"] = args.host
    if args.port is not None:
        server["port"] = args.port
    out: dict[str, Any] = {}
    if server:
        out["server"] = server
    if args.read_only:
        out["read_only"] = True
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the gateway until SIGINT/SIGTERM; return the exit status."""
    from gateway.config import load_settings

    args = parse_args(argv)
    try:
        settings = load_settings(args.config, **_overrides(args))
    except ValidationError as err:
        for e in err.errors():
            option = ".".join(str(p) for p in e["loc"]) or "configuration"
            print(f"gitlab-mcp-gateway: configuration error: {option}: {e['msg']}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as err:
        print(f"gitlab-mcp-gateway: configuration error: {err}", file=sys.stderr)
        return 2
    if args.print_config:
        print(json.dumps(settings.model_dump(mode="json"), indent=2))
        return 0

    from gateway.app import create_app

    app = create_app(settings)
    web.run_app(
        app,
        host=settings.server.host,
        port=settings.server.port,
        shutdown_timeout=settings.server.shutdown_timeout_seconds,
        print=lambda msg: print(msg, file=sys.stderr, flush=True),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
