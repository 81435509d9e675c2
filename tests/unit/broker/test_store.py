"""The SQLite store: pragmas, migrations with a version number, refusal of a newer schema."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gateway.broker.store import SCHEMA_VERSION, Store, StoreError


async def test_pragmas_and_version(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "broker.db")
    try:
        assert await store.schema_version() == SCHEMA_VERSION
        async with store.read() as q:
            assert (await q._one("PRAGMA journal_mode"))[0] == "wal"
            assert (await q._one("PRAGMA synchronous"))[0] == 1  # NORMAL
            assert (await q._one("PRAGMA busy_timeout"))[0] == 5000
            assert (await q.pipeline()).state.value == "IDLE"
    finally:
        await store.close()
    # reopening migrates nothing twice and keeps the data
    store = await Store.open(tmp_path / "broker.db")
    assert await store.schema_version() == SCHEMA_VERSION
    await store.close()


async def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "broker.db"
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match="newer than this gateway's"):
        await Store.open(path)


async def test_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "broker.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="cannot be used as the broker database"):
        await Store.open(path)


async def test_failed_change_rolls_back(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "broker.db")
    try:
        with pytest.raises(RuntimeError):
            async with store.write() as q:
                await q.replace_issues(["A", "B"])
                raise RuntimeError("boom")
        async with store.read() as q:
            assert await q.issues() == []
    finally:
        await store.close()
