"""``python -m tests.standin``: run the GitLab stand-in until SIGTERM or SIGINT.

Examples::

    python -m tests.standin --port 8929                    # GITLAB_URL=http://127.0.0.1:8929
    python -m tests.standin --port 0 --prefix /gitlab      # any free port; GitLab under /gitlab

When it is listening it prints one line, ``GitLab stand-in ready on <url> (...)``, and, with
``--ready-file``, writes ``{"url", "port", "prefix", "pid"}`` there as JSON (what the pytest
fixture waits for).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

from aiohttp import web

from tests.gitlab.versions import NEWEST, parse_version

REPO = Path(__file__).resolve().parents[2]
DEFAULT_SCHEMA = REPO / "tests" / "gitlab" / "gitlab_schema.graphql"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m tests.standin", description="GitLab stand-in for tests.")
    ap.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=0, help="TCP port; 0 picks a free one (default 0)")
    ap.add_argument(
        "--prefix", default="", help="serve GitLab under this sub-path, e.g. /gitlab (default: root)"
    )
    ap.add_argument(
        "--schema",
        type=Path,
        default=DEFAULT_SCHEMA,
        help="GitLab's GraphQL SDL (default: tests/gitlab/gitlab_schema.graphql)",
    )
    ap.add_argument(
        "--gitlab-version",
        default=NEWEST,
        help=f"answer as this GitLab version, e.g. 17.5 (default {NEWEST}, the schema file's)",
    )
    ap.add_argument(
        "--gitlab-edition", default="ee", choices=("ee", "ce"), help="GitLab EE or CE (default ee)"
    )
    ap.add_argument("--ready-file", type=Path, help="write the URL here as JSON once listening")
    ap.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    args = ap.parse_args(argv)
    if args.prefix and (not args.prefix.startswith("/") or args.prefix.endswith("/")):
        ap.error(f"--prefix must start with '/' and not end with one, e.g. /gitlab; got {args.prefix!r}")
    try:
        parse_version(args.gitlab_version)
    except ValueError as exc:
        ap.error(f"--gitlab-version: {exc}")
    if not args.schema.is_file():
        ap.error(f"--schema {args.schema} does not exist")
    return args


async def serve(args: argparse.Namespace) -> None:
    """Load the schema, listen, announce readiness, and run until a termination signal."""
    from tests.standin.graphql_api import GraphQLEndpoint, load_band_schema
    from tests.standin.server import create_app

    started = time.perf_counter()
    gitlab = (args.gitlab_version, args.gitlab_edition)
    schema = load_band_schema(*gitlab, args.schema)
    loaded = time.perf_counter() - started
    app = create_app(GraphQLEndpoint(schema), prefix=args.prefix, gitlab=gitlab, schema_path=args.schema)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port)
    await site.start()
    port = next(addr[1] for addr in runner.addresses if isinstance(addr, tuple))
    url = f"http://{args.host}:{port}{args.prefix}"
    band = f"GitLab {args.gitlab_version} {args.gitlab_edition.upper()}"
    print(
        f"GitLab stand-in ready on {url} ({band}, schema loaded in {loaded:.2f}s, pid {os.getpid()})",
        flush=True,
    )
    if args.ready_file:
        tmp = args.ready_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"url": url, "port": port, "prefix": args.prefix, "pid": os.getpid()}))
        tmp.replace(args.ready_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit status."""
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
