"""Lifecycle and sessions (MCP 2025-11-25 basic/lifecycle, basic/transports)."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from gateway.mcp.http.endpoint import SESSIONS
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
    assert (
        "Mcp-Session-Id" in body["error"]["message"] and "send initialize first" in body["error"]["message"]
    )
    # The other era, which needs no session, is named too, with how to speak it.
    assert "Or speak 2026-07-28, which needs no session" in body["error"]["message"]
    assert "MCP-Protocol-Version: 2026-07-28" in body["error"]["message"]


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


async def test_session_expires_ttl_after_initialize(mcp_factory: MakeMcp, probe: Probe) -> None:
    client = await mcp_factory(server={"session_ttl_seconds": 60})
    sealer = client.app[SESSIONS]
    now = [1000.0]
    sealer._clock = lambda: now[0]
    await client.initialize()
    now[0] += 59
    assert (await client.post({"jsonrpc": "2.0", "id": 1, "method": "ping"})).status == 200
    now[0] += 2
    resp = await client.post({"jsonrpc": "2.0", "id": 3, "method": "ping"})
    assert resp.status == 404
    assert (await resp.json())["id"] == 3
    assert not probe.contexts  # nothing ran


async def open_session(client: Mcp) -> str:
    resp = await client.post(init_body(), session=False)
    assert resp.status == 200
    return str(resp.headers["Mcp-Session-Id"])


async def test_sessions_survive_a_restart_with_the_same_key(mcp_factory: MakeMcp, tmp_path: Path) -> None:
    key = base64.b64encode(bytes(range(32))).decode()
    first = await mcp_factory(server={"session_key": key}, state_dir=str(tmp_path / "a"))
    sid = await open_session(first)
    # Another replica (its own state) with the same key serves it.
    second = await mcp_factory(server={"session_key": key}, state_dir=str(tmp_path / "b"))
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    assert (await second.post(ping, headers={"Mcp-Session-Id": sid})).status == 200
    # Another key: not found, so the client initializes again.
    other = await mcp_factory(
        server={"session_key": base64.b64encode(bytes(32)).decode()}, state_dir=str(tmp_path / "c")
    )
    assert (await other.post(ping, headers={"Mcp-Session-Id": sid})).status == 404


async def test_previous_key_is_accepted_during_rotation(mcp_factory: MakeMcp, tmp_path: Path) -> None:
    old = base64.b64encode(bytes(range(32))).decode()
    new = base64.b64encode(bytes(range(1, 33))).decode()
    before = await mcp_factory(server={"session_key": old}, state_dir=str(tmp_path / "a"))
    sid = await open_session(before)
    after = await mcp_factory(
        server={"session_key": new, "session_previous_key": old}, state_dir=str(tmp_path / "b")
    )
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    assert (await after.post(ping, headers={"Mcp-Session-Id": sid})).status == 200


async def test_sealed_session_holds_no_token(mcp_factory: MakeMcp) -> None:
    token = "glpat-sealed-session-secret-0001"
    client = await mcp_factory(gitlab={"credential_mode": "passthrough"})
    resp = await client.post(init_body(), headers={"PRIVATE-TOKEN": token}, session=False)
    sid = resp.headers["Mcp-Session-Id"]
    sealer = client.app[SESSIONS]
    session = sealer._unseal(sid)
    assert session is not None
    assert token not in repr(session)
    assert token not in sid
