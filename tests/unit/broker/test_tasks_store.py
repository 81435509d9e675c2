"""The record of MCP tasks: created leased to one replica, taken over by exactly one other once
the lease lapses, finished once, cancelled unless finished, pruned past their TTL."""

from __future__ import annotations

import asyncio

from gateway.broker.tasks import CANCELLED, COMPLETED, FAILED, WORKING, NewTask, TaskStore, id_hash
from tests.unit.broker.conftest import EnvFactory


def new(name: str, *, expires: float = 5000.0) -> NewTask:
    return NewTask(
        id_hash=id_hash(name),
        owner_hash=id_hash("client-token:dev"),
        tool="get_pipeline",
        arguments='{"wait_seconds": 60}',
        deadline=1060.0,
        expires=expires,
        poll_ms=1000,
    )


async def store_at(make_env: EnvFactory, now: list[float]) -> TaskStore:
    env = await make_env()
    tasks: TaskStore = env.broker.tasks
    tasks._clock = lambda: now[0]
    return tasks


async def test_a_task_is_readable_once_created_and_keeps_no_id(make_env: EnvFactory) -> None:
    now = [1000.0]
    tasks = await store_at(make_env, now)
    created = await tasks.create(new("t1"), "replica-a", 6.0)
    row = await tasks.get(id_hash("t1"))
    assert row == created
    assert row is not None and row.status == WORKING and row.lease_owner == "replica-a"
    assert row.lease_until == 1006.0 and row.created == row.updated == 1000.0
    assert "t1" not in (row.id_hash, row.owner_hash)
    assert await tasks.get(id_hash("unknown")) is None


async def test_only_one_replica_takes_over_a_lapsed_lease(make_env: EnvFactory) -> None:
    now = [1000.0]
    tasks = await store_at(make_env, now)
    await tasks.create(new("t1"), "a", 6.0)
    assert not await tasks.take_over(id_hash("t1"), "b", 6.0)  # a's lease holds
    now[0] = 1007.0
    taken = await asyncio.gather(*(tasks.take_over(id_hash("t1"), r, 6.0) for r in ("b", "c", "d")))
    assert sorted(taken) == [False, False, True]
    # The former holder's renewal now fails: it must stop its work.
    assert not await tasks.renew(id_hash("t1"), "a", 6.0)


async def test_a_replica_shutting_down_releases_its_lease_at_once(make_env: EnvFactory) -> None:
    now = [1000.0]
    tasks = await store_at(make_env, now)
    await tasks.create(new("t1"), "a", 30.0)
    await tasks.release(id_hash("t1"), "b")  # not b's: nothing changes
    assert not await tasks.take_over(id_hash("t1"), "b", 30.0)
    await tasks.release(id_hash("t1"), "a")
    assert await tasks.take_over(id_hash("t1"), "b", 30.0)


async def test_the_first_outcome_wins_and_cancel_leaves_finished_tasks_alone(make_env: EnvFactory) -> None:
    now = [1000.0]
    tasks = await store_at(make_env, now)
    await tasks.create(new("done"), "a", 6.0)
    await tasks.create(new("stopped"), "a", 6.0)
    now[0] = 1002.0
    assert await tasks.finish(id_hash("done"), COMPLETED, '{"content": []}', None)
    assert not await tasks.finish(id_hash("done"), FAILED, '{"code": -32603}', "late")
    assert not await tasks.cancel(id_hash("done"), "too late")
    assert await tasks.cancel(id_hash("stopped"), "by the client")
    assert not await tasks.renew(id_hash("stopped"), "a", 6.0)
    done, stopped = await tasks.get(id_hash("done")), await tasks.get(id_hash("stopped"))
    assert done is not None and done.status == COMPLETED and done.outcome == '{"content": []}'
    assert done.updated == 1002.0 and done.lease_owner is None
    assert stopped is not None and stopped.status == CANCELLED and stopped.status_message == "by the client"


async def test_expired_tasks_are_pruned_at_the_next_creation(make_env: EnvFactory) -> None:
    now = [1000.0]
    tasks = await store_at(make_env, now)
    await tasks.create(new("short", expires=1100.0), "a", 6.0)
    await tasks.create(new("long", expires=9000.0), "a", 6.0)
    now[0] = 1100.0
    await tasks.create(new("next", expires=9000.0), "a", 6.0)
    assert await tasks.get(id_hash("short")) is None
    assert await tasks.get(id_hash("long")) is not None
