"""Failures the broker must survive: a failed auto-advance step, a close after something failed,
its database going away for a while."""

from __future__ import annotations

import asyncio
import gc
import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from gateway.broker import auto_advance
from gateway.broker.auto_advance import AutoAdvance
from tests.unit.broker.conftest import EnvFactory, close
from tests.unit.broker.test_flow import PLAN, develop


async def test_a_failed_auto_advance_step_is_tried_again(
    make_env: EnvFactory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(auto_advance, "RETRY_SECONDS", 0.05)
    env = await make_env(broker={"cooldown_seconds_override": 0.1, "session_reset_seconds": 0.1})
    changes = env.broker.changes
    real_run = changes.run_due
    failures = 0

    async def run_failing_twice(now: float, body: Any) -> Any:
        nonlocal failures
        if failures < 2:
            failures += 1
            raise sqlite3.OperationalError("database or disk is full")
        return await real_run(now, body)

    monkeypatch.setattr(changes, "run_due", run_failing_twice)
    await env.ok("pm", "set_phase_plan", {**PLAN, "autoAdvance": True})
    await develop(env, 1, ["JOP-237"])
    await env.ok("reviewer", "report_review", {"result": "approved"})
    reset = (await env.wait("dev", 5))["message"]
    assert reset is not None and reset["subject"] == "session_reset"
    started = (await env.wait("dev", 5))["message"]
    assert started is not None and started["subject"] == "phase_started"
    status = await env.status()
    assert status["state"] == "PHASE_PREPARING" and status["phase"] == 2
    assert failures == 2
    logged = [r for r in caplog.records if r.name == "gateway.broker.auto_advance"]
    assert [r.getMessage() for r in logged] == [
        "auto-advance step cooldown failed; trying again in 0.05 s",
        "auto-advance step cooldown failed; trying again in 0.1 s",  # a bounded backoff
    ]
    assert all(r.levelno == logging.ERROR and r.exc_info for r in logged)


async def test_close_after_a_failed_timer_task_still_closes_the_store(make_env: EnvFactory) -> None:
    env = await make_env()
    timer: AutoAdvance = env.broker.auto_advance
    await timer.close()  # the running loop is replaced by one that died, not left behind
    timer._stopping = False

    async def dead() -> None:
        raise sqlite3.OperationalError("database or disk is full")

    timer._timer = asyncio.get_running_loop().create_task(dead())
    await asyncio.sleep(0)  # the task has ended with its error
    await close(env)  # does not raise what the task raised
    assert env.broker.store.is_open is False
    again = await make_env(env.settings)  # the state folder's lock was released
    assert (await again.status())["state"] == "IDLE"


# A close that fails part way may leave a pooled PostgreSQL connection to the garbage collector;
# what matters here is that the database, the files and the folder's lock are released.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.filterwarnings("ignore::ResourceWarning")
async def test_close_releases_everything_when_a_step_of_it_fails(
    make_env: EnvFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = await make_env()
    await env.ok("pm", "start_phase", {"phase": 1, "issues": ["A"]})  # pipeline.log is open
    handlers = list(env.broker.logs._handlers.values())
    assert all(h.stream is not None for h in handlers)
    assert bool(handlers) is env.broker.logs.files  # log files on SQLite only

    async def broken_close() -> None:
        raise RuntimeError("the timer would not stop")

    monkeypatch.setattr(env.broker.auto_advance, "close", broken_close)
    with pytest.raises(RuntimeError, match="the timer would not stop"):
        await close(env)
    monkeypatch.undo()
    assert env.broker.store.is_open is False
    assert all(h.stream is None for h in handlers)
    again = await make_env(env.settings)  # the state folder's lock was released
    assert (await again.status())["state"] == "PHASE_PREPARING"
    await close(again)
    gc.collect()  # here, under this test's filter, not in a later test


async def test_a_database_outage_is_an_upstream_error_and_an_open_wait_rides_it_out(
    make_env: EnvFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.broker.store")
    env = await make_env(broker={"recheck_seconds": 0.1})
    store = env.broker.store
    working = store.engine
    # The same database, gone: a PostgreSQL server that refuses connections, a file that cannot be opened.
    gone = (
        "postgresql+psycopg://gw:pw@127.0.0.1:1/broker"
        if store.postgres
        else f"sqlite+aiosqlite:///{tmp_path / 'no-such-folder' / 'broker.db'}"
    )
    down = create_async_engine(gone)
    waiting = asyncio.create_task(env.call("dev", "wait_for_message", {"timeout_sec": 10}))
    await asyncio.sleep(0.3)  # the wait has looked once and waits
    store.engine = down
    try:
        calls: list[tuple[str, str, dict[str, Any]]] = [
            ("pm", "get_pipeline_status", {}),
            ("pm", "start_phase", {"phase": 1, "issues": ["JOP-1"]}),
            ("pm", "send_message", {"to": "dev", "subject": "lost?", "body": {}}),
        ]
        for agent, tool, args in calls:
            error = await env.err(agent, tool, args)
            assert error["reason"] == "upstream_error", (tool, error)
            assert error["message"].startswith("The broker's database could not serve this call right now")
            assert error["message"].endswith("Nothing was changed: call again in a moment.")
        error = await env.err("reviewer", "wait_for_message", {"timeout_sec": 0})
        assert "No message was taken from your queue" in error["message"]
        failure = await env.broker.database_failure(2)  # what /readyz reports
        assert failure is not None and failure.startswith(f"the broker database {store.where} failed: ")
        await asyncio.sleep(0.5)  # several re-checks of the open wait fail meanwhile
        assert not waiting.done()
    finally:
        store.engine = working
        await down.dispose()
    await env.ok("pm", "send_message", {"to": "dev", "subject": "after", "body": {}})
    result = await asyncio.wait_for(waiting, 5)
    assert not result.is_error and result.structured["message"]["subject"] == "after"
    assert (await env.status())["state"] == "IDLE"
    assert await env.broker.database_failure(2) is None
    # The open wait looked again every 0.1 s through the outage: the operator reads each failure
    # once (SQLite names its file, so the outage reads the same each time), and its end.
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "gateway.broker.store"]
    failures = [m for level, m in said if level == "WARNING"]
    assert 1 <= len(failures) <= 3 and len(set(failures)) == len(failures), said
    assert said[-1] == ("INFO", f"broker database {store.where} answers again"), said
