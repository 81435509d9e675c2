"""pytest fixtures for the GitLab stand-in, and the class that runs it as a process.

- ``standin`` (session): one stand-in process on a free loopback port; yields :class:`Standin`
  (``.url`` for ``GITLAB_URL``, ``.tokens``, ``.control``/``.acontrol``, ``.env()``). At the end
  of the session it fails the run if any invalid request reached it that no test reported yet.
- ``fresh_standin`` (function): the same object after a reset (seed data, empty request log, no
  faults); after the test it fails that test if an invalid request arrived during it.
- ``standin_subpath`` (session) / ``fresh_standin_subpath`` (function): a second process serving
  GitLab under ``/gitlab`` (``.url`` ends with ``/gitlab``), for sub-path deployments.

Use them from an e2e test module or conftest::

    from tests.standin.fixtures import fresh_standin, standin  # noqa: F401

    async def test_x(fresh_standin, start_gateway):
        gw = start_gateway(env=fresh_standin.env())
        ...
        assert fresh_standin.control.graphql_requests(field="project") == 1

A test that sends an invalid request on purpose wraps it in ``with standin.expect_invalid():``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.local_http import TLS
from tests.standin import dataset
from tests.standin.control import AsyncStandinControl, StandinControl

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Tokens:
    """The stand-in's tokens (see ``tests/standin/README.md``)."""

    alice: str = dataset.ALICE_TOKEN
    bob: str = dataset.BOB_TOKEN
    carol: str = dataset.CAROL_TOKEN
    revoked: str = dataset.REVOKED_TOKEN

    @property
    def default(self) -> str:
        """The default caller's token (alice)."""
        return self.alice


class StandinProcess:
    """``python -m tests.standin`` as a child process on a free port.

    Args:
        workdir: where the ready file and the log (``standin.log``) go.
        prefix: serve GitLab under this sub-path (``/gitlab``) or at the root (``""``).
        module: what to run, ``tests.standin`` or ``tests.standin.bands`` (many GitLab bands).
    """

    def __init__(
        self,
        workdir: Path,
        *,
        prefix: str = "",
        gitlab: tuple[str, str] | None = None,
        module: str = "tests.standin",
    ) -> None:
        self.workdir = workdir
        self.module = module
        self.prefix = prefix
        self.gitlab = gitlab
        """The GitLab version and edition to answer as (``("17.5", "ce")``); None: the newest EE."""
        self.ready_file = workdir / "ready.json"
        self.log_path = workdir / "standin.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.root = ""

    def start(self, timeout: float = 60.0) -> StandinProcess:
        """Start and wait for the ready file.

        Raises:
            RuntimeError: the process exited or did not become ready in time (its log included).
        """
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.ready_file.unlink(missing_ok=True)
        args = [sys.executable, "-m", self.module, "--port", "0", "--ready-file", str(self.ready_file)]
        if self.prefix:
            args += ["--prefix", self.prefix]
        if self.gitlab is not None:
            args += ["--gitlab-version", self.gitlab[0], "--gitlab-edition", self.gitlab[1]]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the GitLab stand-in exited with {self.proc.returncode}:\n{self.log()}")
            if self.ready_file.exists():
                info = json.loads(self.ready_file.read_text())
                self.url = info["url"]
                self.root = f"http://127.0.0.1:{info['port']}"
                return self
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"the GitLab stand-in was not ready after {timeout}s:\n{self.log()}")

    def log(self) -> str:
        """What the process wrote so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


@dataclass
class Standin:
    """A running stand-in, as the fixtures hand it to tests.

    Attributes:
        url: GitLab's base URL for the gateway (``GITLAB_URL``), sub-path included.
        root: the server's root (``http://127.0.0.1:N``), where ``/_standin`` lives.
        tokens: the known tokens; ``tokens.default`` is alice.
        control: the control API client; ``acontrol`` is the same as coroutines.
        data: :mod:`tests.standin.dataset` (ids, paths, file names, workflow ids).
    """

    url: str
    root: str
    process: StandinProcess
    control: StandinControl
    acontrol: AsyncStandinControl
    tokens: Tokens = field(default_factory=Tokens)
    data: Any = dataset
    _reported: set[int] = field(default_factory=set)

    @property
    def graphql_url(self) -> str:
        """``<url>/api/graphql``."""
        return f"{self.url}/api/graphql"

    @property
    def api_url(self) -> str:
        """``<url>/api/v4``."""
        return f"{self.url}/api/v4"

    def env(self, token: str | None = dataset.ALICE_TOKEN, **extra: str) -> dict[str, str]:
        """``start_gateway`` environment: ``GITLAB_URL``, and ``GITLAB_TOKEN`` unless ``token`` is None."""
        env = {"GITLAB_URL": self.url, **extra}
        if token is not None:
            env["GITLAB_TOKEN"] = token
        return env

    def headers(self, token: str | None = dataset.ALICE_TOKEN, *, bearer: bool = False) -> dict[str, str]:
        """Auth headers for a direct request to the stand-in."""
        if token is None:
            return {}
        return {"Authorization": f"Bearer {token}"} if bearer else {"PRIVATE-TOKEN": token}

    def graphql(
        self,
        query: str,
        variables: dict[str, Any] | None = None,
        *,
        token: str | None = dataset.ALICE_TOKEN,
        operation_name: str | None = None,
    ) -> httpx.Response:
        """POST a GraphQL document straight to the stand-in (no gateway)."""
        body: dict[str, Any] = {"query": query, "variables": variables or {}}
        if operation_name:
            body["operationName"] = operation_name
        return httpx.post(
            self.graphql_url, json=body, headers=self.headers(token), timeout=30, trust_env=False, verify=TLS
        )

    def rest(
        self,
        method: str,
        path: str,
        *,
        token: str | None = dataset.ALICE_TOKEN,
        params: dict[str, Any] | None = None,
    ) -> httpx.Response:
        """A REST request straight to the stand-in; ``path`` is below ``/api/v4`` and sent as given
        (encode project paths yourself: ``/projects/grp%2Fsub%2Fproj``)."""
        return httpx.request(
            method,
            f"{self.api_url}{path}",
            params=params,
            headers=self.headers(token),
            timeout=30,
            trust_env=False,
            verify=TLS,
        )

    def unreported_invalid(self) -> list[dict[str, Any]]:
        """Invalid requests no fixture has failed a test for yet (and marks them reported)."""
        fresh = [i for i in self.control.invalid() if i["seq"] not in self._reported]
        self._reported.update(i["seq"] for i in fresh)
        return fresh

    @contextmanager
    def expect_invalid(self) -> Iterator[list[dict[str, Any]]]:
        """For a test that sends a malformed request on purpose: yields a list that receives the
        invalid requests recorded inside the block; fails if there were none."""
        before = {i["seq"] for i in self.control.invalid()}
        got: list[dict[str, Any]] = []
        yield got
        got.extend(i for i in self.control.invalid() if i["seq"] not in before)
        self._reported.update(i["seq"] for i in got)
        if not got:
            pytest.fail("expected the stand-in to record an invalid request, and it recorded none")


def format_invalid(items: list[dict[str, Any]]) -> str:
    """One line per invalid request, for failure messages."""
    return "\n".join(
        f"  #{i['seq']} {i['method']} {i['path']}"
        + (f" (operation {i['operation_name']})" if i.get("operation_name") else "")
        + f": {i['reason']}"
        for i in items
    )


def start_standin(
    tmp_path_factory: pytest.TempPathFactory, prefix: str = "", *, gitlab: tuple[str, str] | None = None
) -> Standin:
    """A started stand-in process (GitLab ``gitlab`` = ``(version, edition)``, default the newest EE);
    stop it with :func:`finish_standin`."""
    proc = StandinProcess(tmp_path_factory.mktemp("standin"), prefix=prefix, gitlab=gitlab).start()
    control = StandinControl(proc.root)
    return Standin(
        url=proc.url, root=proc.root, process=proc, control=control, acontrol=AsyncStandinControl(control)
    )


def finish_standin(s: Standin) -> None:
    """Stop ``s``; fails the test if it received malformed requests no test reported."""
    try:
        leftover = s.unreported_invalid()
    finally:
        s.control.close()
        s.process.stop()
    if leftover:
        pytest.fail(
            f"The GitLab stand-in received {len(leftover)} request(s) GitLab would refuse as malformed "
            f"(log: {s.process.log_path}):\n{format_invalid(leftover)}",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standin]:
    """The GitLab stand-in (one process per test session), GitLab at the server's root."""
    s = start_standin(tmp_path_factory, "")
    yield s
    finish_standin(s)


@pytest.fixture(scope="session")
def standin_subpath(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standin]:
    """A second stand-in serving GitLab under ``/gitlab`` (``.url`` = ``http://127.0.0.1:N/gitlab``)."""
    s = start_standin(tmp_path_factory, "/gitlab")
    yield s
    finish_standin(s)


def _fresh(s: Standin) -> Iterator[Standin]:
    s.control.reset()
    # Invalid requests from earlier tests stay for the session teardown to report.
    before = {i["seq"] for i in s.control.invalid()}
    yield s
    new = [i for i in s.control.invalid() if i["seq"] not in before and i["seq"] not in s._reported]
    s._reported.update(i["seq"] for i in new)
    if new:
        pytest.fail(
            f"The GitLab stand-in received request(s) GitLab would refuse as malformed during this "
            f"test:\n{format_invalid(new)}",
            pytrace=False,
        )


@pytest.fixture
def fresh_standin(standin: Standin) -> Iterator[Standin]:
    """``standin`` reset to the seed data, with an empty request log and no faults."""
    yield from _fresh(standin)


@pytest.fixture
def fresh_standin_subpath(standin_subpath: Standin) -> Iterator[Standin]:
    """``standin_subpath`` reset like ``fresh_standin``."""
    yield from _fresh(standin_subpath)
