"""Lifecycle and sessions (mcp_protocol.md §1.2, §5 "initialize", "Status codes", "Sessions")."""

from __future__ import annotations

import asyncio
import re

import pytest

from gateway.mcp.transport import SESSIONS
from tests.unit.mcp.conftest import MakeMcp
from tests.unit.mcp.helpers import Mcp, Probe

VISIBLE_ASCII = re.compile(r"^[\x21-\x7e]+$")


def init_body(version: str = "2025-11-25", rpc_id: int = 1) -> dict[str, object]:
    return {
        "jsonrpc": "2.0",
        "id": rpc_id,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }


@pytest.mark.parametrize("version", ["2025-11-25", "2025-06-18", "2025-03-26"])
async def test_initialize_echoes_a_supported_version(mcp_factory: MakeMcp, version: str) -> None:
    client = await mcp_factory()
    resp = await client.post(init_body(version), session=False)
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("application/json")
    body = await resp.json()
    assert body["id"] == 1
    result = body["result"]
    assert result["protocolVersion"] == version
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert result["serverInfo"]["name"] == "gitlab-mcp-gateway"
    assert result["serverInfo"]["version"]


@pytest.mark.parametrize("version", ["2024-11-05", "2026-07-28", "1999-01-01"])
async def test_initialize_answers_latest_for_other_versions(mcp_factory: MakeMcp, version: str) -> None:
    client = await mcp_factory()
    body = await (await client.post(init_body(version), session=False)).json()
    assert body["result"]["protocolVersion"] == "2025-11-25"


async def test_session_ids_are_random_visible_ascii(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory()
    ids = set()
    for _ in range(5):
        resp = await client.post(init_body(), session=False)
        session_id = resp.headers["Mcp-Session-Id"]
        assert VISIBLE_ASCII.match(session_id)
        assert len(session_id) >= 32
        ids.add(session_id)
    assert len(ids) == 5


async def test_initialize_without_protocol_version_is_invalid_params(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory()
    resp = await client.post({"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {}}, session=False)
    body = await resp.json()
    assert body["id"] == 7
    assert body["error"]["code"] == -32602
    assert "protocolVersion" in body["error"]["message"]
    assert "Mcp-Session-Id" not in resp.headers


async def test_initialized_notification_is_202_with_empty_body(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory()
    resp = await client.post(init_body(), session=False)
    client.session_id = resp.headers["Mcp-Session-Id"]
    note = await client.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert note.status == 202
    assert await note.read() == b""
    assert client.app[SESSIONS].get(client.session_id).initialized is True  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}},
        {"jsonrpc": "2.0", "method": "notifications/whatever"},
        {"jsonrpc": "2.0", "id": 99, "result": {}},
        {"jsonrpc": "2.0", "id": 98, "error": {"code": -1, "message": "no"}},
    ],
)
async def test_notifications_and_responses_get_202(mcp: Mcp, message: dict[str, object]) -> None:
    resp = await mcp.post(message)
    assert resp.status == 202
    assert await resp.read() == b""


async def test_a_request_is_never_answered_202(mcp: Mcp) -> None:
    for method in ("ping", "tools/list", "nope/nope"):
        resp = await mcp.post({"jsonrpc": "2.0", "id": mcp.next_id(), "method": method})
        assert resp.status == 200


async def test_ping_answers_empty_object(mcp: Mcp) -> None:
    assert await mcp.rpc("ping") == {"jsonrpc": "2.0", "id": mcp._next, "result": {}}


async def test_ping_with_string_id(mcp: Mcp) -> None:
    resp = await mcp.post({"jsonrpc": "2.0", "id": "abc", "method": "ping"})
    assert await resp.json() == {"jsonrpc": "2.0", "id": "abc", "result": {}}


async def test_missing_session_id_is_400(mcp: Mcp) -> None:
    resp = await mcp.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, session=False)
    assert resp.status == 400
    body = await resp.json()
    assert body["error"]["code"] == -32600
    assert "Mcp-Session-Id" in body["error"]["message"]


async def test_unknown_session_id_is_404(mcp: Mcp) -> None:
    resp = await mcp.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers={"Mcp-Session-Id": "nope"})
    assert resp.status == 404
    body = await resp.json()
    assert body["id"] == 1
    assert "initialize" in body["error"]["message"]


async def test_notification_with_unknown_session_is_404(mcp: Mcp) -> None:
    resp = await mcp.post(
        {"jsonrpc": "2.0", "method": "notifications/initialized"}, headers={"Mcp-Session-Id": "x"}
    )
    assert resp.status == 404


async def test_delete_ends_the_session_then_404(mcp: Mcp) -> None:
    resp = await mcp.client.delete("/mcp", headers={"Mcp-Session-Id": mcp.session_id or ""})
    assert resp.status == 204
    again = await mcp.post({"jsonrpc": "2.0", "id": 5, "method": "ping"})
    assert again.status == 404
    assert (await mcp.client.delete("/mcp", headers={"Mcp-Session-Id": mcp.session_id or ""})).status == 404


async def test_delete_without_session_header_is_400(mcp: Mcp) -> None:
    resp = await mcp.client.delete("/mcp")
    assert resp.status == 400


async def test_session_expires_after_ttl_without_requests(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory(server={"session_ttl_seconds": 60})
    store = client.app[SESSIONS]
    now = [1000.0]
    store.clock = lambda: now[0]
    await client.initialize()
    now[0] += 59
    assert (await client.post({"jsonrpc": "2.0", "id": 1, "method": "ping"})).status == 200
    now[0] += 59  # 59 s after the last request: still alive
    assert (await client.post({"jsonrpc": "2.0", "id": 2, "method": "ping"})).status == 200
    now[0] += 61
    resp = await client.post({"jsonrpc": "2.0", "id": 3, "method": "ping"})
    assert resp.status == 404
    assert len(store) == 0


async def test_session_cap_evicts_least_recently_used(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory(server={"max_sessions": 2})
    first = await open_session(client)
    second = await open_session(client)
    # first is used again, so second is the least recently used one
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    assert (await client.post(ping, headers={"Mcp-Session-Id": first})).status == 200
    third = await open_session(client)
    assert len(client.app[SESSIONS]) == 2
    status = {}
    for name, sid in (("first", first), ("second", second), ("third", third)):
        resp = await client.post(
            {"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers={"Mcp-Session-Id": sid}
        )
        status[name] = resp.status
    assert status == {"first": 200, "second": 404, "third": 200}
    assert "gateway_mcp_sessions_open 2.0" in await (await client.client.get("/metrics")).text()


async def open_session(client: Mcp) -> str:
    resp = await client.post(init_body(), session=False)
    assert resp.status == 200
    return str(resp.headers["Mcp-Session-Id"])


async def test_session_cap_refuses_when_every_session_is_busy(mcp_factory: MakeMcp, probe: Probe) -> None:
    client = await mcp_factory(server={"max_sessions": 1})
    await client.initialize()
    call = asyncio.create_task(client.call("wait", {}))
    await asyncio.wait_for(probe.started.wait(), 5)
    resp = await client.post(init_body(), session=False)
    assert resp.status == 503
    assert resp.headers["Retry-After"] == "60"
    body = await resp.json()
    assert "max_sessions" in body["error"]["message"]
    probe.release.set()
    assert (await call)["result"]["structuredContent"] == {"done": True}


async def test_busy_session_does_not_expire(mcp_factory: MakeMcp, probe: Probe) -> None:
    client = await mcp_factory(server={"session_ttl_seconds": 10})
    store = client.app[SESSIONS]
    now = [0.0]
    store.clock = lambda: now[0]
    await client.initialize()
    call = asyncio.create_task(client.call("wait", {}))
    await asyncio.wait_for(probe.started.wait(), 5)
    now[0] += 100
    other = await open_session(client)  # sweeps: the busy session must survive
    assert other
    assert store.get(client.session_id or "") is not None
    probe.release.set()
    await call
