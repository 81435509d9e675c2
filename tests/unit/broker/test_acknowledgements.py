"""Acknowledgements: an agent that sends `ack` gets again what it never acknowledged; others as before."""

from __future__ import annotations

from typing import Any

from tests.unit.broker.conftest import Env, EnvFactory, close

FAST = {"ack_timeout_seconds": 0.3}  # broker.recheck_seconds at its default (5 s)


async def send(env: Env, subject: str) -> str:
    out = await env.ok("pm", "send_message", {"to": "dev", "subject": subject, "body": {}})
    return str(out["messageId"])


async def wait(env: Env, ack: list[str] | None = None, timeout: float = 0) -> dict[str, Any] | None:
    args: dict[str, Any] = {"timeout_sec": timeout}
    if ack is not None:
        args["ack"] = ack
    message: dict[str, Any] | None = (await env.ok("dev", "wait_for_message", args))["message"]
    return message


async def test_unacknowledged_message_is_delivered_again(make_env: EnvFactory) -> None:
    env = await make_env(broker=dict(FAST))
    assert await wait(env, ack=[]) is None  # from now on, dev acknowledges
    first = await send(env, "one")
    got = await wait(env)
    assert got is not None and got["messageId"] == first and got["deliveryAttempt"] == 1
    # The answer was written (the transport reported it), but dev never acknowledged it: it
    # went missing on the way. It comes back after the ack timeout, same id, next attempt.
    assert await wait(env) is None
    again = await wait(env, timeout=3)
    assert again is not None and again["messageId"] == first and again["deliveryAttempt"] == 2
    assert (await env.status())["queues"]["dev"] == 1

    second = await send(env, "two")
    got = await wait(env, ack=[first], timeout=3)
    assert got is not None and got["messageId"] == second
    assert await wait(env, ack=[second], timeout=0.6) is None  # both acknowledged: nothing comes back
    assert (await env.status())["queues"]["dev"] == 0
    delivered = env.metrics.registry.get_sample_value(
        "gateway_broker_messages_delivered_total", {"agent": "dev"}
    )
    assert delivered == 2


async def test_agents_that_never_ack_keep_delivery_on_write(make_env: EnvFactory) -> None:
    env = await make_env(broker=dict(FAST))
    first = await send(env, "one")
    got = await wait(env)
    assert got is not None and got["messageId"] == first
    assert await wait(env, timeout=0.6) is None
    assert (await env.status())["queues"]["dev"] == 0


async def test_acknowledging_is_remembered_across_restarts(make_env: EnvFactory) -> None:
    env = await make_env(broker=dict(FAST))
    assert await wait(env, ack=[]) is None
    await close(env)
    env = await make_env(env.settings)
    first = await send(env, "one")
    got = await wait(env)
    assert got is not None and got["messageId"] == first
    again = await wait(env, timeout=3)
    assert again is not None and again["messageId"] == first and again["deliveryAttempt"] == 2


async def test_ack_of_unknown_or_foreign_ids_changes_nothing(make_env: EnvFactory) -> None:
    env = await make_env(broker=dict(FAST))
    first = await send(env, "one")
    assert await wait(env, ack=["no-such-id"]) is not None
    # another agent cannot acknowledge dev's message
    await env.ok("reviewer", "wait_for_message", {"timeout_sec": 0, "ack": [first]})
    again = await wait(env, timeout=3)
    assert again is not None and again["messageId"] == first
