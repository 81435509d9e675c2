"""tools/list and tools/call (MCP 2025-11-25 server/tools, schema.ts)."""

from __future__ import annotations

import json
import logging
import re

import jsonschema
import pytest

from gateway.server.services import SERVICES
from tests.unit.mcp.conftest import MakeMcp
from tests.unit.mcp.helpers import Mcp, Probe

NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
ALL_TOOLS = ["echo", "wait", "progress", "crash", "write", "refuse", "deliver", "deliver_json", "whoami"]


# -- tools/list ----------------------------------------------------------------------------


async def test_tools_list_has_every_served_tool_without_aliases(mcp: Mcp) -> None:
    body = await mcp.rpc("tools/list")
    tools = body["result"]["tools"]
    assert [t["name"] for t in tools] == ALL_TOOLS
    assert "nextCursor" not in body["result"]
    for tool in tools:
        assert NAME.match(tool["name"])
        assert tool["description"]
        assert tool["inputSchema"]["type"] == "object"
        assert set(tool["annotations"]) >= {
            "readOnlyHint",
            "destructiveHint",
            "idempotentHint",
            "openWorldHint",
        }
    echo = tools[0]
    assert echo["outputSchema"]["properties"]["text"]["type"] == "string"
    assert echo["inputSchema"]["additionalProperties"] is False


async def test_tools_list_pages_with_opaque_cursors(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory(server={"tools_page_size": 2})
    await client.initialize()
    names: list[str] = []
    cursors: list[str] = []
    params: dict[str, str] = {}
    while True:
        result = (await client.rpc("tools/list", params))["result"]
        assert len(result["tools"]) <= 2
        names += [t["name"] for t in result["tools"]]
        if "nextCursor" not in result:
            break
        cursors.append(result["nextCursor"])
        params = {"cursor": result["nextCursor"]}
    assert names == ALL_TOOLS
    assert len(cursors) == 4
    assert all(not c.isdigit() for c in cursors)
    # stable: the same cursor gives the same page again
    again = (await client.rpc("tools/list", {"cursor": cursors[1]}))["result"]
    assert [t["name"] for t in again["tools"]] == ALL_TOOLS[4:6]


@pytest.mark.parametrize("cursor", ["bogus", "", 3, {"a": 1}])
async def test_bad_cursor_is_32602(mcp: Mcp, cursor: object) -> None:
    body = await mcp.rpc("tools/list", {"cursor": cursor})
    assert body["error"]["code"] == -32602
    assert "nextCursor" in body["error"]["message"]


async def test_null_cursor_is_the_first_page(mcp: Mcp) -> None:
    body = await mcp.rpc("tools/list", {"cursor": None})
    assert len(body["result"]["tools"]) == len(ALL_TOOLS)


async def test_read_only_hides_tools_that_change_state(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory(read_only=True)
    await client.initialize()
    names = [t["name"] for t in (await client.rpc("tools/list"))["result"]["tools"]]
    assert names == ["echo", "wait", "progress", "crash", "refuse", "whoami"]


# -- tools/call ----------------------------------------------------------------------------


async def test_call_returns_structured_content_mirrored_as_text(mcp: Mcp) -> None:
    resp = await mcp.post(
        {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "ab", "times": 2}},
        }
    )
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("application/json")
    body = await resp.json()
    assert body == {
        "jsonrpc": "2.0",
        "id": 5,
        "result": {
            "content": [{"type": "text", "text": '{"text":"abab"}'}],
            "structuredContent": {"text": "abab"},
        },
    }


async def test_structured_content_matches_the_listed_output_schema(mcp: Mcp) -> None:
    tools = {t["name"]: t for t in (await mcp.rpc("tools/list"))["result"]["tools"]}
    result = (await mcp.call("echo", {"text": "ok"}))["result"]
    jsonschema.validate(result["structuredContent"], tools["echo"]["outputSchema"])
    assert json.loads(result["content"][-1]["text"]) == result["structuredContent"]


async def test_alias_calls_the_tool(mcp: Mcp) -> None:
    body = await mcp.call("say", {"text": "hi"})
    assert body["result"]["structuredContent"] == {"text": "hi"}
    text = await (await mcp.client.get("/metrics")).text()
    assert (
        'gateway_tool_calls_total{agent="anonymous",outcome="ok",source="tool",tool="echo",toolset="ci"} 1.0'
        in text
    )
    assert 'tool="say"' not in text


async def test_unknown_tool_is_32602(mcp: Mcp) -> None:
    body = await mcp.call("no_such_tool", {})
    assert body["error"]["code"] == -32602
    assert body["error"]["message"] == (
        "Unknown tool: no_such_tool. Call tools/list for the tools this gateway serves."
    )


async def test_argument_validation_is_an_is_error_result_naming_the_argument(mcp: Mcp) -> None:
    body = await mcp.call("echo", {"text": "x", "times": 7})
    result = body["result"]
    assert result["isError"] is True
    message = result["content"][0]["text"]
    assert "`times`" in message
    assert "How many times to repeat it, 1 to 3" in message
    assert result["structuredContent"]["error"]["reason"] == "bad_request"
    assert result["structuredContent"]["error"]["invalid_arguments"] == ["times"]


async def test_unknown_argument_is_an_is_error_result(mcp: Mcp) -> None:
    result = (await mcp.call("echo", {"text": "x", "colour": "red"}))["result"]
    assert result["isError"] is True
    assert "unknown argument `colour`; echo accepts: text, times" in result["content"][0]["text"]


async def test_missing_argument_is_an_is_error_result(mcp: Mcp) -> None:
    result = (await mcp.call("echo"))["result"]
    assert result["isError"] is True
    assert "`text` is required" in result["content"][0]["text"]


async def test_hidden_tool_call_is_refused_as_unknown_saying_which_setting_hides_it(
    mcp_factory: MakeMcp,
) -> None:
    client = await mcp_factory(read_only=True)
    await client.initialize()
    for name in ("write", "write_old"):
        error = (await client.call(name, {}))["error"]
        assert error["code"] == -32602
        assert error["message"] == (
            f"Unknown tool: {name}. Call tools/list for the tools this gateway serves. "
            "write changes GitLab or broker state and this gateway runs read-only (--read-only, "
            "GATEWAY_READ_ONLY or read_only in its config file): restart it without that to use this tool."
        )
    text = await (await client.client.get("/metrics")).text()
    assert (
        'gateway_tool_calls_total{agent="anonymous",outcome="unauthorized"'
        ',source="gateway",tool="write",toolset="repository"} 2.0' in text
    )


async def test_tool_outside_served_toolsets_is_refused(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory(toolsets=["ci"])
    await client.initialize()
    error = (await client.call("write", {}))["error"]
    assert error["code"] == -32602
    assert "toolset 'repository', which this gateway does not serve" in error["message"]


async def test_tool_error_is_an_is_error_result(mcp: Mcp) -> None:
    result = (await mcp.call("refuse", {}))["result"]
    request_id = result["structuredContent"]["error"]["request_id"]
    assert re.fullmatch(r"[0-9a-f]{32}", request_id)
    assert result == {
        "content": [
            {"type": "text", "text": "Not now: the pipeline is paused; call resume first."},
            {"type": "text", "text": json.dumps(result["structuredContent"], separators=(",", ":"))},
        ],
        "structuredContent": {
            "error": {
                "reason": "conflict",
                "message": "Not now: the pipeline is paused; call resume first.",
                "request_id": request_id,
            }
        },
        "isError": True,
    }
    text = await (await mcp.client.get("/metrics")).text()
    assert (
        'gateway_tool_calls_total{agent="anonymous",outcome="conflict"'
        ',source="tool",tool="refuse",toolset="ci"} 1.0' in text
    )


async def test_handler_crash_is_32603_logged_without_trace_to_client(
    mcp: Mcp, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.mcp")
    resp = await mcp.post(
        {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "crash"}},
        headers={"X-Request-Id": "rq-9"},
    )
    assert resp.status == 200
    body = await resp.json()
    assert body["id"] == 8
    assert body["error"]["code"] == -32603
    assert "rq-9" in body["error"]["message"]
    raw = json.dumps(body)
    assert "secret internals" not in raw and "Traceback" not in raw and "RuntimeError" not in raw
    crash_logs = [r for r in caplog.records if r.exc_info]
    assert len(crash_logs) == 1
    assert crash_logs[0].request_id == "rq-9"  # type: ignore[attr-defined]
    assert "secret internals" in str(crash_logs[0].exc_info[1])  # type: ignore[index]
    text = await (await mcp.client.get("/metrics")).text()
    assert (
        'gateway_tool_calls_total{agent="anonymous",outcome="internal_error"'
        ',source="tool",tool="crash",toolset="ci"} 1.0' in text
    )
    assert 'gateway_mcp_requests_total{method="tools/call",outcome="error"} 1.0' in text


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"name": ""},
        {"name": 5},
        {"name": "echo", "arguments": [1]},
        {"name": "echo", "arguments": "text=x"},
        {"name": "echo", "arguments": {"text": "x"}, "_meta": {"progressToken": 1.5}},
    ],
)
async def test_malformed_tools_call_params_are_32602(mcp: Mcp, params: dict[str, object]) -> None:
    body = await mcp.rpc("tools/call", params)
    assert body["error"]["code"] == -32602
    assert body["error"]["message"].startswith("Invalid params")


async def test_tool_context_carries_request_and_session(mcp: Mcp, probe: Probe) -> None:
    await mcp.post(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "a"}},
        },
        headers={"X-Request-Id": "abc-1"},
    )
    ctx = probe.contexts[-1]
    assert ctx.call.request_id == "abc-1"
    # The session's number, never its id (a bearer credential).
    assert ctx.call.session_id and ctx.call.session_id not in (mcp.session_id or "")
    assert ctx.call.has_progress_token is False
    assert ctx.services is mcp.app[SERVICES]
    assert ctx.call.caller.remote == "127.0.0.1"


async def test_tool_metrics_count_latency(mcp: Mcp) -> None:
    for _ in range(3):
        await mcp.call("echo", {"text": "a"})
    text = await (await mcp.client.get("/metrics")).text()
    assert (
        'gateway_tool_calls_total{agent="anonymous",outcome="ok",source="tool",tool="echo",toolset="ci"} 3.0'
        in text
    )
    assert 'gateway_tool_call_duration_seconds_count{tool="echo"} 3.0' in text
    assert 'gateway_mcp_requests_total{method="tools/call",outcome="ok"} 3.0' in text


async def test_tool_calls_are_counted_per_agent_and_unknown_agents_share_one_bucket(mcp: Mcp) -> None:
    # Loopback without client tokens: X-Agent-Id names the agent when it is one of broker.agents.
    for agent in ("dev", "dev", "reviewer", "intruder-1", "intruder-2"):
        mcp.headers = {"X-Agent-Id": agent}
        await mcp.call("echo", {"text": "a"})
    mcp.headers = {}
    await mcp.call("echo", {"text": "a"})
    text = await (await mcp.client.get("/metrics")).text()
    counted = 'gateway_tool_calls_total{{agent="{}",outcome="ok",source="tool",tool="echo",toolset="ci"}} {}'
    assert counted.format("dev", 2.0) in text
    assert counted.format("reviewer", 1.0) in text
    # What a caller claims adds no series: unknown ids and no id are one bucket.
    assert counted.format("anonymous", 3.0) in text
    assert "intruder" not in text
