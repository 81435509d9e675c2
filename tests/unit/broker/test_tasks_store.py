"""The record of MCP tasks: created leased to one replica, taken over by exactly one other once
the lease lapses, finished once, cancelled unless finished, pruned past their TTL; a task that asks
keeps its questions and answers by key until the last answer resumes it."""

from __future__ import annotations

import asyncio
import json

from gateway.broker.tasks import (
    CANCELLED,
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    WORKING,
    NewTask,
    TaskStore,
    id_hash,
)
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


QUESTION = {"method": "elicitation/create", "params": {"message": "?", "requestedSchema": {}}}


async def test_a_question_parks_the_task_and_answers_resume_it_once_all_are_in(make_env: EnvFactory) -> None:
    now = [1000.0]
    tasks = await store_at(make_env, now)
    task = id_hash("t1")
    await tasks.create(new("t1"), "a", 6.0)
    assert not await tasks.ask(task, "b", {"x": QUESTION}, "waiting")  # not b's to park
    assert await tasks.ask(task, "a", {"x": QUESTION, "y": QUESTION}, "waiting")
    parked = await tasks.get(task)
    assert parked is not None and parked.status == INPUT_REQUIRED and parked.lease_owner is None
    assert parked.status_message == "waiting" and set(json.loads(parked.input_requests or "")) == {"x", "y"}
    assert not await tasks.take_over(task, "c", 6.0)  # nothing runs while it waits
    now[0] = 1001.0
    assert await tasks.answer(task, {"unknown": 1}, "b", 6.0) is None
    assert await tasks.answer(task, {"x": "yes"}, "b", 6.0) is None  # y is still outstanding
    half = await tasks.get(task)
    assert half is not None and half.status == INPUT_REQUIRED and half.updated == 1001.0
    assert json.loads(half.input_requests or "") == {"y": QUESTION}
    assert json.loads(half.answers or "") == {"x": "yes"}
    resumed = await tasks.answer(task, {"x": "changed", "y": "no"}, "b", 6.0)
    assert resumed == await tasks.get(task)
    assert resumed is not None and resumed.status == WORKING and resumed.input_requests is None
    assert resumed.lease_owner == "b" and resumed.lease_until == 1007.0 and resumed.status_message is None
    assert json.loads(resumed.answers or "") == {"x": "yes", "y": "no"}  # an answered key stays answered
    assert await tasks.answer(task, {"y": "again"}, "c", 6.0) is None  # nothing outstanding now


async def test_concurrent_answers_resume_a_task_exactly_once(make_env: EnvFactory) -> None:
    now = [1000.0]
    tasks = await store_at(make_env, now)
    task = id_hash("t1")
    await tasks.create(new("t1"), "a", 6.0)
    await tasks.ask(task, "a", {"x": QUESTION, "y": QUESTION}, "waiting")
    answered = await asyncio.gather(
        tasks.answer(task, {"x": 1}, "b", 6.0), tasks.answer(task, {"y": 2}, "c", 6.0)
    )
    assert sum(row is not None for row in answered) == 1
    row = await tasks.get(task)
    assert row is not None and row.status == WORKING and json.loads(row.answers or "") == {"x": 1, "y": 2}


async def test_a_waiting_task_can_be_cancelled_and_then_takes_no_answer(make_env: EnvFactory) -> None:
    now = [1000.0]
    tasks = await store_at(make_env, now)
    task = id_hash("t1")
    await tasks.create(new("t1"), "a", 6.0)
    await tasks.ask(task, "a", {"x": QUESTION}, "waiting")
    assert await tasks.cancel(task, "cancelled by the client")
    assert await tasks.answer(task, {"x": 1}, "b", 6.0) is None
    row = await tasks.get(task)
    assert row is not None and row.status == CANCELLED and row.input_requests is None
