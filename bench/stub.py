"""The loopback GitLab stub of ``python -m bench``: GitLab's exact answers, at almost no cost.

The first time it sees a request (method, path and query, body), it asks the repository's GitLab
stand-in (which validates every GraphQL document against GitLab's schema and so costs far more
than GitLab's own answer would) and keeps the answer; every later identical request is answered
from memory. ``GET /__stub/count`` says how many GitLab requests it has served, so the benchmark
can print upstream requests per call.

    python -m bench.stub --port 8930 --upstream http://127.0.0.1:8929
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web

#: Response headers replayed (the rest describe the original connection or body encoding).
_KEEP = ("content-type", "link", "x-total", "x-total-pages", "x-page", "x-per-page", "x-next-page")


def make_app(upstream: str) -> web.Application:
    answers: dict[tuple[str, str, bytes], tuple[int, dict[str, str], bytes]] = {}
    served = 0

    async def count(request: web.Request) -> web.Response:
        return web.json_response({"requests": served})

    async def gitlab(request: web.Request) -> web.Response:
        nonlocal served
        served += 1
        body = await request.read()
        key = (request.method, request.path_qs, body)
        answer = answers.get(key)
        if answer is None:
            headers = {
                k: v
                for k, v in request.headers.items()
                if k.lower() in ("private-token", "authorization", "content-type", "accept")
            }
            async with request.app["http"].request(
                request.method, upstream + request.path_qs, data=body or None, headers=headers
            ) as response:
                content = await response.read()
                kept = {k: v for k, v in response.headers.items() if k.lower() in _KEEP}
                answer = (response.status, kept, content)
            if answer[0] < 500:
                answers[key] = answer
        status, headers, content = answer
        return web.Response(status=status, headers=headers, body=content)

    async def client(app: web.Application) -> AsyncIterator[None]:
        app["http"] = aiohttp.ClientSession()
        yield
        await app["http"].close()

    app = web.Application()
    app.cleanup_ctx.append(client)
    app.router.add_get("/__stub/count", count)
    app.router.add_route("*", "/{tail:.*}", gitlab)
    return app


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--upstream", required=True, help="the GitLab stand-in's base URL")
    args = ap.parse_args()
    web.run_app(
        make_app(args.upstream.rstrip("/")), host="127.0.0.1", port=args.port, access_log=None, print=None
    )


if __name__ == "__main__":
    main()
