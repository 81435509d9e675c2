"""The protocol core driven without a server, as a stdio transport would drive it: parsed
messages and a request context in, JSON-RPC replies out, in both eras. No HTTP is involved:
no app, no socket, no status."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.mcp.protocol.calls import ActiveCalls
from gateway.mcp.protocol.context import Reply, RequestContext
from gateway.mcp.protocol.eras import Era
from gateway.mcp.protocol.server import McpServer
from gateway.mcp.protocol.telemetry import Telemetry
from gateway.mcp.protocol.wire import INVALID_PARAMS, classify
from gateway.observability.metrics import Metrics
from gateway.tools.caller import Caller
from gateway.tools.context import ToolServices
from gateway.tools.registry import Registry
from tests.unit.mcp.helpers import Probe, make_tools

CALLER = Caller(agent_id="dev", credential=None)
STATELESS = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": STATELESS,
    "io.modelcontextprotocol/clientCapabilities": {},
}


class Notes:
    """Events collected in a list: what a stdio transport would write before the reply."""

    def __init__(self) -> None:
        self.on_broken: Any = None
        self.opened = False
        self.sent: list[dict[str, Any]] = []

    async def open(self) -> bool:
        self.opened = True
        return True

    async def send(self, message: bytes) -> bool:
        self.sent.append(json.loads(message))
        return True


def core() -> McpServer:
    no_services: Any = None  # the echo and progress tools use no app services
    services: ToolServices = no_services
    return McpServer(
        registry=Registry(make_tools(Probe())),
        telemetry=Telemetry(Metrics()),
        calls=ActiveCalls(),
        services=lambda: services,
        page_size=50,
    )


async def ask(server: McpServer, ctx: RequestContext, rpc_id: int, method: str, **params: Any) -> Reply:
    message = classify({"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params})
    return await server.request(ctx, message)  # type: ignore[arg-type]


def result(reply: Reply) -> dict[str, Any]:
    assert reply.message is not None and reply.error is None
    answer: dict[str, Any] = json.loads(reply.message)["result"]
    return answer


async def test_a_handshake_session_initializes_lists_and_calls() -> None:
    server = core()
    opened: list[tuple[str, dict[str, Any]]] = []

    def open_session(version: str, capabilities: dict[str, Any]) -> str:
        opened.append((version, capabilities))
        return "session-1"

    ctx = RequestContext("req-1", CALLER, Era.HANDSHAKE, None, open_session=open_session)
    hello = result(await ask(server, ctx, 1, "initialize", protocolVersion="2025-11-25", capabilities={}))
    assert hello["protocolVersion"] == "2025-11-25" and hello["serverInfo"]["name"] == "gitlab-mcp-gateway"
    assert opened == [("2025-11-25", {})] and ctx.session_log_id == "session-1"

    within = RequestContext("req-2", CALLER, Era.HANDSHAKE, "2025-11-25", session="1")
    listed = result(await ask(server, within, 2, "tools/list"))
    assert "echo" in [tool["name"] for tool in listed["tools"]] and "ttlMs" not in listed
    called = result(
        await ask(server, within, 3, "tools/call", name="echo", arguments={"text": "hi", "times": 2})
    )
    assert called["structuredContent"] == {"text": "hihi"} and "resultType" not in called
    assert within.report.tool == "echo" and within.report.outcome == "ok"


async def test_a_stateless_request_discovers_lists_and_calls_with_progress() -> None:
    server = core()

    def stateless(request_id: str, events: Notes | None = None) -> RequestContext:
        return RequestContext(request_id, CALLER, Era.STATELESS, STATELESS, events=events)

    discovered = result(await ask(server, stateless("r1"), 1, "server/discover", _meta=META))
    assert STATELESS in discovered["supportedVersions"] and discovered["resultType"] == "complete"
    listed = result(await ask(server, stateless("r2"), 2, "tools/list", _meta=META))
    assert listed["ttlMs"] > 0 and listed["cacheScope"] == "public"

    notes = Notes()
    meta = {**META, "progressToken": "p1"}
    called = result(
        await ask(server, stateless("r3", notes), 3, "tools/call", name="progress", arguments={}, _meta=meta)
    )
    assert called["resultType"] == "complete" and not called.get("isError")
    assert notes.opened  # the reply follows events, which a transport frames as it will
    assert [n["params"]["progress"] for n in notes.sent] == [1, 2, 3.5]  # strictly increasing only


@pytest.mark.parametrize(("era", "version"), [(Era.HANDSHAKE, "2025-11-25"), (Era.STATELESS, STATELESS)])
async def test_an_unknown_tool_is_a_protocol_error_without_a_status(era: Era, version: str) -> None:
    ctx = RequestContext("r1", CALLER, era, version, session="1" if era is Era.HANDSHAKE else None)
    reply = await ask(core(), ctx, 7, "tools/call", name="nope", arguments={}, _meta=META)
    assert reply.error is not None and reply.error.code == INVALID_PARAMS
    assert reply.message is not None and json.loads(reply.message)["id"] == 7
    assert not hasattr(reply.error, "status")  # which HTTP status it travels with is the transport's
    assert ctx.report.outcome == "error"
