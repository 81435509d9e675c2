"""Start the real gateway as a process and talk to it with the official ``mcp`` SDK client."""

from __future__ import annotations

import functools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ContentBlock, TextContent

from tests.local_http import TLS
from tests.shipped import shipped

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@functools.cache
def migrated_sqlite_broker() -> Path:
    """A SQLite broker database at the newest schema, made once per process."""
    from gateway.broker import migrate
    from gateway.broker.database import engine_url

    folder = Path(tempfile.mkdtemp(prefix="broker-at-head-"))
    migrate.upgrade(engine_url(None, folder))
    return folder / "broker.db"


def gateway_command(python_args: list[str] | None = None) -> list[str]:
    """The command that starts the gateway as users install it: the console script
    ``gitlab-mcp-gateway`` of a virtualenv that holds the wheel built from this checkout
    (:mod:`tests.shipped`), or that virtualenv's Python with ``python_args`` before ``-m gateway``
    (the benchmarks' profiler)."""
    installed = shipped()
    if python_args:
        return [str(installed.python), *python_args, "-m", "gateway"]
    return [str(installed.console_script)]


class GatewayProcess:
    """The installed gateway (:func:`gateway_command`) in a subprocess, on a free loopback port,
    started from a folder outside the checkout (beside ``state_dir``).

    Args:
        env: extra environment (``GITLAB_URL``, ``GATEWAY_*``...); the parent's GITLAB_*/GATEWAY_*
            variables are not inherited.
        state_dir: ``GATEWAY_STATE_DIR``.
        args: extra command-line arguments.
    """

    def __init__(
        self,
        *,
        env: dict[str, str],
        state_dir: Path,
        args: list[str] | None = None,
        port: int | None = None,
        python_args: list[str] | None = None,
        command: list[str] | None = None,
    ) -> None:
        self.python_args = python_args or []  # e.g. ["-m", "cProfile", "-o", "out.prof"] (benchmarks)
        # Another build's console script (the benchmarks' comparison of two revisions); such a
        # build migrates its own broker database at first start.
        self.command = command
        self.port = port or free_port()
        self.state_dir = state_dir
        self.args = args or []
        self.log_path = state_dir.parent / f"gateway-{self.port}.log"
        base = {k: v for k, v in os.environ.items() if not k.startswith(("GITLAB_", "GATEWAY_"))}
        # The startup check's request would land in the stand-in's request log (and take faults
        # meant for a tool call) at a moment no test controls: off unless a test turns it on.
        quiet = {"GATEWAY_GITLAB__STARTUP_CHECK": "false"}
        self.env = {**base, "GATEWAY_STATE_DIR": str(state_dir), "PYTHONUNBUFFERED": "1", **quiet, **env}
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def mcp_url(self) -> str:
        return f"{self.url}/mcp"

    def start(self, timeout: float = 60.0) -> GatewayProcess:
        """Start and wait until ``/healthz`` answers.

        No test here asserts how fast a gateway starts (about 3 s of CPU, most of it imports): the
        wait is long enough for a start on a 2-core machine running three workers' tests at once.

        Raises:
            RuntimeError: the process exited or did not answer in time (its log is included).
        """
        self.state_dir.mkdir(parents=True, exist_ok=True)
        database = self.state_dir / "broker.db"
        if self.command is None and "GATEWAY_BROKER__DATABASE_URL" not in self.env and not database.exists():
            # As after the gateway's first start; spares each start its migration process (~1 s).
            # New databases are migrated by the tests of gateway/broker/migrate.py.
            shutil.copyfile(migrated_sqlite_broker(), database)
        with self.log_path.open("ab") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                [*(self.command or gateway_command(self.python_args)), "--port", str(self.port), *self.args],
                cwd=self.state_dir.parent,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=0.5, trust_env=False, verify=TLS) as http:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"gateway exited with {self.proc.returncode}:\n{self.log()}")
                try:
                    if http.get(f"{self.url}/healthz").status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"gateway did not become healthy in {timeout}s:\n{self.log()}")

    def log(self) -> str:
        """Everything the process wrote to stdout and stderr so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int | None:
        """Send ``sig`` and wait; returns the exit code (SIGKILL after ``timeout``)."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(5)

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        self.stop(signal.SIGKILL)


def text_of(block: ContentBlock) -> str:
    """The text of a content block; fails the test if the gateway sent another kind of block."""
    assert isinstance(block, TextContent), block
    return block.text


@asynccontextmanager
async def mcp_client(
    url: str,
    *,
    headers: dict[str, str] | None = None,
    mode: str = "auto",
    read_timeout: float | None = 60.0,
) -> AsyncIterator[Client]:
    """An initialized official SDK ``Client`` on ``url`` (Streamable HTTP).

    Args:
        headers: sent on every request (``X-Agent-Id``, ``PRIVATE-TOKEN``...).
        mode: ``auto`` (the SDK's default: ``server/discover`` first, so 2026-07-28 with this
            gateway) or ``legacy`` (a 2025-11-25 handshake only).
        read_timeout: per-request timeout in seconds (None: none).
    """
    http = httpx2.AsyncClient(headers=headers or {}, timeout=httpx2.Timeout(30.0, read=None), verify=TLS)
    async with (
        http,
        Client(
            streamable_http_client(url, http_client=http),
            mode=mode,
            read_timeout_seconds=read_timeout,
        ) as client,
    ):
        yield client
