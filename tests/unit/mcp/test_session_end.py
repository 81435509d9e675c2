"""An ended session stays ended wherever its id is sent, and a session belongs to who opened it
under the gateway's session key, whichever process checks it."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import pytest

from gateway.broker.ended_sessions import LAG_SECONDS
from gateway.gitlab import credentials
from tests.unit.mcp.conftest import MakeMcp
from tests.unit.mcp.helpers import Mcp

KEY = base64.b64encode(bytes(range(32))).decode()
PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


async def open_session(client: Mcp, headers: dict[str, str] | None = None) -> str:
    resp = await client.post(INIT, headers=headers, session=False)
    assert resp.status == 200, await resp.text()
    return str(resp.headers["Mcp-Session-Id"])


async def end(client: Mcp, sid: str, headers: dict[str, str] | None = None) -> int:
    resp = await client.client.delete("/mcp", headers={"Mcp-Session-Id": sid, **(headers or {})})
    return int(resp.status)


async def status(client: Mcp, sid: str, headers: dict[str, str] | None = None) -> int:
    return int((await client.post(PING, headers={"Mcp-Session-Id": sid, **(headers or {})})).status)


async def test_an_ended_session_stays_ended_after_a_restart(mcp_factory: MakeMcp, tmp_path: Path) -> None:
    first = await mcp_factory(server={"session_key": KEY}, state_dir=str(tmp_path / "s"))
    kept, ended = await open_session(first), await open_session(first)
    assert await end(first, ended) == 204
    await first.client.close()  # the process stops; its state folder stays
    again = await mcp_factory(server={"session_key": KEY}, state_dir=str(tmp_path / "s"))
    assert await status(again, kept) == 200
    assert await status(again, ended) == 404
    assert await end(again, ended) == 404


async def test_ending_many_sessions_never_revives_an_ended_one(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory(server={"max_sessions": 2})
    first = await open_session(client)
    assert await end(client, first) == 204
    for _ in range(3):  # more sessions ended than any cap there was
        assert await end(client, await open_session(client)) == 204
    assert await status(client, first) == 404
    metrics = await (await client.client.get("/metrics")).text()
    assert "gateway_mcp_sessions_ended 4.0" in metrics


async def test_a_session_ended_on_one_replica_is_ended_on_the_others(
    postgres_url_at_head: str, mcp_factory: MakeMcp, tmp_path: Path
) -> None:
    # postgres_url_at_head first: its database outlives the apps, which close at the end of the test.
    shared = {"database_url": postgres_url_at_head}
    a = await mcp_factory(server={"session_key": KEY}, broker=shared, state_dir=str(tmp_path / "a"))
    b = await mcp_factory(server={"session_key": KEY}, broker=shared, state_dir=str(tmp_path / "b"))
    kept, ended = await open_session(a), await open_session(a)
    assert await status(b, ended) == 200
    assert await end(a, ended) == 204
    # b hears of it by PostgreSQL's notification, delivered after a's commit: milliseconds when
    # quiet, longer on a loaded machine; the bound the gateway promises is LAG_SECONDS.
    deadline = asyncio.get_running_loop().time() + LAG_SECONDS
    while await status(b, ended) != 404:
        assert asyncio.get_running_loop().time() < deadline, "b still serves a session a ended"
        await asyncio.sleep(0.05)
    assert await end(b, ended) == 404
    assert await status(b, kept) == 200


async def test_passthrough_sessions_are_served_by_another_process_with_the_key(
    mcp_factory: MakeMcp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = {"PRIVATE-TOKEN": "glpat-caller-0000000001"}
    passthrough = {"credential_mode": "passthrough"}
    a = await mcp_factory(server={"session_key": KEY}, gitlab=passthrough, state_dir=str(tmp_path / "a"))
    sid = await open_session(a, token)
    # Another process: whatever it makes at random for itself differs.
    monkeypatch.setattr(credentials, "_HASH_KEY", bytes(32))
    b = await mcp_factory(server={"session_key": KEY}, gitlab=passthrough, state_dir=str(tmp_path / "b"))
    assert await status(b, sid, token) == 200
    # Another caller's token: not theirs.
    assert await status(b, sid, {"PRIVATE-TOKEN": "glpat-caller-0000000002"}) == 404


async def test_an_id_issued_without_client_tokens_is_not_found_where_they_are_required(
    mcp_factory: MakeMcp, tmp_path: Path
) -> None:
    open_gateway = await mcp_factory(server={"session_key": KEY}, state_dir=str(tmp_path / "a"))
    sid = await open_session(open_gateway)
    tokens = [{"token": "client-secret-pm-0000000001", "agent_id": "pm"}]
    guarded = await mcp_factory(
        server={"session_key": KEY}, client_tokens=tokens, state_dir=str(tmp_path / "b")
    )
    bearer = {"Authorization": "Bearer client-secret-pm-0000000001"}
    assert await status(guarded, sid, bearer) == 404
    own = await open_session(guarded, bearer)
    assert await status(guarded, own, bearer) == 200
