"""Activity logs: closed set of names, one line per entry, rotation by size, tail across files."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.broker.activity_log import ActivityLogs, UnknownLog


async def test_rotation_and_tail(tmp_path: Path) -> None:
    logs = ActivityLogs(tmp_path / "logs", ["pm", "dev"], max_bytes=1024, backups=2)
    for i in range(100):
        logs.append("dev", "2026-01-01T00:00:00Z", "dev", f"entry {i:03d} " + "x" * 40)
    files = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert files == ["dev.log", "dev.log.1", "dev.log.2"]
    assert all((tmp_path / "logs" / f).stat().st_size <= 1024 for f in files)
    tail = await logs.tail("dev", 30)
    assert len(tail) == 30
    assert tail[-1].startswith("2026-01-01T00:00:00Z [dev] entry 099 ")
    numbers = [int(line.split()[3]) for line in tail]
    assert numbers == list(range(70, 100))
    logs.close()


@pytest.mark.parametrize("name", ["../../etc/passwd", "dev/../pm", "", "PM", "pipeline.log", "/etc/passwd"])
async def test_names_outside_the_set(tmp_path: Path, name: str) -> None:
    logs = ActivityLogs(tmp_path / "logs", ["pm", "dev"], max_bytes=1024, backups=1)
    with pytest.raises(UnknownLog):
        logs.append(name, "t", "x", "y")
    with pytest.raises(UnknownLog):
        await logs.tail(name, 5)
    assert list((tmp_path / "logs").iterdir()) == []


async def test_tail_of_empty_log(tmp_path: Path) -> None:
    logs = ActivityLogs(tmp_path / "logs", ["pm"], max_bytes=1024, backups=1)
    assert await logs.tail("pipeline", 5) == []


def test_the_lines_of_the_files_come_back_oldest_first_across_rotations(tmp_path: Path) -> None:
    # What a database from before logs were kept in it is given at start.
    logs = ActivityLogs(tmp_path / "logs", ["pm", "dev"], max_bytes=1024, backups=2)
    for i in range(40):
        logs.append("dev", "2026-01-01T00:00:00Z", "dev", f"entry {i:03d} " + "x" * 40)
    logs.append("pipeline", "2026-01-01T00:00:01Z", "broker", "multi\nline")
    logs.close()
    lines = logs.lines_in_files()
    dev = [text.split()[1] for name, _, _, text in lines if name == "dev"]
    assert dev == [f"{i:03d}" for i in range(40 - len(dev), 40)]  # the oldest rotated out
    assert len(dev) > 20  # read from dev.log.2, dev.log.1 and dev.log
    assert ("pipeline", "2026-01-01T00:00:01Z", "broker", "multi\nline") in lines
