"""The tests' PostgreSQL server ends with the process that started it, however that one ends."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import pg_server
from tests.conftest import REPO

pytestmark = [
    pytest.mark.skipif(
        not pg_server.available(), reason="PostgreSQL 15 (Debian's postgresql-15) is not installed"
    ),
    pytest.mark.spawns_process(
        reason="tests the starter of the PostgreSQL server: initdb, pg_ctl, its watchdog"
    ),
]

#: A process that starts a server, says where, and then waits to be killed. Ctrl-C stops it even
#: where the suite runs with SIGINT ignored (a background job of a shell without job control
#: passes that on to every process it starts), as it stops a pytest run in a terminal.
STARTER = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
from tests.pg_server import PostgresServer
server = PostgresServer.start()
print(server.port, server.folder, flush=True)
time.sleep(600)
"""


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _gone(port: int, folder: Path, *, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not _accepts(port) and not folder.exists():
            return True
        time.sleep(0.2)
    return False


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_server_stops_when_the_process_that_started_it_is_killed(how: signal.Signals) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", STARTER],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # the KeyboardInterrupt's traceback
        text=True,
        start_new_session=True,
    ) as starter:
        try:
            assert starter.stdout is not None
            port_text, folder_text = starter.stdout.readline().split()
            port, folder = int(port_text), Path(folder_text)
            assert _accepts(port)
            # Ctrl-C reaches the whole foreground process group; SIGKILL leaves no cleanup to anyone.
            os.killpg(starter.pid, how)
            starter.wait(timeout=10)
            assert _gone(port, folder, within=30), f"PostgreSQL on port {port} outlived its starter"
        finally:
            if starter.poll() is None:
                starter.kill()


def test_stop_stops_the_server_and_removes_its_folder() -> None:
    server = pg_server.PostgresServer.start()
    assert _accepts(server.port)
    server.stop()
    assert not _accepts(server.port)
    assert not server.folder.exists()
