"""The walk of one ``tools/call`` through the gateway: the gateway modules it enters, in order,
and how deep the gateway's frames go.

    .venv/bin/python -m bench.call_walk                 # handshake era (a 2025-11-25 session)
    .venv/bin/python -m bench.call_walk --era stateless # 2026-07-28, per-request _meta

The in-process app (aiohttp's test server) answers one ``get_pipeline`` call (20 jobs) against the
repository's GitLab stand-in, also served in-process; a first call warms up lazy imports and
loaded documents, the second is walked under ``sys.setprofile``. Only frames of ``gateway.*``
modules on the request's own stacks are counted: the HTTP handler's (its outermost gateway frame
is in ``gateway.mcp``) and the tool's task (``gateway.tools.registry``); background loops (the
broker's housekeeping) are left out. A module is "entered" when its first frame starts; the depth
is the most ``gateway.*`` frames on one stack at once (awaiting coroutines included), for each of
the two; "re-entries" counts the times the walk comes back to a module it had left for another.
It also counts the Python calls on those stacks, libraries included (a figure of the request's
CPU cost that other load on the machine does not move).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from gateway.config import load_settings
from gateway.server.app import create_app
from tests.standin import dataset as ds
from tests.standin.graphql_api import GraphQLEndpoint, load_schema
from tests.standin.server import create_app as create_standin

SCHEMA = Path(ds.__file__).resolve().parents[1] / "gitlab" / "gitlab_schema.graphql"
STATELESS = "2026-07-28"
ACCEPT = "application/json, text/event-stream"


class Walk:
    """What ``sys.setprofile`` saw of the gateway's frames."""

    def __init__(self) -> None:
        self.entered: list[str] = []
        #: Most gateway frames at once: on the HTTP handler's stack, on the tool task's.
        self.depth = {"handler": 0, "tool": 0}
        self.deepest: dict[str, list[str]] = {"handler": [], "tool": []}
        self.reentries = 0
        #: Python calls on the request's stacks (libraries called on its behalf included), and
        #: those of gateway modules.
        self.calls = 0
        self.gateway_calls = 0
        self._last: str | None = None
        self._left: set[str] = set()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        stack: list[str] = []  # the gateway frames, innermost first
        current: FrameType | None = frame
        while current is not None:
            name = current.f_globals.get("__name__", "")
            if name.startswith("gateway"):
                stack.append(f"{name}.{current.f_code.co_name}")
            current = current.f_back
        if not stack:
            return
        outermost = stack[-1]
        if outermost.startswith("gateway.mcp."):
            where = "handler"
        elif outermost.startswith("gateway.tools.registry."):
            where = "tool"
        else:
            return  # a background task's frame (the broker's housekeeping)
        self.calls += 1
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("gateway"):
            return  # a library called on the request's behalf (aiohttp, pydantic, orjson...)
        self.gateway_calls += 1
        if len(stack) > self.depth[where]:
            self.depth[where] = len(stack)
            self.deepest[where] = list(reversed(stack))
        if module not in self.entered:
            self.entered.append(module)
        if module != self._last:
            if module in self._left:
                self.reentries += 1
            if self._last is not None:
                self._left.add(self._last)
            self._last = module


async def walk(era: str) -> Walk:
    standin = TestServer(create_standin(GraphQLEndpoint(load_schema(SCHEMA))))
    await standin.start_server()
    with tempfile.TemporaryDirectory() as state:
        settings = load_settings(
            gitlab={"url": str(standin.make_url("")).rstrip("/"), "token": ds.ALICE_TOKEN}, state_dir=state
        )
        client = TestClient(TestServer(create_app(settings)))
        await client.start_server()
        try:
            return await _walk_one(client, era)
        finally:
            await client.close()
            await standin.close()


async def _walk_one(client: TestClient[Any, Any], era: str) -> Walk:
    arguments = {"id": ds.PROJECT_PATH, "pipeline_id": ds.PIPELINE_ID}
    headers = {"Accept": ACCEPT, "Content-Type": "application/json"}
    params: dict[str, Any] = {"name": "get_pipeline", "arguments": arguments}
    if era == "stateless":
        headers |= {"MCP-Protocol-Version": STATELESS, "Mcp-Method": "tools/call", "Mcp-Name": "get_pipeline"}
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": STATELESS,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    else:
        hello = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "walk", "version": "1"},
        }
        resp = await client.post(
            "/mcp", json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}, headers=headers
        )
        headers |= {"Mcp-Session-Id": resp.headers["Mcp-Session-Id"], "MCP-Protocol-Version": "2025-11-25"}
        await client.post(
            "/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers
        )
    call = {"jsonrpc": "2.0", "method": "tools/call", "params": params}
    for rpc_id in (1, 2):
        seen = Walk()
        if rpc_id == 2:
            sys.setprofile(seen)
        try:
            resp = await client.post("/mcp", json={**call, "id": rpc_id}, headers=headers)
            body = await resp.json()
        finally:
            sys.setprofile(None)
        if resp.status != 200 or "result" not in body or body["result"].get("isError"):
            raise SystemExit(f"the call failed: {resp.status} {body}")
    return seen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.call_walk", description=__doc__.splitlines()[0])
    parser.add_argument("--era", choices=["handshake", "stateless"], default="handshake")
    parser.add_argument(
        "--deepest", action="store_true", help="also print the deepest stack of gateway frames"
    )
    args = parser.parse_args(argv)
    seen = asyncio.run(walk(args.era))
    print(f"one tools/call of get_pipeline ({args.era} era):")
    for number, module in enumerate(seen.entered, 1):
        print(f"  {number:2d}. {module}")
    print(
        f"modules entered: {len(seen.entered)}; re-entries: {seen.reentries}; max depth of gateway frames: "
        f"{seen.depth['handler']} on the HTTP handler's stack, {seen.depth['tool']} in the tool's task"
    )
    print(f"python calls on its stacks: {seen.calls}, of which in gateway modules: {seen.gateway_calls}")
    if args.deepest:
        for where, stack in seen.deepest.items():
            print(f"deepest {where} stack:\n  " + "\n  ".join(stack))
    return 0


if __name__ == "__main__":
    sys.exit(main())
