"""``python -m tests.standin.bands``: one stand-in process answering as many GitLab bands at once.

Each band (a GitLab version and edition) is a whole stand-in (:func:`tests.standin.server.create_app`:
its own data, request log, faults and control API) on its own loopback port, GitLab at the root,
exactly as ``python -m tests.standin --gitlab-version V --gitlab-edition E`` would serve it; the
process holds them all, so the band matrix pays for one interpreter, one set of imports and one
read of GitLab's cached introspection instead of one per band. A band is added when first asked
for, so a test worker builds only the bands' schemas (about a second of CPU each) it runs.

The manager API, on its own port (written to ``--ready-file`` as ``{"url", "port", "pid"}``):

- ``POST /bands/<version>-<edition>`` (``/bands/17.11-ce``): serve that band (once; asking again
  answers the same) → ``{"url", "port", "version", "edition"}``; 400 for a bad band.
- ``DELETE /bands/<version>-<edition>``: stop serving it and free its schema and data (204).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path

from aiohttp import web

from tests.gitlab.band_schema import SCHEMA_FILE
from tests.gitlab.versions import Edition, parse_version
from tests.standin.graphql_api import GraphQLEndpoint, load_band_schema
from tests.standin.server import create_app

HOST = "127.0.0.1"
BANDS = web.AppKey("bands", dict[tuple[str, str], tuple[dict[str, object], web.AppRunner]])
LOCK = web.AppKey("lock", asyncio.Lock)


def _band(request: web.Request) -> tuple[str, Edition]:
    version, _, edition = request.match_info["band"].rpartition("-")
    try:
        parse_version(version)
    except ValueError as exc:
        raise web.HTTPBadRequest(text=str(exc)) from None
    if edition not in ("ee", "ce"):
        raise web.HTTPBadRequest(text=f"edition must be ee or ce, got {edition!r} (e.g. /bands/17.11-ce)")
    return version, edition  # type: ignore[return-value]


async def add_band(request: web.Request) -> web.Response:
    """Serve the band named in the path (see the module docstring)."""
    key = _band(request)
    bands = request.app[BANDS]
    async with request.app[LOCK]:  # asked twice at once, it is built once
        if key not in bands:
            bands[key] = await _serve_band(*key)
    return web.json_response(bands[key][0])


async def drop_band(request: web.Request) -> web.Response:
    """Stop serving the band named in the path."""
    async with request.app[LOCK]:
        served = request.app[BANDS].pop(_band(request), None)
    if served is not None:
        await served[1].cleanup()
    return web.Response(status=204)


async def _serve_band(version: str, edition: Edition) -> tuple[dict[str, object], web.AppRunner]:
    schema = load_band_schema(version, edition, SCHEMA_FILE)
    runner = web.AppRunner(
        create_app(GraphQLEndpoint(schema), gitlab=(version, edition)), access_log=None, handle_signals=False
    )
    await runner.setup()
    await web.TCPSite(runner, HOST, 0).start()
    port = next(addr[1] for addr in runner.addresses if isinstance(addr, tuple))
    return {"url": f"http://{HOST}:{port}", "port": port, "version": version, "edition": edition}, runner


async def serve(port: int, ready_file: Path | None) -> None:
    """Listen for the manager API, announce readiness, run until SIGTERM or SIGINT."""
    manager = web.Application()
    manager[BANDS] = {}
    manager[LOCK] = asyncio.Lock()
    manager.router.add_post("/bands/{band}", add_band)
    manager.router.add_delete("/bands/{band}", drop_band)
    runner = web.AppRunner(manager, access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, HOST, port).start()
    port = next(addr[1] for addr in runner.addresses if isinstance(addr, tuple))
    print(f"GitLab band stand-in ready on http://{HOST}:{port} (pid {os.getpid()})", flush=True)
    if ready_file is not None:
        tmp = ready_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"url": f"http://{HOST}:{port}", "port": port, "pid": os.getpid()}))
        tmp.replace(ready_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for _info, band in manager[BANDS].values():
            await band.cleanup()
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit status."""
    ap = argparse.ArgumentParser(prog="python -m tests.standin.bands", description=__doc__)
    ap.add_argument("--port", type=int, default=0, help="the manager's port; 0 picks a free one (default)")
    ap.add_argument("--ready-file", type=Path, help="write the manager's URL here as JSON once listening")
    ap.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    asyncio.run(serve(args.port, args.ready_file))
    return 0


if __name__ == "__main__":
    sys.exit(main())
