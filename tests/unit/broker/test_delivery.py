"""Delivery: leases, cancellation, ordering, exactly-once in process, progress, shutdown."""

from __future__ import annotations

import asyncio
import random
import time

import psycopg
import pytest
from sqlalchemy.engine import make_url

from gateway.broker.formats import iso
from gateway.broker.prepared import CHANNEL
from gateway.broker.queries import MessageRow, Queries
from tests.unit.broker.conftest import Env, EnvFactory, close


async def send(env: Env, to: str, n: int, priority: str = "normal", sender: str = "pm") -> str:
    out = await env.ok(
        sender, "send_message", {"to": to, "subject": "s", "body": {"n": n}, "priority": priority}
    )
    assert out["queued"] is True
    return str(out["messageId"])


async def test_wait_blocks_until_a_send_wakes_it(env: Env) -> None:
    waiter = asyncio.create_task(env.call("dev", "wait_for_message", {"timeout_sec": 10}))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    assert env.metrics.registry.get_sample_value("gateway_broker_waits_open") == 1
    assert (await env.status())["agents"]["dev"]["connected"] is True
    message_id = await send(env, "dev", 1)
    result = await asyncio.wait_for(waiter, 2)
    assert result.structured["message"]["messageId"] == message_id
    assert result.structured["timedOut"] is False
    assert result.structured["message"]["deliveryAttempt"] == 1
    # not removed from the queue until the transport says the answer was written
    assert (await env.status())["queues"]["dev"] == 1
    assert result.on_delivered is not None
    await result.on_delivered()
    assert (await env.status())["queues"]["dev"] == 0


async def test_timeout(env: Env) -> None:
    result = await env.call("dev", "wait_for_message", {"timeout_sec": 0.1})
    assert result.structured["message"] is None and result.structured["timedOut"] is True
    assert result.text == "No message in 0.1 s. Call wait_for_message again to keep waiting."


async def test_abandoned_answer_leaves_the_message_queued(env: Env) -> None:
    message_id = await send(env, "dev", 1)
    first = await env.call("dev", "wait_for_message", {"timeout_sec": 0})
    assert first.structured["message"]["messageId"] == message_id
    # a second concurrent wait does not get the leased message
    assert (await env.call("dev", "wait_for_message", {"timeout_sec": 0})).structured["timedOut"] is True
    assert first.on_abandoned is not None
    await first.on_abandoned()  # the client went away before the answer was written
    again = await env.wait("dev")
    assert again["message"]["messageId"] == message_id
    assert again["message"]["deliveryAttempt"] == 2
    assert (await env.wait("dev"))["message"] is None


async def test_abandoned_lease_wakes_another_wait_of_the_agent(env: Env) -> None:
    message_id = await send(env, "dev", 1)
    first = await env.call("dev", "wait_for_message", {"timeout_sec": 0})
    second = asyncio.create_task(env.call("dev", "wait_for_message", {"timeout_sec": 5}))
    await asyncio.sleep(0.05)
    assert not second.done()
    assert first.on_abandoned is not None
    await first.on_abandoned()
    assert (await asyncio.wait_for(second, 2)).structured["message"]["messageId"] == message_id


async def test_cancelled_wait_after_message_arrived_leaves_it_queued(env: Env) -> None:
    # The wait is cancelled (notifications/cancelled) in the same instant the message arrives.
    waiter = asyncio.create_task(env.call("dev", "wait_for_message", {"timeout_sec": 10}))
    await asyncio.sleep(0.05)
    message_id = await send(env, "dev", 1)
    waiter.cancel()
    try:
        result = await waiter
    except asyncio.CancelledError:
        result = None
    if result is not None:  # the answer was ready first: the transport abandons it, never delivers
        assert result.on_abandoned is not None
        await result.on_abandoned()
    assert (await env.status())["queues"]["dev"] == 1
    # A lease taken by the cancelled wait is given back in the background; the next wait is woken by it.
    assert (await env.wait("dev", timeout=5))["message"]["messageId"] == message_id


async def test_cancelled_while_waiting_leaves_nothing_behind(env: Env) -> None:
    waiter = asyncio.create_task(env.call("dev", "wait_for_message", {"timeout_sec": 10}))
    await asyncio.sleep(0.05)
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    assert env.metrics.registry.get_sample_value("gateway_broker_waits_open") == 0
    message_id = await send(env, "dev", 1)
    assert (await env.wait("dev"))["message"]["messageId"] == message_id


async def test_priority_then_time(env: Env) -> None:
    low = await send(env, "dev", 1, "low")
    normal1 = await send(env, "dev", 2)
    high = await send(env, "dev", 3, "high")
    normal2 = await send(env, "dev", 4)
    got = [(await env.wait("dev"))["message"]["messageId"] for _ in range(4)]
    assert got == [high, normal1, normal2, low]


async def test_thousand_messages_from_concurrent_senders_exactly_once_in_order(env: Env) -> None:
    rng = random.Random(5)
    senders = ("pm", "reviewer", "dev")
    plan = {
        s: [rng.choice(("high", "normal", "low")) for _ in range(334 if s != "dev" else 332)] for s in senders
    }

    async def sender(name: str) -> list[tuple[str, str, int]]:
        out = []
        for i, priority in enumerate(plan[name]):
            r = await env.ok(
                name, "send_message", {"to": "dev", "subject": name, "body": {"i": i}, "priority": priority}
            )
            out.append((r["messageId"], priority, i))
        return out

    sent = [m for batch in await asyncio.gather(*(sender(s) for s in senders)) for m in batch]
    assert len(sent) == 1000
    received = []
    while True:
        m = (await env.wait("dev"))["message"]
        if m is None:
            break
        received.append(m)
    ids = [m["messageId"] for m in received]
    assert len(ids) == 1000 and set(ids) == {m[0] for m in sent}
    rank = {"high": 0, "normal": 1, "low": 2}
    assert [rank[m["priority"]] for m in received] == sorted(rank[m["priority"]] for m in received)
    # time order within a priority: each sender's messages in the order it sent them, and
    # the broker's order equals the order the sends were committed (history order)
    for s in senders:
        for p in rank:
            seq = [m["body"]["i"] for m in received if m["from"] == s and m["priority"] == p]
            assert seq == sorted(seq)
    history = (await env.ok("pm", "get_message_history", {"limit": 1000}))["messages"]
    commit_order = {m["messageId"]: i for i, m in enumerate(history)}
    for p in rank:
        within = [commit_order[m["messageId"]] for m in received if m["priority"] == p]
        assert within == sorted(within)


async def test_concurrent_waits_share_out_without_duplicates(env: Env) -> None:
    got: list[str] = []
    all_sent = asyncio.Event()

    async def consumer() -> None:
        while True:
            r = await env.call("dev", "wait_for_message", {"timeout_sec": 0.5})
            if r.structured["message"] is None:
                if all_sent.is_set():  # a slow machine may leave gaps between the sends
                    return
                continue
            got.append(r.structured["message"]["messageId"])
            assert r.on_delivered is not None
            await r.on_delivered()

    consumers = [asyncio.create_task(consumer()) for _ in range(5)]
    sent = await asyncio.gather(*(send(env, "dev", i) for i in range(200)))
    all_sent.set()
    await asyncio.gather(*consumers)
    assert sorted(got) == sorted(sent)


async def test_progress_notifications(make_env: EnvFactory) -> None:
    env = await make_env(broker={"progress_interval_seconds": 0.1})
    seen: list[tuple[float, float | None, str | None]] = []

    async def progress(p: float, total: float | None, message: str | None) -> None:
        seen.append((p, total, message))

    result = await env.call("dev", "wait_for_message", {"timeout_sec": 0.45}, progress=progress)
    assert result.structured["timedOut"] is True
    assert 3 <= len(seen) <= 5
    assert [p for p, _, _ in seen] == sorted(p for p, _, _ in seen)  # strictly increasing elapsed seconds
    assert all(total == 0.45 for _, total, _ in seen)
    assert seen[0][2] == "waiting for a message, 0 s elapsed"


async def test_no_progress_without_token(make_env: EnvFactory) -> None:
    env = await make_env(broker={"progress_interval_seconds": 0.05})
    result = await env.call("dev", "wait_for_message", {"timeout_sec": 0.2})
    assert result.structured["timedOut"] is True


async def test_shutdown_wakes_every_waiter(env: Env) -> None:
    await send(env, "pm", 1)
    waiters = [
        asyncio.create_task(env.call(a, "wait_for_message", {"timeout_sec": 30})) for a in ("dev", "reviewer")
    ]
    await asyncio.sleep(0.05)
    await env.broker.shutdown("the gateway is shutting down")
    for w in waiters:
        r = await asyncio.wait_for(w, 2)
        assert r.structured == {
            "message": None,
            "timedOut": False,
            "shutdown": True,
            "reason": "the gateway is shutting down",
            "waitedSeconds": r.structured["waitedSeconds"],
        }
        assert r.text is not None and "reconnect" in r.text
    # later waits answer at once, and nothing was taken from any queue
    assert (await env.call("pm", "wait_for_message", {"timeout_sec": 30})).structured["shutdown"] is True
    async with env.broker.store.read() as q:
        assert (await q.queue_depths())["pm"] == 1


async def test_delivered_but_not_acknowledged_is_redelivered_after_restart(make_env: EnvFactory) -> None:
    env = await make_env()
    message_id = await send(env, "dev", 1)
    result = await env.call("dev", "wait_for_message", {"timeout_sec": 0})
    assert result.structured["message"]["messageId"] == message_id
    await close(env)  # the process ends before the transport reported the answer as written
    env = await make_env(env.settings)
    again = (await env.wait("dev"))["message"]
    assert again["messageId"] == message_id and again["deliveryAttempt"] == 2


async def test_last_seen_of_an_agent_that_only_waits_is_saved(make_env: EnvFactory) -> None:
    """An agent that only waits changes no state; its lastSeen is still saved within a timer look,
    so it survives a kill -9 and other replicas see it."""
    env = await make_env(broker={"timer_poll_seconds": 0.05})
    await send(env, "dev", 1)
    before = iso(time.time())
    await env.wait("dev")
    # Read what is committed, as a restart after kill -9 (or another replica) would. The timer
    # looks every 0.05 s; a loaded machine may take longer, so wait for it (bounded) rather than
    # for a fixed time.
    deadline = time.monotonic() + 10
    saved = None
    while saved is None and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        async with env.broker.store.read() as q:
            saved = (await q.last_seen()).get("dev")
    after = iso(time.time())
    assert saved is not None, "dev's lastSeen was not saved within 10 s"
    assert before <= saved <= after


@pytest.mark.parametrize("broker_backend", ["postgresql"], indirect=True)  # only they signal
async def test_a_replica_skips_its_own_wake_up_signals(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """On PostgreSQL a commit wakes this replica's waits at once and signals the other replicas
    (``pg_notify``); the replica hears that signal too, and must not look at the queue again for it:
    one database look per message, not two."""
    assert env.broker.store.postgres
    claims = 0
    claim = Queries.claim

    async def counted(self: Queries, recipient: str, now: float, lease_seconds: float) -> MessageRow | None:
        nonlocal claims
        claims += 1
        return await claim(self, recipient, now, lease_seconds)

    monkeypatch.setattr(Queries, "claim", counted)
    waiter = asyncio.create_task(env.ok("dev", "wait_for_message", {"timeout_sec": 5}))
    await asyncio.sleep(0.1)
    await send(env, "dev", 1)
    assert (await waiter)["message"]["body"] == {"n": 1}
    await asyncio.sleep(0.5)  # the replica's LISTEN connection hears the send's signal
    looked = claims
    assert (await env.wait("dev"))["message"] is None
    assert claims == looked  # the queue is known empty: no round trip to the database
    # another replica's signal still counts: its send wakes a wait here
    waiter = asyncio.create_task(env.ok("dev", "wait_for_message", {"timeout_sec": 5}))
    await asyncio.sleep(0.1)
    assert env.settings.broker.database_url is not None
    url = make_url(env.settings.broker.database_url.get_secret_value()).set(drivername="postgresql")
    other = await psycopg.AsyncConnection.connect(url.render_as_string(hide_password=False), autocommit=True)
    async with other:
        await other.execute("SELECT pg_notify(%s, 'dev')", (CHANNEL,))
    await asyncio.sleep(0.5)
    assert claims == looked + 1  # woken by the foreign signal, it looked once
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
