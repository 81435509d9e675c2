"""The broker's files in the state folder (``state_dir``, ``GATEWAY_STATE_DIR``).

- ``broker.db``: the SQLite store (``gateway.broker.store``);
- ``broker.lock``: locked for the process's life, so one gateway at a time uses the folder;
- ``.stop-pipeline``: written when the pipeline stops, removed when a person starts over; found at
  start, it means STOPPED;
- ``operator.sock``: the running gateway's operator socket (mode 0600), through which the
  ``broker`` command line acts while the gateway holds the lock (``gateway.server.operator_socket``).

The activity logs live in ``logs/`` (``gateway.broker.activity_log``).
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path

from gateway.broker.store import StoreError

log = logging.getLogger(__name__)

STOP_FILE = ".stop-pipeline"
DB_FILE = "broker.db"
LOCK_FILE = "broker.lock"
OPERATOR_SOCKET = "operator.sock"
#: The longest path a Unix socket can be bound or reached at (``sun_path`` less its NUL).
_MAX_SOCKET_PATH = 107
#: What binding adds to the state folder's path: a private folder (``/.operator-XXXXXXXX``) and ``/s``.
_STAGING = len("/.operator-XXXXXXXX/s")


def socket_path_too_long(path: Path) -> bool:
    """``path`` (in the state folder) is too long to bind a Unix socket at, staging included."""
    return len(os.fsencode(path.parent)) + _STAGING > _MAX_SOCKET_PATH


class StateDirInUse(StoreError):
    """Another process holds the state folder's lock file."""


def lock_state_dir(state_dir: Path) -> int:
    """Hold an exclusive lock on ``<state_dir>/broker.lock`` for the process's life.

    Two gateways on one state folder would each hand out the same messages (leases and wake-ups
    are in-process). The kernel drops the lock when the process dies, ``kill -9`` included.

    Returns:
        The lock file's descriptor; closing it releases the lock.

    Raises:
        StateDirInUse: another process holds the lock.
        StoreError: the folder cannot be made or written.
    """
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as err:  # a file in the way, no permission, a read-only file system
        why = (
            "a file is in the way, not a folder"
            if isinstance(err, FileExistsError | NotADirectoryError)
            else err.strerror or str(err)
        )
        raise StoreError(
            f"the broker state folder {state_dir} cannot be used: {why} ({err.filename}). Give "
            "GATEWAY_STATE_DIR (or state_dir in the --config file) a folder "
            "this gateway's user can create and write"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StateDirInUse(
            f"another gateway is using the broker state folder {state_dir} (it holds {LOCK_FILE}); "
            "give each gateway its own GATEWAY_STATE_DIR"
        ) from None
    return fd


def write_stop_file(state_dir: Path, by: str | None, at: str) -> None:
    """Write ``<state_dir>/.stop-pipeline`` (``stopped by {by} at {at}``), for operators and scripts.

    A failure is logged, not raised: the database already says STOPPED; the file is a convenience.
    """
    path = state_dir / STOP_FILE
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(f"stopped by {by or 'unknown'} at {at}\n", encoding="utf-8")
    except OSError as err:
        log.error("could not write %s: %s", path, err)
