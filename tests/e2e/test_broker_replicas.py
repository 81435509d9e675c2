"""Three gateway processes sharing one PostgreSQL broker: wake-ups, leases, transitions and timers
across replicas, with replicas killed (SIGKILL) in the middle."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.e2e.harness import GatewayProcess
from tests.e2e.rpc import initialize_request

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROTOCOL = "2025-11-25"
FAST = {
    "GITLAB_URL": "http://127.0.0.1:9",
    "GATEWAY_BROKER__LEASE_SECONDS": "1",
    "GATEWAY_BROKER__RECHECK_SECONDS": "0.5",
    "GATEWAY_BROKER__TIMER_POLL_SECONDS": "0.2",
    "GATEWAY_BROKER__COOLDOWN_SECONDS_OVERRIDE": "1",
    "GATEWAY_BROKER__SESSION_RESET_SECONDS": "0.5",
}


class Agent:
    """Raw JSON-RPC over Streamable HTTP as one agent: a fresh MCP session per call, so a call
    works on any replica and after a replica was killed."""

    def __init__(self, http: httpx.AsyncClient, agent: str) -> None:
        self.http = http
        self.agent = agent

    async def call(self, url: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        headers = {
            "X-Agent-Id": self.agent,
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        init = initialize_request("t", PROTOCOL)
        r = await self.http.post(url, headers=headers, json=init)
        r.raise_for_status()
        headers |= {"Mcp-Session-Id": r.headers["Mcp-Session-Id"], "MCP-Protocol-Version": PROTOCOL}
        await self.http.post(
            url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
        )
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": tool, "arguments": args},
        }
        r = await self.http.post(url, headers=headers, json=body)
        r.raise_for_status()
        if r.headers.get("content-type", "").startswith("text/event-stream"):
            import json

            for line in r.text.splitlines():
                if line.startswith("data:") and line[5:].strip():
                    msg = json.loads(line[5:])
                    if msg.get("id") == 1:
                        return dict(msg["result"])
            raise RuntimeError(r.text[:300])
        return dict(r.json()["result"])

    async def ok(self, url: str, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        result = await self.call(url, tool, args or {})
        assert not result.get("isError"), result
        return dict(result["structuredContent"])


@pytest.fixture(params=["at_head"])
def database(request: pytest.FixtureRequest) -> str:
    """The replicas' PostgreSQL database: already at the newest schema, as after the first start
    of a deployment, or (``empty``, one test) new, so that the replicas race to migrate it."""
    fixture = "postgres_url" if request.param == "empty" else "postgres_url_at_head"
    return str(request.getfixturevalue(fixture))


@pytest.fixture
def replicas(database: str, tmp_path: Path) -> Iterator[list[GatewayProcess]]:
    """Three gateways on one PostgreSQL database, each with its own state folder."""
    env = {**FAST, "GATEWAY_BROKER__DATABASE_URL": database}
    procs = [GatewayProcess(env=env, state_dir=tmp_path / f"state{i}") for i in range(3)]
    with ThreadPoolExecutor(3) as pool:  # together (on an empty database, racing to migrate it)
        list(pool.map(lambda p: p.start(60.0), procs))
    yield procs
    for p in procs:
        p.stop()


@pytest.fixture
async def http() -> Any:
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=60.0)) as client:
        yield client


def db(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True)


@pytest.mark.parametrize("database", ["empty"], indirect=True)
async def test_a_wait_on_one_replica_is_woken_by_a_send_through_another(
    replicas: list[GatewayProcess], http: httpx.AsyncClient
) -> None:
    dev, pm = Agent(http, "dev"), Agent(http, "pm")
    for _ in range(3):
        wait = asyncio.create_task(dev.ok(replicas[0].mcp_url, "wait_for_message", {"timeout_sec": 20}))
        await asyncio.sleep(0.5)  # the wait is open on replica 0
        t0 = time.monotonic()
        sent = await pm.ok(replicas[1].mcp_url, "send_message", {"to": "dev", "subject": "s", "body": {}})
        got = await asyncio.wait_for(wait, 5)
        assert time.monotonic() - t0 < 1.0
        assert got["message"]["messageId"] == sent["messageId"]
    for _ in range(50):  # the last message leaves its queue when its read check ends (0.2 s)
        status = await pm.ok(replicas[2].mcp_url, "get_pipeline_status")
        if status["queues"]["dev"] == 0:
            break
        await asyncio.sleep(0.05)
    assert status["queues"]["dev"] == 0
    assert status["agents"]["dev"]["lastSeen"] is not None and status["agents"]["dev"]["connected"] is True


async def test_sigkill_between_claim_and_acknowledgement_redelivers_the_same_message(
    replicas: list[GatewayProcess], http: httpx.AsyncClient, database: str
) -> None:
    dev, pm = Agent(http, "dev"), Agent(http, "pm")
    victim = replicas[0]
    assert victim.proc is not None
    with db(database) as conn:
        for _attempt in range(30):
            wait = asyncio.create_task(dev.call(victim.mcp_url, "wait_for_message", {"timeout_sec": 20}))
            await asyncio.sleep(0.3)
            sent = await pm.ok(replicas[1].mcp_url, "send_message", {"to": "dev", "subject": "s", "body": {}})
            message_id = sent["messageId"]
            # Freeze the replica the moment its claim is committed, before its acknowledgement is.
            deadline = time.monotonic() + 5
            row = None
            while time.monotonic() < deadline:
                row = conn.execute(
                    "SELECT lease_token, delivered_at FROM messages WHERE id = %s", (message_id,)
                ).fetchone()
                if row is not None and (row[0] is not None or row[1] is not None):
                    if row[1] is None:
                        os.kill(victim.proc.pid, signal.SIGSTOP)
                    break
            assert row is not None
            after = conn.execute("SELECT delivered_at FROM messages WHERE id = %s", (message_id,)).fetchone()
            if after is not None and after[0] is None:
                break  # caught between claim and acknowledgement
            os.kill(victim.proc.pid, signal.SIGCONT)
            await asyncio.gather(wait, return_exceptions=True)
        else:
            pytest.fail("never caught the replica between its claim and its acknowledgement")
        victim.kill()
        await asyncio.gather(wait, return_exceptions=True)
        again = await dev.ok(replicas[2].mcp_url, "wait_for_message", {"timeout_sec": 10})
        assert again["message"]["messageId"] == message_id
        assert again["message"]["deliveryAttempt"] >= 2
        nothing = await dev.ok(replicas[1].mcp_url, "wait_for_message", {"timeout_sec": 1.5})
        assert nothing["message"] is None  # acknowledged once: not delivered a third time
        delivered = conn.execute(
            "SELECT count(*) FROM messages WHERE id = %s AND delivered_at IS NOT NULL", (message_id,)
        ).fetchone()
        assert delivered == (1,)


async def test_no_message_is_lost_while_replicas_are_killed_and_restarted(
    replicas: list[GatewayProcess], http: httpx.AsyncClient
) -> None:
    pm = Agent(http, "pm")
    rng = random.Random(13)
    queued: list[str] = []
    stop = asyncio.Event()

    async def chaos() -> None:
        while not stop.is_set():
            await asyncio.sleep(rng.uniform(0.2, 0.5))
            victim = replicas[rng.randrange(1, 3)]  # replica 0 stays up, so sends always have somewhere to go
            victim.kill()
            await asyncio.sleep(0.1)
            await asyncio.to_thread(victim.start)

    async def sender(n: int) -> None:
        for i in range(n):
            url = replicas[rng.randrange(3)].mcp_url
            try:
                out = await pm.ok(url, "send_message", {"to": "dev", "subject": "s", "body": {"i": i}})
            except (httpx.HTTPError, RuntimeError, KeyError):
                continue  # not answered: the sender does not know it was queued
            if out.get("queued") is True:
                queued.append(out["messageId"])

    chaos_task = asyncio.create_task(chaos())
    await asyncio.gather(*(sender(50) for _ in range(4)))
    stop.set()
    await chaos_task
    assert len(queued) >= 100
    for r in replicas:
        if r.proc is None or r.proc.poll() is not None:
            r.start()
    dev = Agent(http, "dev")
    got: set[str] = set()
    while True:
        out = await dev.ok(replicas[0].mcp_url, "wait_for_message", {"timeout_sec": 2})
        if out["message"] is None:
            break
        got.add(out["message"]["messageId"])
    assert set(queued) <= got


async def test_two_replicas_reporting_the_last_issue_at_once_transition_once(
    replicas: list[GatewayProcess], http: httpx.AsyncClient, database: str
) -> None:
    pm, dev = Agent(http, "pm"), Agent(http, "dev")
    for phase in range(1, 4):
        await pm.ok(replicas[0].mcp_url, "start_phase", {"phase": phase, "issues": [f"JOP-{phase}"]})
        await dev.ok(replicas[1].mcp_url, "begin_developing")
        results = await asyncio.gather(
            dev.call(replicas[1].mcp_url, "report_completion", {"issue": f"JOP-{phase}", "result": "pass"}),
            dev.call(replicas[2].mcp_url, "report_completion", {"issue": f"JOP-{phase}", "result": "pass"}),
        )
        done = [r for r in results if not r.get("isError")]
        assert len(done) == 1 and done[0]["structuredContent"]["allDone"] is True
        refused = [r for r in results if r.get("isError")]
        assert len(refused) == 1 and refused[0]["structuredContent"]["error"]["reason"] == "conflict"
        await dev.ok(replicas[0].mcp_url, "report_review", {"result": "approved", "hasNextPhase": True})
    with db(database) as conn:
        count = conn.execute(
            "SELECT count(*) FROM transitions "
            "WHERE from_state = 'PHASE_DEVELOPING' AND to_state = 'PHASE_REVIEWING'"
        ).fetchone()
    assert count == (3,)


async def test_auto_advance_happens_once_across_three_replicas(
    replicas: list[GatewayProcess], http: httpx.AsyncClient, database: str
) -> None:
    pm, dev, reviewer = Agent(http, "pm"), Agent(http, "dev"), Agent(http, "reviewer")
    plan = {
        "planId": "p",
        "phases": [{"phase": 1, "issues": ["A"]}, {"phase": 2, "issues": ["B"]}],
        "autoAdvance": True,
    }
    await pm.ok(replicas[0].mcp_url, "set_phase_plan", plan)
    await pm.ok(replicas[1].mcp_url, "start_phase", {"phase": 1, "issues": ["A"]})
    await dev.ok(replicas[2].mcp_url, "begin_developing")
    await dev.ok(replicas[0].mcp_url, "report_completion", {"issue": "A", "result": "pass"})
    await reviewer.ok(replicas[1].mcp_url, "report_review", {"result": "approved"})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        status = await pm.ok(replicas[2].mcp_url, "get_pipeline_status")
        if status["state"] == "PHASE_PREPARING":
            break
        await asyncio.sleep(0.2)
    assert (status["state"], status["phase"]) == ("PHASE_PREPARING", 2)
    await asyncio.sleep(1.5)  # every replica's timer has looked again since
    subjects: list[str] = []
    while True:
        out = await dev.ok(replicas[0].mcp_url, "wait_for_message", {"timeout_sec": 0})
        if out["message"] is None:
            break
        subjects.append(out["message"]["subject"])
    assert subjects.count("phase_started") == 1 and subjects.count("session_reset") == 1
    with db(database) as conn:
        starts = conn.execute(
            "SELECT count(*) FROM transitions WHERE event = 'auto_advance:start_phase'"
        ).fetchone()
    assert starts == (1,)
