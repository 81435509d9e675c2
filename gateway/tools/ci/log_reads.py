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

**Tail** (``tail_lines``): the whole log streams by, but Python looks at it a chunk at a time, not
a line at a time: lines are counted with ``bytes.count`` (a raw line is one cleaned line unless it
holds a section marker), only the rare lines with a marker are cleaned as they pass (for the
sections and their line numbers), and the last raw chunks are held (:data:`MAX_TAIL_RAW_BYTES` at
most). When the log ends, only the lines returned are cleaned: at most :data:`MAX_TAIL_CHARS`
characters of them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal

from gateway.gitlab.job_log import LogCleaner, LogSection, clean_lines, split_lines

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
        lines: the number of lines in ``content``.
        bytes_read: raw bytes GitLab sent for this read: everything before the window's end (its
            log route has no ranged reads), the whole log for a tail.
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
    bytes_read: int = 0


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
        at = min(byte_offset, end_of_log)
        return LogRead("", [], at, at, total, False, bytes_read=pos)
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
        bytes_read=pos,
    )


#: The most raw bytes a tail holds while the log streams (and one chunk more): the lines it
#: returns are cleaned from them, so memory stays bounded whatever the log's size. Cleaned text
#: is never longer than its raw bytes, so this leaves room for :data:`MAX_TAIL_CHARS` of it
#: even where escapes make up three quarters of the raw log.
MAX_TAIL_RAW_BYTES = 4 * MAX_TAIL_CHARS
_MARKER = b"section_"
#: What follows every marker (``\\r\\e[0K``, or ``\\r\\e[K``): a CRLF or a progress bar's ``\\r`` is not it.
_MARKER_END = b"\r\x1b["
_BLOCK_BYTES = 16 * 1024


class _LineCounter:
    """Counts a streamed log's cleaned lines and finds its sections, looking at raw bytes only.

    A raw line without a section marker is one cleaned line whatever it holds (colours, ``\\r``
    redraws, erases: :mod:`gateway.gitlab.job_log`), so most of a log is counted with
    ``bytes.count``; only the few lines with a marker go through the cleaner, at their line
    numbers, for its sections. A marker ends with ``\\r\\e[0K``: a chunk without ``\\r`` (one
    ``memchr``), or without ``\\r\\e[``, holds none, and only the others are searched for
    ``section_`` (a marker cut between two chunks is seen through the line it leaves pending,
    which then holds its ``\\r`` or its ``section_``). A raw line longer
    than :data:`MAX_LINE_BYTES` is not held: without a marker only its last bytes are kept (it is
    still one line); with one, it is cleaned in pieces of that size.
    """

    def __init__(self) -> None:
        self.cleaner = LogCleaner()
        self.pending = bytearray()  # the raw bytes after the last newline
        self.pending_marker = False  # pending may hold a marker (its line is looked at when it ends)
        self.long_line = False  # pending is the end of a line longer than MAX_LINE_BYTES

    def feed(self, chunk: bytes) -> tuple[int, int]:
        """Count ``chunk``; returns its newlines and markers."""
        newlines = chunk.count(b"\n")
        if not newlines:
            self.pending_marker = self.pending_marker or b"\r" in chunk
            self.pending += chunk
            if len(self.pending) > MAX_LINE_BYTES:
                self._long_line()
            return 0, chunk.count(_MARKER)
        if not self.pending_marker and (chunk.find(b"\r") < 0 or _MARKER_END not in chunk):
            self.cleaner.emitted += newlines  # no marker: one cleaned line per raw line
            self.pending = bytearray(chunk[chunk.rfind(b"\n") + 1 :])
            self.pending_marker = b"\r" in self.pending  # a marker's end may be cut after its \r
            self.long_line = False
            return newlines, 0
        data = bytes(self.pending) + chunk  # a chunk with a \r: maybe a marker
        last = data.rfind(b"\n") + 1
        self._lines(data, last)
        self.pending = bytearray(data[last:])
        self.pending_marker = b"\r" in self.pending
        self.long_line = False
        return newlines, data.count(_MARKER)

    def finish(self) -> tuple[list[LogSection], int]:
        """Count the unterminated last line; the sections and the number of lines (where the
        last line cleans to nothing, the sections count it, as the cleaner does, and the lines do
        not, as :attr:`CleanedLog.lines` does not)."""
        empty_last = 0
        if self.pending:
            if self.long_line:
                self.cleaner.emitted += 1
            elif self.cleaner.feed(self.pending.decode("utf-8", "replace"))[-1:] == [""]:
                empty_last = 1
        return self.cleaner.finish(), self.cleaner.emitted - empty_last

    def _lines(self, data: bytes, end: int) -> None:
        """Count ``data[:end]`` (whole lines), cleaning those with a marker."""
        pos = 0
        marker = data.find(_MARKER, 0, end)
        while marker >= 0:
            line_start = data.rfind(b"\n", pos, marker) + 1 or pos
            line_end = data.find(b"\n", marker, end) + 1
            self.cleaner.emitted += data.count(b"\n", pos, line_start)
            self.cleaner.feed(data[line_start:line_end].decode("utf-8", "replace"))
            pos = line_end
            marker = data.find(_MARKER, pos, end)
        self.cleaner.emitted += data.count(b"\n", pos, end)

    def _long_line(self) -> None:
        if _MARKER in self.pending:
            while len(self.pending) > MAX_LINE_BYTES:
                cut = _char_boundary(self.pending, MAX_LINE_BYTES)
                self.cleaner.feed(self.pending[:cut].decode("utf-8", "replace"))
                del self.pending[:cut]
        else:
            del self.pending[: -(len(_MARKER) - 1)]  # enough to see a marker that straddles
            self.long_line = True
        self.pending_marker = b"\r" in self.pending


class _RawTail:
    """The stream's last chunks, as raw bytes: enough for the last ``lines`` cleaned lines, at
    most :data:`MAX_TAIL_RAW_BYTES` (and one chunk) of them. Small chunks are joined into blocks
    of :data:`_BLOCK_BYTES` first, so that a stream of tiny chunks cannot fill memory with them."""

    def __init__(self, lines: int) -> None:
        self.wanted = lines
        self.chunks: deque[tuple[bytes, int, int]] = deque()  # (bytes, newlines, markers)
        self.size = self.newlines = self.markers = 0
        self.start = 0  # raw offset of chunks[0]
        self.after_newline = True  # the byte before chunks[0] is a newline (or there is none)
        self.block = bytearray()  # small chunks not yet in chunks, after them
        self.block_counts = [0, 0]

    def add(self, chunk: bytes, newlines: int, markers: int) -> None:
        if len(chunk) < _BLOCK_BYTES:
            self.block += chunk
            self.block_counts[0] += newlines
            self.block_counts[1] += markers
            if len(self.block) < _BLOCK_BYTES:
                return
            self._flush()
            return
        self._flush()
        self._push(chunk, newlines, markers)

    def _flush(self) -> None:
        if self.block:
            self._push(bytes(self.block), *self.block_counts)
            self.block.clear()
            self.block_counts = [0, 0]

    def _push(self, chunk: bytes, newlines: int, markers: int) -> None:
        self.chunks.append((chunk, newlines, markers))
        self.size += len(chunk)
        self.newlines += newlines
        self.markers += markers
        while len(self.chunks) > 1:
            first, lines, marks = self.chunks[0]
            # Lines left without the first chunk: a line with a marker may clean to none, and
            # the first line held may have begun before.
            left = self.newlines - lines - (self.markers - marks) - 1
            if left < self.wanted and self.size - len(first) < MAX_TAIL_RAW_BYTES:
                return
            self.chunks.popleft()
            self.size -= len(first)
            self.newlines -= lines
            self.markers -= marks
            self.start += len(first)
            self.after_newline = first.endswith(b"\n")

    def last_lines(self) -> tuple[list[str], int, CapReason | None]:
        """The last cleaned lines (each ending with ``\\n`` but an unterminated last one), the
        raw offset of the first, and what cut them; only the lines returned are cleaned."""
        self._flush()
        raw = b"".join(chunk for chunk, _, _ in self.chunks)
        partial_first = self.start > 0 and not self.after_newline
        cleaner = LogCleaner()
        picked: list[list[str]] = []
        kept = chars = 0
        first = len(raw)
        cap: CapReason | None = None
        end = len(raw)
        while end > 0 and kept < self.wanted:
            begin = raw.rfind(b"\n", 0, end - 1) + 1
            if begin == 0 and partial_first:
                if kept:
                    cap = cap or "max_chars"  # the line began before what could be held
                    break
                begin = _char_start(raw, end - MAX_TAIL_CHARS)
                cap = "line_cut"
            out = cleaner.feed(raw[begin:end].decode("utf-8", "replace"))[-(self.wanted - kept) :]
            if out[-1:] == [""]:  # an unterminated last line that cleans to nothing is no line
                out.pop()
            size = sum(len(line) for line in out)
            if kept and chars + size > MAX_TAIL_CHARS:
                cap = cap or "max_chars"
                break
            if size > MAX_TAIL_CHARS:  # one line longer than a tail may be: its end
                out = [out[-1][-MAX_TAIL_CHARS:]]
                size, cap = len(out[0]), "line_cut"
            picked.append(out)
            kept += len(out)
            chars += size
            first = begin
            end = begin
        lines = [line for out in reversed(picked) for line in out]
        return lines, self.start + first, cap


def _char_start(data: bytes, at: int) -> int:
    """The first index >= ``at`` (and >= 0) that starts a UTF-8 character."""
    i = max(0, at)
    while i < len(data) and i - at < 4 and (data[i] & 0xC0) == 0x80:
        i += 1
    return i


async def read_tail(chunks: AsyncIterator[bytes], lines: int) -> LogRead:
    """The last ``lines`` cleaned lines, and every section of the log (see the module)."""
    counter = _LineCounter()
    tail = _RawTail(lines)
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        tail.add(chunk, *counter.feed(chunk))
    sections, total_lines = counter.finish()
    kept, start, cap = tail.last_lines()
    if cap is None and len(kept) < min(lines, total_lines):
        cap = "max_chars"
    return LogRead(
        content="".join(kept),
        sections=sections,
        start=start if kept else size,
        end=size,
        total_bytes=size,
        more=False,
        first_line=total_lines - len(kept) + 1,
        total_lines=total_lines,
        cap_reason=cap,
        lines=len(kept),
        bytes_read=size,
    )
