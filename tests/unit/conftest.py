"""Unit tests run in the test process: one that starts another process fails, naming itself and
the command, unless it is marked ``spawns_process`` with the reason it must.

A child process costs what a whole unit test should (a Python start-up with its imports is
about half a second of CPU, a migration twice that), and a few of them per test made the suite
slow. In-process tests get a broker database already at the newest schema (``tests/conftest.py``
``broker_at_head_sqlite``), so opening a broker spawns no migration. The tests of something that
is a process (the migration child, ``--migrate``, a script, a tool the project runs) say so::

    pytestmark = pytest.mark.spawns_process(reason="runs scripts/run, as a user would")

A fixture shared beyond one test (session, module scope: the PostgreSQL server of
``tests/conftest.py``) may start processes while it is set up: that happens once per test
process, not per test.
"""

from __future__ import annotations

import asyncio
import multiprocessing.process
import os
import shlex
import subprocess
from collections.abc import Callable, Generator, Iterator
from typing import Any, TypeVar

import pytest

MARKER = "spawns_process"
#: Set while a fixture of a scope wider than one test is set up.
_shared_setups: list[str] = []

T = TypeVar("T")


class ProcessRefused(RuntimeError):
    """Raised where a unit test not marked ``spawns_process`` would have started a process."""


def _shown(command: object) -> str:
    if isinstance(command, str | bytes | os.PathLike):
        return os.fsdecode(command)
    if isinstance(command, list | tuple):
        return shlex.join(
            os.fsdecode(part) if isinstance(part, bytes | os.PathLike) else str(part) for part in command
        )
    return repr(command)


class _SharedFixtures:
    """Lifts the guard while a fixture shared beyond one test is set up. A plugin of its own, not
    a hook of this file: pytest asks a conftest's hooks about the fixtures of its folder only, and
    a session fixture belongs to the whole run."""

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef[Any]) -> Generator[None, T, T]:
        if fixturedef.scope == "function":
            return (yield)
        _shared_setups.append(fixturedef.argname)
        try:
            return (yield)
        finally:
            _shared_setups.pop()


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_SharedFixtures(), "unit-tests-shared-fixtures")


@pytest.fixture(autouse=True)
def _no_child_processes(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[str]]:
    """Refuse every way a test could start a process: ``subprocess`` (and what builds on it:
    ``asyncio``'s default loop, ``os.popen``), ``asyncio.create_subprocess_*`` (uvloop's loop spawns
    without ``subprocess``), ``os.fork``/``posix_spawn``/``system`` and ``multiprocessing``."""
    marker = request.node.get_closest_marker(MARKER)
    if marker is not None:
        reason = marker.kwargs.get("reason", marker.args[0] if marker.args else "")
        if not str(reason).strip():
            pytest.fail(
                f"{request.node.nodeid}: @pytest.mark.{MARKER} needs the reason the test must start a "
                f'process: @pytest.mark.{MARKER}(reason="...")',
                pytrace=False,
            )
        yield []
        return
    refused: list[str] = []

    def guarded(how: str, original: Callable[..., Any], command: Callable[..., object]) -> Callable[..., Any]:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            if _shared_setups:
                return original(*args, **kwargs)
            message = (
                f"{request.node.nodeid} started a process ({how}: {_shown(command(*args, **kwargs))}). "
                "Unit tests run in the test process: open the broker on a database at the newest "
                "schema (tests/conftest.py at_head, broker_database_at_head) rather than migrating "
                f'one; a test that must start a process is marked @pytest.mark.{MARKER}(reason="...")'
            )
            refused.append(message)
            raise ProcessRefused(message)

        return refuse

    def patch(target: object, name: str, how: str, command: Callable[..., object]) -> None:
        monkeypatch.setattr(target, name, guarded(how, getattr(target, name), command))

    patch(subprocess.Popen, "_execute_child", "subprocess", lambda self, args, *_, **__: args)
    for module in (asyncio, asyncio.subprocess):
        patch(module, "create_subprocess_exec", "asyncio.create_subprocess_exec", lambda *args, **_: args)
        patch(module, "create_subprocess_shell", "asyncio.create_subprocess_shell", lambda cmd, **_: cmd)
    for name in ("fork", "forkpty"):
        patch(os, name, f"os.{name}", lambda: "")
    for name in ("posix_spawn", "posix_spawnp"):
        patch(os, name, f"os.{name}", lambda path, argv, *_, **__: argv)
    patch(os, "system", "os.system", lambda cmd: cmd)
    patch(multiprocessing.process.BaseProcess, "start", "multiprocessing", lambda self: self.name)
    yield refused  # what was refused (the guard's own tests empty it)
    if refused:
        # Also when the code under test caught the refusal and the test passed anyway.
        pytest.fail(refused[0], pytrace=False)


#: The GitLab the unit tests' GitLab plays: the newest, whose schema they validate against
#: (tests/gitlab/gitlab_schema.graphql). A test of another version marks itself
#: ``@pytest.mark.gitlab_version("16.11.2", enterprise=False)``, or ``gitlab_version(None)`` for a
#: gateway that has not learnt it yet (it asks on the first call).
NEWEST_GITLAB = "19.4.0-ee"


@pytest.fixture(autouse=True)
def _gitlab_version(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.gitlab.instance import GitLabInstance, InstanceInfo

    marker = request.node.get_closest_marker("gitlab_version")
    version = marker.args[0] if marker is not None and marker.args else NEWEST_GITLAB
    if version is None:
        return
    info = InstanceInfo.of(version, marker.kwargs.get("enterprise") if marker is not None else None)
    original = GitLabInstance.__init__

    def known(self: GitLabInstance, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.learnt(info)

    monkeypatch.setattr(GitLabInstance, "__init__", known)
