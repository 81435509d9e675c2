"""Activity logs: one per agent and ``pipeline`` for the broker, kept in the database so that any
replica shows lines written through any other (``gateway.broker.queries``: ``activity_log``), and,
with the SQLite backend, also written to ``<state_dir>/logs/{agent}.log`` as files people tail.

Source: ``docs/broker.md`` ("log_activity", "get_activity_log"). A log name is only ever one of
the configured agent ids or ``pipeline``, checked against that closed set before any path is
built, and the final path is checked to sit inside the logs folder, so nothing a caller sends can
reach another file.

One activity is one line: ``2026-04-11T01:10:00Z [dev] text``; line breaks inside the text are
written as ``\\n`` so a caller cannot forge lines. Files rotate by size with the standard
library's :class:`logging.handlers.RotatingFileHandler` (``broker.log_max_bytes``,
``broker.log_backups``).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import deque
from collections.abc import Iterable
from logging.handlers import RotatingFileHandler
from pathlib import Path

from gateway.observability.log_text import escape_controls
from gateway.observability.logging import redact

PIPELINE_LOG = "pipeline"


class UnknownLog(ValueError):
    """The log name is neither a configured agent id nor ``pipeline``."""


def one_line(text: str) -> str:
    """``text`` with CR/LF escaped so it stays one log line, and every other control character
    (NUL, ESC...), line separator or lone surrogate escaped so it is never written raw."""
    escaped = text.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n")
    return escape_controls(escaped)


def format_line(at: str, who: str, text: str) -> str:
    """One activity as a line: ``2026-04-11T01:10:00Z [dev] text``."""
    return f"{at} [{one_line(who)}] {one_line(text)}"


_ESCAPES = {"\\\\": "\\", "\\n": "\n", "\\r": "\r"}


def _unescape(text: str) -> str:
    return re.sub(r"\\[\\nr]", lambda m: _ESCAPES[m.group(0)], text)


def parse_line(line: str) -> tuple[str, str, str] | None:
    """``(at, who, text)`` of a line :func:`format_line` wrote, or None for anything else."""
    at, sep, rest = line.partition(" [")
    who, sep2, text = rest.partition("] ")
    if not sep or not sep2:
        return None
    return at, _unescape(who), _unescape(text)


class ActivityLogs:
    """The rotating log files of one broker.

    Args:
        folder: ``<state_dir>/logs`` (created when missing).
        agents: the configured agent ids; with ``pipeline`` they are the only log names.
        max_bytes: a file rotates when a line would take it past this size.
        backups: rotated files kept (``dev.log.1`` … ``dev.log.N``).
    """

    def __init__(
        self, folder: Path, agents: Iterable[str], *, max_bytes: int, backups: int, files: bool = True
    ) -> None:
        self.folder = folder
        self.files = files
        self.names = (*agents, PIPELINE_LOG)
        self._max_bytes = max_bytes
        self._backups = backups
        self._handlers: dict[str, RotatingFileHandler] = {}
        if files:
            folder.mkdir(parents=True, exist_ok=True)

    def check(self, name: str) -> None:
        """Raises UnknownLog when ``name`` is not an agent id or ``pipeline``."""
        self.path(name)

    def write_files(self, lines: Iterable[tuple[str, str, str, str]]) -> None:
        """Append committed ``(log, at, who, text)`` lines to the files (SQLite backend only)."""
        if self.files:
            for name, at, who, text in lines:
                self.append(name, at, who, text)

    def lines_in_files(self) -> list[tuple[str, str, str, str]]:
        """The lines of the log files, oldest first, each ``(log, time, who, text)`` (a database
        from before logs were kept in it gets them at start)."""
        out: list[tuple[str, str, str, str]] = []
        for name in self.names:
            path = self.path(name)
            files = [path.with_name(f"{path.name}.{i}") for i in range(self._backups, 0, -1)]
            for file in [*files, path]:  # oldest first
                try:
                    text = file.read_text(encoding="utf-8", errors="replace")
                except FileNotFoundError:
                    continue
                for line in text.splitlines():
                    parsed = parse_line(line)
                    if parsed is not None:
                        out.append((name, *parsed))
        return out

    def path(self, name: str) -> Path:
        """The current file of log ``name``.

        Raises:
            UnknownLog: ``name`` is not an agent id or ``pipeline``.
        """
        if name not in self.names:
            raise UnknownLog(name)
        path = (self.folder / f"{name}.log").resolve()
        if path.parent != self.folder.resolve():  # a configured id can never do this; belt and braces
            raise UnknownLog(name)
        return path

    def _handler(self, name: str) -> RotatingFileHandler:
        handler = self._handlers.get(name)
        if handler is None:
            handler = RotatingFileHandler(
                self.path(name), maxBytes=self._max_bytes, backupCount=self._backups, encoding="utf-8"
            )
            handler.setFormatter(logging.Formatter("%(message)s"))
            self._handlers[name] = handler
        return handler

    def append(self, name: str, at: str, who: str, text: str) -> None:
        """Append ``{at} [{who}] {text}`` to log ``name`` (one line, flushed).

        A line is a few hundred bytes and the file is flushed, not synced, so writing on the
        event loop costs microseconds; rotation (a rename) is rare.

        Raises:
            UnknownLog: ``name`` is not an agent id or ``pipeline``.
        """
        # Redacted here as well as in the database: this file is what people tail and ship.
        record = logging.makeLogRecord({"msg": format_line(at, who, redact(text)), "levelno": logging.INFO})
        self._handler(name).handle(record)

    async def tail(self, name: str, lines: int) -> list[str]:
        """The last ``lines`` lines of log ``name``, oldest first, across rotated files.

        Raises:
            UnknownLog: ``name`` is not an agent id or ``pipeline``.
        """
        path = self.path(name)
        return await asyncio.to_thread(self._tail, path, lines)

    def _tail(self, path: Path, lines: int) -> list[str]:
        out: deque[str] = deque()
        files = [path, *(path.with_name(f"{path.name}.{i}") for i in range(1, self._backups + 1))]
        for file in files:  # newest first
            if len(out) >= lines:
                break
            try:
                text = file.read_text(encoding="utf-8", errors="replace")
            except FileNotFoundError:
                continue
            for line in reversed(text.splitlines()):
                if len(out) >= lines:
                    break
                out.appendleft(line)
        return list(out)

    def archive(self, generation: int) -> None:
        """Move the log files (rotated ones included) to ``logs/archive/pipeline-{generation}/``:
        an operator started over, and the next lines belong to the new pipeline. A failure is
        logged, not raised: the database holds the archived lines already."""
        if not self.files:
            return
        self.close()
        target = self.folder / "archive" / f"pipeline-{generation}"
        try:
            target.mkdir(parents=True, exist_ok=True)
            for name in self.names:
                for file in self.folder.glob(f"{name}.log*"):
                    file.rename(target / file.name)
        except OSError as err:
            logging.getLogger(__name__).error("could not archive the activity logs to %s: %s", target, err)

    def close(self) -> None:
        """Close every open file."""
        for handler in self._handlers.values():
            handler.close()
        self._handlers.clear()
