"""What every load benchmark here starts: the GitLab stand-in, the loopback GitLab stub in front
of it (``bench/stub.py``), and the processes under test, pinned and stopped together.

The server under test runs on CPU 0 (:data:`SERVER_CPU`); the load generator, the stand-in and
the stub on CPU 1 (:data:`LOAD_CPU`), so that the server's CPU per call is its own.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench.load import Clients, pin
from tests.e2e.harness import free_port
from tests.standin import dataset as ds
from tests.standin.fixtures import StandinProcess

REPO = Path(__file__).resolve().parents[1]
SERVER_CPU, LOAD_CPU = {0}, {1}
#: ``get_pipeline`` with 20 jobs: the call the tables measure.
PIPELINE_ARGS = {"id": ds.PROJECT_PATH, "pipeline_id": ds.PIPELINE_ID, "include": ["jobs"], "first": 20}


class Help(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """--help shows the module's docs as written (the rows and columns) and every default."""


def cache_root() -> Path:
    """Where the benchmarks keep what they install (the peer, the compared builds)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gitlab-mcp-gateway"


def _pinned(cmd: list[str]) -> list[str]:
    taskset = shutil.which("taskset")
    return [taskset, "-c", "0", *cmd] if taskset and (os.cpu_count() or 1) > 1 else cmd


def start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """``cmd`` started pinned to :data:`SERVER_CPU` (threads it starts inherit the pinning), its
    output appended to ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(_pinned(cmd), cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)


def _command_line(proc: subprocess.Popen[bytes]) -> str:
    """What ``proc`` runs, as a shell line to paste (``proc.args`` may also be bytes or paths)."""
    args = proc.args
    if isinstance(args, str | bytes | os.PathLike):
        return os.fsdecode(args)
    return shlex.join(os.fsdecode(arg) for arg in args)


async def wait_listening(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"{_command_line(proc)} exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
            )
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{_command_line(proc)} did not listen on {port}:\n{log.read_text()[-3000:]}")


@dataclass
class Rig:
    """The running stub and everything to stop at the end (:func:`rig`)."""

    workdir: Path
    clients: Clients
    #: The environment without the runner's own GitLab or gateway settings.
    env: dict[str, str]
    stub: subprocess.Popen[bytes]
    stub_url: str
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    async def upstream_count(self) -> int:
        """Requests the stub has answered so far."""
        async with self.clients.sessions[0].get(f"{self.stub_url}/__stub/count") as response:
            return int((await response.json())["requests"])


@asynccontextmanager
async def rig(workdir: Path) -> AsyncIterator[Rig]:
    """The stand-in and the stub, started; on exit every process in :attr:`Rig.procs` is stopped,
    then the stub and the stand-in, and the load generator's connections closed."""
    pin(os.getpid(), LOAD_CPU)
    standin = StandinProcess(workdir / "standin").start()
    clients = Clients()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        assert standin.proc is not None
        pin(standin.proc.pid, LOAD_CPU)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GITLAB_", "GATEWAY_"))}
        stub_port = free_port()
        cmd = [sys.executable, "-m", "bench.stub", "--port", str(stub_port), "--upstream", standin.url]
        stub = start(cmd, env, workdir / "stub.log")
        procs.append(stub)
        await wait_listening(stub_port, stub, workdir / "stub.log")
        pin(stub.pid, LOAD_CPU)
        running = Rig(workdir, clients, env, stub, f"http://127.0.0.1:{stub_port}", procs)
        yield running
    finally:
        await clients.close()
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        standin.stop()


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def interpreter(proc: subprocess.Popen[bytes] | None) -> str:
    """The Python that runs ``proc`` (the gateway), as the figures depend on it: a CPython built
    without profile-guided and link-time optimisation (pyenv's default build, for one) spends
    about 15% more CPU per call than Debian's or the official container image's."""
    if proc is None:
        return "unknown"
    try:
        exe = os.readlink(f"/proc/{proc.pid}/exe")
    except OSError:
        return "unknown"
    probe = subprocess.run(
        [exe, "-c", "import platform; print(platform.python_implementation(), platform.python_version())"],
        capture_output=True,
        text=True,
        check=False,
    )
    return f"{probe.stdout.strip() or 'Python'} at {exe}"
