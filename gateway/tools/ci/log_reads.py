"""A job log read as it streams from GitLab: a byte window, or the last lines, cleaned.

GitLab serves a log whole (``GET /projects/:id/jobs/:job_id/trace``); these readers keep only
what they return, so memory stays bounded whatever the log's size, and a window stops reading
GitLab's answer as soon as it is full.

**Byte windows** are offsets in the raw log (what GitLab stores, escapes included): stable while a
running job appends. The window rule, so that cleaning each window on its own and joining the
results gives exactly the cleaned whole log:

- A window that does not reach the end of the log ends after its last ``\\n``: the next window
  starts on a fresh line, so no escape sequence, ``\\r`` overwrite or section marker is split.
  ``returned.end`` is that real end, and the next call's ``byte_offset``.
- A single line longer than ``byte_limit`` cannot end on a line boundary: it is cut at the last
  whole UTF-8 character and ``cap_reason`` says ``line_cut`` (only there may a ``\\r`` overwrite
  show both states).
- A running job's log ends with the line it is writing: a window that reaches the end stops
  before that unfinished line (when it holds any whole line), so it is read whole next time.
- A ``byte_offset`` inside a multi-byte character starts at the next character.

**Tail** (``tail_lines``): the whole log streams through the cleaner (sections found everywhere,
lines counted) while only the last lines are kept, at most :data:`MAX_TAIL_CHARS` characters of
them. A raw line longer than :data:`MAX_LINE_BYTES` is taken in pieces of that size.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal

from gateway.gitlab.job_log import STRIP_BYTES, LogCleaner, LogSection, clean_lines, needs_cursor, split_lines

#: The most characters of cleaned lines a tail returns (and holds while it streams).
MAX_TAIL_CHARS = 500_000
#: A raw line longer than this (no newline) is cleaned in pieces, so one line cannot fill memory.
MAX_LINE_BYTES = 1024 * 1024

CapReason = Literal["line_cut", "max_chars"]


@dataclass
class LogRead:
    """One read of a log.

    Attributes:
        content: the cleaned lines.
        sections: sections met by the read; line numbers count from the read's origin (the
            window's start for a window, the log's start for a tail).
        start: raw byte offset of ``content``'s first byte.
        end: raw byte offset just past ``content``'s last byte.
        total_bytes: the log's size, when known (GitLab sent ``Content-Length``, or the read
            reached the end).
        more: raw bytes remain after ``end``.
        first_line: the number of ``content``'s first line, counted as the sections' are.
        total_lines: cleaned lines in the whole log (tails only).
        cap_reason: ``line_cut`` (a line longer than the window was cut) or ``max_chars`` (a tail
            returned fewer lines than asked, to stay under :data:`MAX_TAIL_CHARS`).
        unfinished_line: a running job's unfinished last line was left for the next read.
    """

    content: str
    sections: list[LogSection]
    start: int
    end: int
    total_bytes: int | None
    more: bool
    first_line: int = 1
    total_lines: int | None = None
    cap_reason: CapReason | None = None
    unfinished_line: bool = False
    lines: int = field(default=0)


def _char_boundary(data: bytes | bytearray, at: int) -> int:
    """The largest index <= ``at`` that starts a UTF-8 character (or ``at`` if none is near)."""
    i = at
    while i > 0 and at - i < 4 and i < len(data) and (data[i] & 0xC0) == 0x80:
        i -= 1
    return i if i > 0 else at


async def read_window(
    chunks: AsyncIterator[bytes],
    byte_offset: int,
    byte_limit: int,
    *,
    content_length: int | None,
    running: bool,
) -> LogRead:
    """The cleaned window of at most ``byte_limit`` raw bytes from ``byte_offset`` (see the module)."""
    buf = bytearray()
    pos = 0  # raw bytes seen
    want = byte_limit + 4  # enough to skip a split character's tail and see that more remains
    eof = True
    async for chunk in chunks:
        if pos + len(chunk) <= byte_offset:
            pos += len(chunk)
            continue
        piece = chunk[max(0, byte_offset - pos) :]
        pos += len(chunk)
        buf += piece
        if len(buf) >= want:
            eof = False
            break
    total = content_length if content_length is not None else (pos if eof else None)
    if pos <= byte_offset and eof:
        end_of_log = max(pos, 0)
        return LogRead("", [], min(byte_offset, end_of_log), min(byte_offset, end_of_log), total, False)
    skip = 0
    if byte_offset > 0:
        while skip < min(3, len(buf)) and (buf[skip] & 0xC0) == 0x80:
            skip += 1
    data = bytes(buf[skip:])
    start = byte_offset + skip
    cap: CapReason | None = None
    unfinished = False
    if len(data) > byte_limit:
        window = data[:byte_limit]
        more = True
        newline = window.rfind(b"\n")
        if newline >= 0:
            window = window[: newline + 1]
        else:
            window = window[: _char_boundary(data, byte_limit)]
            cap = "line_cut"
    else:
        window = data
        more = False
        if running and not window.endswith(b"\n"):
            newline = window.rfind(b"\n")
            if newline >= 0:
                window = window[: newline + 1]
                more = unfinished = True
    cleaned = clean_lines(split_lines(window.decode("utf-8", "replace")))
    return LogRead(
        content=cleaned.text,
        sections=cleaned.sections,
        start=start,
        end=start + len(window),
        total_bytes=total,
        more=more,
        cap_reason=cap,
        unfinished_line=unfinished,
        lines=len(cleaned.lines),
    )


class _Tail:
    """The last cleaned lines, with the raw byte range each came from."""

    def __init__(self, lines: int) -> None:
        self.wanted = lines
        self.lines: deque[tuple[int, int, str | bytes]] = deque()
        self.chars = 0

    def add(self, start: int, end: int, text: str | bytes) -> None:
        """Keep a cleaned line, or a raw one that needs only :data:`STRIP_BYTES` (applied to the
        lines kept at the end, so the many dropped on the way cost nothing)."""
        self.lines.append((start, end, text))
        self.chars += len(text)
        while len(self.lines) > self.wanted or (self.chars > MAX_TAIL_CHARS and len(self.lines) > 1):
            self.chars -= len(self.lines.popleft()[2])


def _plain_region(cleaner: LogCleaner, tail: _Tail, region: bytes, start: int) -> None:
    """Whole lines (``region`` ends with ``\\n``) that need no cursor and hold no marker: each is
    one cleaned line, so they are counted, and only the last ones that can be kept are cleaned."""
    count = region.count(b"\n")
    cleaner.emitted += count
    bounds: list[tuple[int, int]] = []
    end = len(region)
    for _ in range(min(count, tail.wanted)):
        begin = region.rfind(b"\n", 0, end - 1) + 1
        bounds.append((begin, end))
        end = begin
    for begin, finish in reversed(bounds):
        tail.add(start + begin, start + finish, region[begin:finish])  # cleaned if it is kept


async def read_tail(chunks: AsyncIterator[bytes], lines: int) -> LogRead:
    """The last ``lines`` cleaned lines, and every section of the log (see the module)."""
    cleaner = LogCleaner()
    tail = _Tail(lines)
    pending = bytearray()
    pending_start = 0  # raw offset of pending[0]
    line_cut = False

    def feed(raw: bytes, start: int) -> None:
        for text in cleaner.feed(raw.decode("utf-8", "replace")):
            tail.add(start, start + len(raw), text)

    async for chunk in chunks:
        pending += chunk
        last = pending.rfind(b"\n")
        if last < 0:
            while len(pending) > MAX_LINE_BYTES:
                cut = _char_boundary(pending, MAX_LINE_BYTES)
                feed(bytes(pending[:cut]), pending_start)
                del pending[:cut]
                pending_start += cut
                line_cut = True
            continue
        region = bytes(pending[: last + 1])
        del pending[: last + 1]
        if not needs_cursor(region):
            # Colours at most, no section marker, no cursor move: every raw line is one cleaned
            # line, so only the last ones are looked at (most of a large log is such regions).
            _plain_region(cleaner, tail, region, pending_start)
        else:
            offset = pending_start
            for raw in region.split(b"\n")[:-1]:
                feed(raw + b"\n", offset)
                offset += len(raw) + 1
        pending_start += len(region)
    if pending:
        feed(bytes(pending), pending_start)
        pending_start += len(pending)
    sections = cleaner.finish()
    total_lines = cleaner.emitted
    kept = list(tail.lines)
    content = "".join(
        STRIP_BYTES.sub(b"", text).decode("utf-8", "replace") if isinstance(text, bytes) else text
        for _, _, text in kept
    )
    start = kept[0][0] if kept else pending_start
    cap: CapReason | None = "line_cut" if line_cut else None
    if len(kept) < min(lines, total_lines):
        cap = "max_chars"
    return LogRead(
        content=content,
        sections=sections,
        start=start,
        end=pending_start,
        total_bytes=pending_start,
        more=False,
        first_line=total_lines - len(kept) + 1,
        total_lines=total_lines,
        cap_reason=cap,
        lines=len(kept),
    )
