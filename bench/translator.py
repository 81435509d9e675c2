"""The bare translator of ``python -m bench``: the least a Python server that *translates* costs.

The bare forwarder (``bench/forwarder.py``) relays GitLab's bytes. This server does what the
gateway exists for, with the gateway's own code and nothing around it: it parses a JSON-RPC
``tools/call`` of ``get_pipeline``, validates the arguments with the tool's input model, sends
the one GraphQL request over aiohttp's pool, validates GitLab's answer into the answer models,
shapes the pipeline and its jobs into the tool's output model, and answers the JSON-RPC result
(``content`` text and ``structuredContent``). No session, client authentication, Origin check,
access line, metrics, retries, redaction or cancellation: its CPU per call is the floor under any
gateway that keeps those. Only for the benchmark; it answers nothing but that one call.

    python -m bench.translator --port 8932 --gitlab-url http://127.0.0.1:8930 \
        --token glpat-...
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from gateway.event_loop import new_event_loop
from gateway.gitlab.instance import InstanceInfo
from gateway.gitlab.operation_loader import graphql_body
from gateway.gitlab.urls import GitLabBase, normalize_base_url
from gateway.mcp.protocol.shaping import shaped_tool_result
from gateway.mcp.protocol.wire import response
from gateway.tools.ci.get_pipeline import GetPipelineInput, get_pipeline
from gateway.tools.result import ToolResult

HTTP: web.AppKey[aiohttp.ClientSession] = web.AppKey("http", aiohttp.ClientSession)
VERSION = "2025-06-18"


class NewestGitLab:
    """The instance as the gateway knows it before it has read GitLab's version: the newest
    documents are sent (the translator asks GitLab nothing but the tool's own request)."""

    #: No version read is ever due: ``Operation.run`` takes :attr:`info` without a coroutine.
    due = False
    info = InstanceInfo()

    async def current(self, session: Any) -> InstanceInfo:
        return InstanceInfo()

    async def recheck(self, session: Any) -> InstanceInfo:
        return InstanceInfo()


class BareGitLab:
    """What ``get_pipeline`` asks of its GitLab session: one GraphQL request, web URLs, and the
    instance its documents are chosen for (``client.instance``)."""

    request_id = None

    def __init__(self, http: aiohttp.ClientSession, base: GitLabBase, token: str) -> None:
        self.http, self.base = http, base
        self.client = self
        self.instance = NewestGitLab()
        self.headers = {
            "PRIVATE-TOKEN": token,
            "Content-Type": "application/json",
            "Accept": "application/json",
        }

    async def graphql(self, name: str, variables: Mapping[str, Any], *, mutation: bool = False) -> Any:
        body = graphql_body(name, variables)
        async with self.http.post(self.base.graphql_url, data=body, headers=self.headers) as answer:
            return orjson.loads(await answer.read())["data"]

    def web_url(self, path: str) -> str:
        return self.base.web_url(path)


class BareContext:
    """The one thing the handler reads off its :class:`~gateway.tools.context.ToolContext`."""

    def __init__(self, gitlab: BareGitLab) -> None:
        self.gitlab = gitlab


def make_app(gitlab_url: str, token: str) -> web.Application:
    base = normalize_base_url(gitlab_url)

    async def call(request: web.Request) -> web.Response:
        message = orjson.loads(await request.read())
        args = GetPipelineInput.model_validate(message["params"]["arguments"])
        ctx = BareContext(BareGitLab(request.app[HTTP], base, token))
        out = await get_pipeline(ctx, args)  # type: ignore[arg-type]  # duck-typed context
        structured = out.model_dump(mode="json", exclude_unset=True, by_alias=True)
        result = shaped_tool_result(VERSION, ToolResult(structured=structured))
        return web.Response(body=response(message["id"], result), content_type="application/json")

    async def client(app: web.Application) -> AsyncIterator[None]:
        app[HTTP] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=100))
        yield
        await app[HTTP].close()

    app = web.Application()
    app.cleanup_ctx.append(client)
    app.router.add_post("/", call)
    return app


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--gitlab-url", required=True, help="the GitLab (stub) base URL")
    ap.add_argument("--token", required=True)
    args = ap.parse_args()
    app = make_app(args.gitlab_url, args.token)
    # The event loop the gateway runs on by default, so that the two rows compare translation only.
    loop, _ = new_event_loop("auto")
    web.run_app(app, host="127.0.0.1", port=args.port, access_log=None, print=None, loop=loop)


if __name__ == "__main__":
    main()
