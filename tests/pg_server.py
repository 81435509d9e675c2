"""A throwaway PostgreSQL 15 server from Debian's packages, for the tests and benchmarks.

PostgreSQL refuses to run as root (``pg_ctl: cannot be run as root``) and CI runs as root, so
``initdb`` and ``pg_ctl`` run as the ``postgres`` user (``runuser``) when this process is root.
The cluster lives in a temporary folder that user owns, listens on 127.0.0.1 on a free port with
fsync off (nothing here needs to survive a power cut), and takes passwords over TCP
(scram-sha-256), so a wrong password is refused as in production.

``pg_ctl`` detaches the server from the process that started it, so a pytest run killed by
Ctrl-C or SIGKILL would leave it running: a watchdog (this file run as a script, in its own
session so Ctrl-C does not reach it) holds the read end of a pipe only the starting process
writes to, and stops the server and removes its folder when that end reads EOF, which is when
:meth:`PostgresServer.stop` closes it or the starting process dies, however it dies.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

BIN = Path(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))
SUPERUSER = "postgres"
PASSWORD = "test-password-1f3a"


def available() -> bool:
    """Debian's PostgreSQL 15 binaries are installed."""
    return (BIN / "initdb").exists() and (BIN / "pg_ctl").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(args: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *args]
    return args


@dataclass
class PostgresServer:
    """One running cluster; :meth:`create_database` gives each test its own database."""

    folder: Path
    port: int
    watchdog: subprocess.Popen[bytes]
    databases: list[str] = field(default_factory=list)

    @classmethod
    def start(cls) -> PostgresServer:
        """initdb + pg_ctl start (fsync off), waiting until it accepts connections."""
        folder = Path(tempfile.mkdtemp(prefix="gateway-pg-"))
        # Watching before the server exists: no moment where it could run unwatched.
        watchdog = subprocess.Popen(
            [sys.executable, __file__, str(folder)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        server = cls(folder=folder, port=0, watchdog=watchdog)
        try:
            server._init_and_start()
        except BaseException:
            server.stop()
            raise
        return server

    def _init_and_start(self) -> None:
        folder = self.folder
        data, sock = folder / "data", folder / "sock"
        sock.mkdir()
        pwfile = folder / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if os.geteuid() == 0:
            shutil.chown(folder, "postgres", "postgres")
            for p in (sock, pwfile):
                shutil.chown(p, "postgres", "postgres")
        subprocess.run(
            _as_postgres(
                [
                    str(BIN / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    SUPERUSER,
                    f"--pwfile={pwfile}",
                    "--auth-local=trust",
                    "--auth-host=scram-sha-256",
                    "-E",
                    "UTF8",
                    "--no-sync",
                ]
            ),
            check=True,
            capture_output=True,
        )
        self.port = _free_port()
        self.resume()

    def resume(self) -> None:
        """Start the server again after :meth:`halt` (same folder, same port); returns once it
        accepts connections."""
        folder = self.folder
        opts = (
            f"-p {self.port} -k {folder / 'sock'} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300 -c shared_buffers=32MB"
        )
        subprocess.run(
            _as_postgres(
                [
                    str(BIN / "pg_ctl"),
                    "-D",
                    str(folder / "data"),
                    "-o",
                    opts,
                    "-l",
                    str(folder / "log"),
                    "-w",
                    "-t",
                    "60",
                    "start",
                ]
            ),
            check=True,
            capture_output=True,
        )

    def halt(self) -> None:
        """Stop the server as an outage would (``pg_ctl stop -m fast``: every session is ended),
        keeping its data for :meth:`resume`."""
        subprocess.run(
            _as_postgres([str(BIN / "pg_ctl"), "-D", str(self.folder / "data"), "-m", "fast", "-w", "stop"]),
            check=True,
            capture_output=True,
        )

    def url(self, database: str = "postgres", *, password: str = PASSWORD, user: str = SUPERUSER) -> str:
        """``postgresql://postgres:…@127.0.0.1:PORT/database``."""
        return f"postgresql://{user}:{password}@127.0.0.1:{self.port}/{database}"

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run ``sql`` with psql over the socket (trust), returning its output."""
        out = subprocess.run(
            _as_postgres(
                [
                    str(BIN / "psql"),
                    "-h",
                    str(self.folder / "sock"),
                    "-p",
                    str(self.port),
                    "-U",
                    SUPERUSER,
                    "-d",
                    database,
                    "-v",
                    "ON_ERROR_STOP=1",
                    "-qAtc",
                    sql,
                ]
            ),
            check=True,
            capture_output=True,
            text=True,
        )
        return out.stdout

    def execute(self, sql: str, database: str = "postgres") -> None:
        """Run one statement as the superuser over TCP, outside a transaction (``CREATE
        DATABASE`` needs that): in this process, where :meth:`psql` starts one per call."""
        import psycopg

        with psycopg.connect(self.url(database), autocommit=True, connect_timeout=30) as conn:
            conn.execute(sql.encode())

    def create_database(self, template: str | None = None) -> str:
        """A fresh database, empty or a copy of ``template`` (which nobody may be connected to); its name."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        self.execute(f"CREATE DATABASE {name}" + (f" TEMPLATE {template}" if template else ""))
        self.databases.append(name)
        return name

    def drop_database(self, name: str) -> None:
        """Drop ``name``, ending its connections (best effort)."""
        import psycopg

        with contextlib.suppress(psycopg.Error):
            self.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def stop(self) -> None:
        """Have the watchdog stop the server (fast) and remove the folder, and wait for it."""
        assert self.watchdog.stdin is not None
        self.watchdog.stdin.close()
        self.watchdog.wait(timeout=90)


def _stop(folder: Path) -> None:
    """pg_ctl stop (fast) and remove the folder; a server that is not running is no error."""
    subprocess.run(
        _as_postgres([str(BIN / "pg_ctl"), "-D", str(folder / "data"), "-m", "fast", "-w", "stop"]),
        check=False,
        capture_output=True,
    )
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":  # the watchdog: python tests/pg_server.py FOLDER, the pipe on stdin
    sys.stdin.buffer.read()
    _stop(Path(sys.argv[1]))
