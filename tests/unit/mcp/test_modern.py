"""MCP 2026-07-28 served statelessly beside the legacy era on the same /mcp
(https://modelcontextprotocol.io/specification/2026-07-28/basic/transports/streamable-http,
.../basic/versioning): the per-request envelope, its headers and errors, results, progress on the
request's own stream, and cancellation by closing it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.tampering import tampered
from tests.unit.mcp.conftest import MakeMcp
from tests.unit.mcp.helpers import (
    MODERN,
    Mcp,
    Probe,
    messages_of,
    modern_headers,
    modern_meta,
    parse_sse,
)


def call_body(
    name: str, arguments: dict[str, Any] | None = None, rpc_id: int = 1, **meta: Any
) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": rpc_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments or {}, "_meta": modern_meta(**meta)},
    }


async def post_modern(client: Mcp, body: Any, headers: dict[str, str]) -> Any:
    return await client.post(body, headers={"MCP-Protocol-Version": None, **headers}, session=False)  # type: ignore[dict-item]


async def test_server_discover(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory()
    body = {"jsonrpc": "2.0", "id": "d", "method": "server/discover", "params": {"_meta": modern_meta()}}
    resp = await post_modern(client, body, modern_headers("server/discover"))
    assert resp.status == 200
    assert "Mcp-Session-Id" not in resp.headers
    result = (await resp.json())["result"]
    assert result["resultType"] == "complete"
    assert result["supportedVersions"] == ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"]
    assert result["capabilities"] == {
        "tools": {"listChanged": False},
        "extensions": {"io.modelcontextprotocol/tasks": {}},
    }
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "gitlab-mcp-gateway"
    assert result["ttlMs"] > 0 and result["cacheScope"] == "public"


async def test_tools_list_carries_caching_hints_in_a_stable_order(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory()
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": modern_meta()}}
    first = (await (await post_modern(client, body, modern_headers("tools/list"))).json())["result"]
    second = (await (await post_modern(client, body, modern_headers("tools/list"))).json())["result"]
    assert first == second
    assert first["resultType"] == "complete"
    assert first["ttlMs"] > 0 and first["cacheScope"] == "public"
    assert [t["name"] for t in first["tools"]][:3] == ["echo", "wait", "progress"]


async def test_tools_call_is_stateless_and_marks_its_result(mcp_factory: MakeMcp, probe: Probe) -> None:
    client = await mcp_factory()
    resp = await post_modern(
        client,
        call_body("echo", {"text": "hi"}),
        {**modern_headers("tools/call", "echo"), "Mcp-Session-Id": "ignored"},
    )
    assert resp.status == 200
    assert "Mcp-Session-Id" not in resp.headers
    result = (await resp.json())["result"]
    assert result["resultType"] == "complete"
    assert result["structuredContent"] == {"text": "hi"}
    assert probe.contexts[-1].call.session_id is None


async def test_legacy_results_carry_no_result_type(mcp: Mcp) -> None:
    body = await mcp.call("echo", {"text": "hi"})
    assert "resultType" not in body["result"]


async def test_tool_error_is_an_is_error_result(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory()
    resp = await post_modern(client, call_body("refuse"), modern_headers("tools/call", "refuse"))
    result = (await resp.json())["result"]
    assert result["isError"] is True and result["resultType"] == "complete"


async def test_mcp_name_may_be_base64_wrapped(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory()
    resp = await post_modern(
        client, call_body("echo", {"text": "x"}), modern_headers("tools/call", "=?base64?ZWNobw==?=")
    )
    assert resp.status == 200


async def test_progress_goes_on_the_requests_own_stream(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory()
    body = call_body("progress", progressToken="t1")
    resp = await post_modern(client, body, modern_headers("tools/call", "progress"))
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    events = parse_sse(await resp.text())
    assert all(e.id is None for e in events)  # no resumability in this era
    messages = messages_of(events)
    progress = [m["params"]["progress"] for m in messages if m.get("method") == "notifications/progress"]
    assert progress == [1, 2, 3.5]
    assert messages[-1]["id"] == 1 and messages[-1]["result"]["resultType"] == "complete"


async def test_closing_the_stream_cancels_the_call(mcp_factory: MakeMcp, probe: Probe) -> None:
    client = await mcp_factory()
    resp_task = asyncio.create_task(
        post_modern(client, call_body("wait"), modern_headers("tools/call", "wait"))
    )
    await asyncio.wait_for(probe.started.wait(), 5)
    resp = await resp_task  # headers arrived: the stream is open
    resp.close()  # the client goes away
    for _ in range(50):
        if "wait cancelled" in probe.events:
            break
        await asyncio.sleep(0.1)
    assert probe.events == ["wait cancelled"]


async def test_a_call_whose_stream_closed_delivers_nothing(mcp_factory: MakeMcp, probe: Probe) -> None:
    client = await mcp_factory()
    body = call_body("deliver", {"wait": True})
    resp_task = asyncio.create_task(post_modern(client, body, modern_headers("tools/call", "deliver")))
    await asyncio.wait_for(probe.started.wait(), 5)
    (await resp_task).close()
    await asyncio.sleep(WATCH)
    probe.release.set()
    for _ in range(50):
        if probe.events:
            break
        await asyncio.sleep(0.1)
    # Cancelled while waiting: no result was made, so nothing was taken (a broker message stays
    # queued) and nothing is reported delivered.
    assert probe.events == []


WATCH = 1.0


async def test_notifications_are_accepted(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory()
    note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
    resp = await post_modern(client, note, modern_headers("notifications/cancelled"))
    assert resp.status == 202


@pytest.mark.parametrize("method", ["GET", "DELETE"])
async def test_get_and_delete_are_405(mcp_factory: MakeMcp, method: str) -> None:
    client = await mcp_factory()
    resp = await client.client.request(method, "/mcp", headers={"MCP-Protocol-Version": MODERN})
    assert resp.status == 405
    assert resp.headers["Allow"] == "POST"


# -- bad input: each gets the status and code the specification names; nothing reaches GitLab --


async def assert_refused(
    client: Mcp, probe: Probe, resp: Any, status: int, code: int, rpc_id: Any = 1
) -> dict[str, Any]:
    assert resp.status == status
    body = await resp.json()
    assert body["error"]["code"] == code, body
    assert body["id"] == rpc_id
    assert not probe.contexts
    assert client.gitlab_requests == []
    return dict(body)


async def test_request_without_meta_is_400_32602(mcp_factory: MakeMcp, probe: Probe) -> None:
    client = await mcp_factory()
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "x"}},
    }
    resp = await post_modern(client, body, modern_headers("tools/call", "echo"))
    await assert_refused(client, probe, resp, 400, -32602)


@pytest.mark.parametrize(
    "missing", ["io.modelcontextprotocol/protocolVersion", "io.modelcontextprotocol/clientCapabilities"]
)
async def test_meta_without_a_required_key_is_400_32602(
    mcp_factory: MakeMcp, probe: Probe, missing: str
) -> None:
    client = await mcp_factory()
    body = call_body("echo", {"text": "x"})
    del body["params"]["_meta"][missing]
    resp = await post_modern(client, body, modern_headers("tools/call", "echo"))
    await assert_refused(client, probe, resp, 400, -32602)


async def test_client_info_is_not_required(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory()
    body = call_body("echo", {"text": "x"})
    del body["params"]["_meta"]["io.modelcontextprotocol/clientInfo"]
    assert (await post_modern(client, body, modern_headers("tools/call", "echo"))).status == 200


async def test_meta_version_differing_from_the_header_is_400_32020(
    mcp_factory: MakeMcp, probe: Probe
) -> None:
    client = await mcp_factory()
    body = call_body("echo", {"text": "x"})
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = "2025-11-25"
    resp = await post_modern(client, body, modern_headers("tools/call", "echo"))
    await assert_refused(client, probe, resp, 400, -32020)


async def test_mcp_name_differing_from_params_name_is_400_32020(mcp_factory: MakeMcp, probe: Probe) -> None:
    client = await mcp_factory()
    resp = await post_modern(client, call_body("echo", {"text": "x"}), modern_headers("tools/call", "write"))
    await assert_refused(client, probe, resp, 400, -32020)


async def test_tools_call_without_mcp_name_is_400_32020(mcp_factory: MakeMcp, probe: Probe) -> None:
    client = await mcp_factory()
    resp = await post_modern(client, call_body("echo", {"text": "x"}), modern_headers("tools/call"))
    body = await assert_refused(client, probe, resp, 400, -32020)
    assert "Mcp-Name" in body["error"]["message"]


async def test_mcp_method_differing_from_the_body_is_400_32020(mcp_factory: MakeMcp, probe: Probe) -> None:
    client = await mcp_factory()
    resp = await post_modern(client, call_body("echo", {"text": "x"}), modern_headers("tools/list", "echo"))
    await assert_refused(client, probe, resp, 400, -32020)


async def test_modern_meta_without_the_version_header_is_400_32020(
    mcp_factory: MakeMcp, probe: Probe
) -> None:
    client = await mcp_factory()
    resp = await post_modern(
        client, call_body("echo", {"text": "x"}), {"Mcp-Method": "tools/call", "Mcp-Name": "echo"}
    )
    await assert_refused(client, probe, resp, 400, -32020)


async def test_unsupported_version_is_400_32022_listing_both_eras(mcp_factory: MakeMcp, probe: Probe) -> None:
    client = await mcp_factory()
    body = call_body("echo", {"text": "x"}, version="2099-01-01")
    resp = await post_modern(client, body, modern_headers("tools/call", "echo", version="2099-01-01"))
    error = (await assert_refused(client, probe, resp, 400, -32022))["error"]
    assert error["data"] == {
        "supported": ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"],
        "requested": "2099-01-01",
    }


@pytest.mark.parametrize("method", ["initialize", "ping", "logging/setLevel", "resources/list", "no/such"])
async def test_removed_and_unknown_methods_are_404_32601(
    mcp_factory: MakeMcp, probe: Probe, method: str
) -> None:
    client = await mcp_factory()
    params: dict[str, Any] = {"_meta": modern_meta()}
    if method == "initialize":  # initialize as a legacy client would send it, with modern headers
        params = {"protocolVersion": MODERN, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    resp = await post_modern(
        client, {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, modern_headers(method)
    )
    await assert_refused(client, probe, resp, 404, -32601)
    assert "Mcp-Session-Id" not in resp.headers


async def test_unknown_tool_is_400_32602(mcp_factory: MakeMcp, probe: Probe) -> None:
    client = await mcp_factory()
    resp = await post_modern(client, call_body("nope"), modern_headers("tools/call", "nope"))
    await assert_refused(client, probe, resp, 400, -32602)


async def test_posted_response_is_400(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory()
    resp = await post_modern(client, {"jsonrpc": "2.0", "id": 1, "result": {}}, modern_headers("x"))
    assert resp.status == 400
    assert (await resp.json())["id"] == 1


# -- bad legacy session ids: 404 so the client initializes again; nothing reaches GitLab --------


async def test_session_id_with_one_byte_changed_is_404(mcp: Mcp, probe: Probe) -> None:
    sid = mcp.session_id or ""
    tampered_id = tampered(sid, -5)
    resp = await mcp.post(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "x"}},
        },
        headers={"Mcp-Session-Id": tampered_id},
    )
    await assert_refused(mcp, probe, resp, 404, -32600)


async def test_session_sealed_for_another_credential_is_404(mcp_factory: MakeMcp, probe: Probe) -> None:
    client = await mcp_factory(gitlab={"credential_mode": "passthrough"})
    await client.initialize(headers={"PRIVATE-TOKEN": "glpat-first-caller-0001"})
    resp = await client.post(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "x"}},
        },
        headers={"PRIVATE-TOKEN": "glpat-second-caller-0002"},
    )
    await assert_refused(client, probe, resp, 404, -32600)


async def test_session_past_its_expiry_is_404(mcp_factory: MakeMcp, probe: Probe) -> None:
    from gateway.mcp.http.endpoint import SESSIONS

    client = await mcp_factory(server={"session_ttl_seconds": 60})
    now = [1000.0]
    client.app[SESSIONS]._clock = lambda: now[0]
    await client.initialize()
    now[0] += 61
    resp = await client.post(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "x"}},
        }
    )
    await assert_refused(client, probe, resp, 404, -32600)


# -- the conformance test mode ------------------------------------------------------------------


async def test_missing_client_capability_is_400_32021(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory(server={"conformance_fixtures": True})
    body = call_body("test_missing_capability")
    resp = await post_modern(client, body, modern_headers("tools/call", "test_missing_capability"))
    assert resp.status == 400
    error = (await resp.json())["error"]
    assert error["code"] == -32021
    assert error["data"] == {"requiredCapabilities": {"sampling": {}}}


async def test_fixtures_are_off_by_default(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory()
    resp = await post_modern(
        client, call_body("test_simple_text"), modern_headers("tools/call", "test_simple_text")
    )
    assert (await resp.json())["error"]["code"] == -32602


def test_fixtures_are_refused_off_loopback() -> None:
    from pydantic import ValidationError

    from gateway.config import ServerSettings

    with pytest.raises(ValidationError, match="loopback"):
        ServerSettings(host="0.0.0.0", conformance_fixtures=True)
    assert ServerSettings(host="::1", conformance_fixtures=True).conformance_fixtures
