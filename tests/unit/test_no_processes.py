"""The guard of ``tests/unit/conftest.py``: a unit test that starts a process fails, naming
itself and the command."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys

import pytest

from tests.unit.conftest import ProcessRefused


def test_subprocess_is_refused_naming_the_test_and_the_command(
    request: pytest.FixtureRequest, _no_child_processes: list[str]
) -> None:
    with pytest.raises(ProcessRefused) as refused:
        subprocess.run([sys.executable, "-c", "print('hello')"], check=False)
    assert str(refused.value).startswith(
        f"{request.node.nodeid} started a process (subprocess: {sys.executable} -c "
    )
    assert "spawns_process" in str(refused.value)
    _no_child_processes.clear()  # else the test fails at teardown, as one that swallowed it does


async def test_asyncio_subprocesses_and_fork_are_refused(_no_child_processes: list[str]) -> None:
    with pytest.raises(ProcessRefused, match=re.escape("asyncio.create_subprocess_exec: git status")):
        await asyncio.create_subprocess_exec("git", "status")
    with pytest.raises(ProcessRefused, match=re.escape("os.fork")):
        os.fork()
    assert len(_no_child_processes) == 2
    _no_child_processes.clear()


@pytest.mark.spawns_process(reason="shows that the mark lets a test start a process")
def test_a_marked_test_may_start_one() -> None:
    assert subprocess.run([sys.executable, "-c", "pass"], check=False).returncode == 0
