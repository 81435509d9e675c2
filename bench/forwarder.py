"""The bare aiohttp forwarder of ``python -m bench``: the floor of any Python proxy.

aiohttp's server receives a POST and its client forwards one fixed GraphQL body to GitLab over a
pooled connection, and answers GitLab's bytes: no MCP, no validation, no logging.

    python -m bench.forwarder --port 8931 --upstream http://127.0.0.1:8930/api/graphql \
        --token glpat-... --body body.json
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
from aiohttp import web


def make_app(upstream: str, token: str, body: bytes) -> web.Application:
    headers = {"PRIVATE-TOKEN": token, "Content-Type": "application/json", "Accept": "application/json"}

    async def forward(request: web.Request) -> web.Response:
        await request.read()
        async with request.app["http"].post(upstream, data=body, headers=headers) as response:
            content = await response.read()
        return web.Response(body=content, content_type="application/json")

    async def client(app: web.Application) -> AsyncIterator[None]:
        app["http"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=100))
        yield
        await app["http"].close()

    app = web.Application()
    app.cleanup_ctx.append(client)
    app.router.add_post("/", forward)
    return app


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--body", type=Path, required=True)
    args = ap.parse_args()
    app = make_app(args.upstream, args.token, args.body.read_bytes())
    web.run_app(app, host="127.0.0.1", port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
