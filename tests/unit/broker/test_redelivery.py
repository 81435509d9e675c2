"""Redelivery: a message whose lease or acknowledgement hold runs out is handed to the waits open
then, and to later ones, when it runs out; not at the next periodic re-check
(``broker.recheck_seconds``, left at its default of 5 s here: every wait below is shorter). And a
replica that cannot hear the others' signals (its LISTEN connection is down) looks often meanwhile."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.unit.broker.conftest import Env, EnvFactory

HOLD = 0.3
#: Late by more than this and the message waited for something other than its hold's end.
LATE = 1.0
ACKS = {"ack_timeout_seconds": HOLD}


async def send(env: Env, subject: str = "work") -> str:
    out = await env.ok("pm", "send_message", {"to": "dev", "subject": subject, "body": {}})
    return str(out["messageId"])


async def wait(env: Env, timeout: float, ack: list[str] | None = None) -> dict[str, Any]:
    args: dict[str, Any] = {"timeout_sec": timeout}
    if ack is not None:
        args["ack"] = ack
    return await env.ok("dev", "wait_for_message", args)


async def held(env: Env) -> tuple[str, float]:
    """dev acknowledges; one message is written to it and held for its acknowledgement: its id,
    and when the hold ends (``time.time()``)."""
    assert (await wait(env, 0, ack=[]))["message"] is None
    message_id = await send(env)
    got = await wait(env, 0)
    assert got["message"]["messageId"] == message_id
    return message_id, time.time() + HOLD


async def test_a_wait_open_when_a_hold_ends_gets_the_message(make_env: EnvFactory) -> None:
    env = await make_env(broker=dict(ACKS))
    message_id, ends = await held(env)
    out = await asyncio.wait_for(wait(env, 3), 10)
    late = time.time() - ends
    print(f"received {late * 1000:.0f} ms after the lease ended")
    assert out["message"] is not None, "the hold ended, but the open wait never looked again"
    assert out["message"]["messageId"] == message_id and out["message"]["deliveryAttempt"] == 2
    assert late < LATE, f"got it {late:.2f} s after its hold ended"


async def test_a_wait_begun_after_a_hold_ended_gets_the_message(make_env: EnvFactory) -> None:
    env = await make_env(broker=dict(ACKS))
    message_id, ends = await held(env)
    assert (await wait(env, 0))["message"] is None  # still held
    await asyncio.sleep(max(0.0, ends - time.time()) + 0.05)
    polled = await wait(env, 0)  # polling, timeout_sec 0
    assert polled["message"] is not None and polled["message"]["messageId"] == message_id
    again, ends = polled["message"]["messageId"], time.time() + HOLD
    await asyncio.sleep(max(0.0, ends - time.time()) + 0.05)
    out = await asyncio.wait_for(wait(env, 1), 10)  # a short wait
    assert out["message"] is not None and out["message"]["messageId"] == again
    assert out["message"]["deliveryAttempt"] == 3


async def test_a_lease_that_runs_out_reaches_an_open_wait(make_env: EnvFactory) -> None:
    """The process that leased the message never reported its answer (as when it died): the lease
    runs out and the message goes out again then."""
    env = await make_env(broker={"lease_seconds": HOLD})
    message_id = await send(env)
    first = await env.call("dev", "wait_for_message", {"timeout_sec": 0})
    assert first.structured["message"]["messageId"] == message_id  # neither delivered nor given back
    ends = time.time() + HOLD
    out = await asyncio.wait_for(wait(env, 3), 10)
    late = time.time() - ends
    print(f"received {late * 1000:.0f} ms after the lease ended")
    assert out["message"] is not None and out["message"]["messageId"] == message_id
    assert out["message"]["deliveryAttempt"] == 2
    assert late < LATE, f"got it {late:.2f} s after its lease ran out"


#: Replicas share a PostgreSQL database: the tests of two of them run on PostgreSQL alone.
REPLICAS_SHARE_POSTGRESQL = pytest.mark.parametrize("broker_backend", ["postgresql"], indirect=True)


@pytest.fixture
async def replicas(make_env: EnvFactory, tmp_path: Path) -> tuple[Env, Env]:
    """Two brokers on one PostgreSQL database (PostgreSQL only)."""
    first = await make_env(broker=dict(ACKS))
    assert first.broker.store.postgres, (
        "replicas share a PostgreSQL database: mark the test REPLICAS_SHARE_POSTGRESQL"
    )
    assert first.settings.broker.database_url is not None
    url = first.settings.broker.database_url.get_secret_value()
    second = await make_env(state_dir=str(tmp_path / "second"), broker={**ACKS, "database_url": url})
    return first, second


@REPLICAS_SHARE_POSTGRESQL
async def test_a_hold_on_one_replica_ends_into_a_wait_on_another(replicas: tuple[Env, Env]) -> None:
    here, there = replicas
    message_id, ends = await held(here)
    # The other replica heard the send; its wait looks, finds the message held, and must look
    # again when the hold ends.
    out = await asyncio.wait_for(wait(there, 3), 10)
    late = time.time() - ends
    print(f"received {late * 1000:.0f} ms after the lease ended")
    assert out["message"] is not None and out["message"]["messageId"] == message_id
    assert late < LATE, f"got it {late:.2f} s after its hold ended"


@REPLICAS_SHARE_POSTGRESQL
async def test_a_wait_that_looked_before_the_hold_was_set_gets_the_message(
    replicas: tuple[Env, Env],
) -> None:
    """The other replica's wait looked while the message was leased for its answer (a lease of
    ``broker.lease_seconds``, 30 s); the shorter acknowledgement hold set after that is what counts."""
    here, there = replicas
    assert (await wait(here, 0, ack=[]))["message"] is None
    message_id = await send(here)
    first = await here.call("dev", "wait_for_message", {"timeout_sec": 0})
    assert first.structured["message"]["messageId"] == message_id
    waiting = asyncio.create_task(wait(there, 3))
    await asyncio.sleep(0.2)  # it has looked: the message is leased
    assert first.on_delivered is not None
    await first.on_delivered()  # written: now held for dev's acknowledgement
    ends = time.time() + HOLD
    out = await asyncio.wait_for(waiting, 10)
    late = time.time() - ends
    print(f"received {late * 1000:.0f} ms after the lease ended")
    assert out["message"] is not None and out["message"]["messageId"] == message_id
    assert late < LATE, f"got it {late:.2f} s after its hold ended"


@REPLICAS_SHARE_POSTGRESQL
async def test_while_its_listen_connection_is_down_a_replica_still_finds_what_others_send(
    replicas: tuple[Env, Env],
) -> None:
    """Signals from the other replicas are missed while the LISTEN connection is down: the waits
    look at their queues every fraction of a second meanwhile, not every ``recheck_seconds``."""
    here, there = replicas
    listener = here.broker._listener
    assert listener is not None and listener._conn is not None
    backend, conninfo = listener._conn.info.backend_pid, listener._conninfo
    listener._conninfo = "postgresql://nobody@127.0.0.1:1/none"  # it cannot come back for now
    async with there.broker.store.connection() as conn:
        await conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": backend})
        await conn.commit()
    for _ in range(100):
        if not here.broker.wakeups.listening:
            break
        await asyncio.sleep(0.02)
    assert not here.broker.wakeups.listening
    waiting = asyncio.create_task(wait(here, 3))
    await asyncio.sleep(0.2)
    message_id = await send(there)  # its signal is lost on the way to `here`
    sent = time.time()
    out = await asyncio.wait_for(waiting, 10)
    late = time.time() - sent
    assert out["message"] is not None and out["message"]["messageId"] == message_id
    assert late < LATE, f"got it {late:.2f} s after it was sent"
    listener._conninfo = conninfo
    for _ in range(150):  # the connection is retried at least every second
        if here.broker.wakeups.listening:
            break
        await asyncio.sleep(0.02)
    assert here.broker.wakeups.listening
