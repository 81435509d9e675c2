"""Replica heartbeats: a replica that stops beating is listed as gone, and an agent last seen on
it is not connected, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest

from gateway.__main__ import main
from gateway.broker.formats import iso
from gateway.broker.replicas import Heartbeat
from gateway.cli.broker_text import status_text
from tests.unit.broker.conftest import EnvFactory, close


async def test_an_agent_last_seen_on_a_replica_gone_silent_is_not_connected(make_env: EnvFactory) -> None:
    env = await make_env()
    store = env.broker.store
    silent_for = 0.0
    # Another replica on the same database, beating every 5 s until it is killed.
    other = Heartbeat(store, lambda: time.time() - silent_for, every=5.0)
    await other.beat()
    async with store.write() as q:  # dev's wait is held there
        await q.save_last_seen({"dev": iso(time.time())}, other.id)

    status = await env.broker.monitoring.status(replicas=True)
    assert (status["agents"]["dev"]["connected"], status["agents"]["dev"]["replica"]) == (True, other.id)
    assert {(r["id"], r["alive"], r["this"]) for r in status["replicas"]} == {
        (other.id, True, False),
        (env.broker.roster.replica, True, True),
    }

    silent_for = 16.0  # killed: its last beat is more than three beats ago
    await other.beat()
    status = await env.broker.monitoring.status(replicas=True)
    assert status["agents"]["dev"]["connected"] is False
    assert [r["alive"] for r in status["replicas"] if r["id"] == other.id] == [False]
    text = status_text(
        {"status": status, "plan": {"planId": None, "autoAdvance": False}, "generation": 1, "archives": []}
    )
    assert "Replicas: 1 alive, 1 gone" in text
    assert f"its last call went through replica {other.id} ({other.host}), which is gone" in text
    assert (await env.status())["agents"]["dev"]["connected"] is False  # the agents' own view too

    await env.ok("dev", "get_pipeline_status")  # dev calls again, through this replica
    assert (await env.status())["agents"]["dev"]["connected"] is True

    # A clean stop deletes the replica's row: the next start lists no replica gone but the killed one.
    mine = env.broker.roster.replica
    await close(env)
    again = await make_env(env.settings)
    listed = {r["id"] for r in (await again.broker.monitoring.status(replicas=True))["replicas"]}
    if store.postgres:
        assert mine not in listed and listed == {other.id, again.broker.roster.replica}
    else:  # one gateway per state folder (its lock): a start drops every earlier run's row
        assert listed == {again.broker.roster.replica}


async def test_on_sqlite_a_replica_without_the_lock_is_not_running(
    make_env: EnvFactory, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env = await make_env()
    if env.broker.store.postgres:
        pytest.skip("PostgreSQL's replicas run anywhere: no lock tells whether one runs")
    # A gateway killed a moment ago (SIGKILL): its row is left, fresh, and nothing holds the lock.
    killed = Heartbeat(env.broker.store, time.time, every=5.0)
    await killed.beat()
    async with env.broker.store.write() as q:
        await q.save_last_seen({"dev": iso(time.time())}, killed.id)
    await close(env)  # the in-process broker holds the lock; its clean stop deletes only its row
    for name in list(os.environ):
        if name.startswith(("GATEWAY_", "GITLAB_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("GATEWAY_STATE_DIR", str(env.settings.state_dir))
    assert await asyncio.to_thread(main, ["broker", "status"]) == 0
    out = capsys.readouterr().out
    assert "No gateway is running on this state folder" in out
    assert "alive" not in out and "Replicas: none running (1 stopped without saying so)" in out
    assert "not running (no gateway holds the state folder's lock)" in out
    assert "which is not running: the agent is not connected" in out
    assert await asyncio.to_thread(main, ["broker", "status", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["status"]["replicas"]
    assert [(r["alive"], r["running"]) for r in shown] == [(False, False)]


async def test_each_replica_beats_from_its_timer(make_env: EnvFactory) -> None:
    env = await make_env(broker={"heartbeat_seconds": 0.1, "timer_poll_seconds": 0.05})

    async def last_beat() -> float:
        async with env.broker.store.read() as q:
            return next(r.last_seen for r in await q.replicas() if r.id == env.broker.roster.replica)

    first = await last_beat()
    async with asyncio.timeout(10):
        while await last_beat() == first:
            await asyncio.sleep(0.05)
