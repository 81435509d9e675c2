"""Line windows over a text file: ``lines[offset:offset+limit]``, capped at 1 MiB per window.

Pure code (no I/O), shared by ``get_repository_file``. The contract is GitLab's own
``get_repository_file`` tool (gitlabhq
``app/services/mcp/tools/repositories/get_repository_file_tool.rb``):

- A line is what Ruby's ``String#lines`` yields: everything up to and including ``\\n``; ``\\r\\n``
  stays inside its line, a lone ``\\r`` is not a break, and a last line without ``\\n`` counts.
  An empty file has 0 lines.
- The window is ``lines[offset:offset+limit]``; then whole trailing lines are dropped until it
  fits in :data:`MAX_WINDOW_BYTES` (``dropped_lines``), and a single first line longer than the
  cap is cut (``line_cut``).

Where it beats GitLab: a cut line ends on a UTF-8 character boundary (GitLab byte-slices and
scrubs, which can leave replacement characters), and windows abut exactly, so reading a file in
windows of any size and joining the ``content`` of each gives the file back byte for byte
(unless a line had to be cut).

How: the file stays one ``bytes`` object. A sparse index holds the number of ``\\n`` before each
64 KiB block, built with ``bytes.count`` (C speed, about 1 ms per MiB); a line start is a binary
search over the blocks, then a halving search with ``bytes.count(sub, start, end)`` inside one
block. So a window of a 10 MiB, million-line file costs well under a millisecond once the file is
loaded, and memory is the file plus a few hundred integers, never one object per line.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from dataclasses import dataclass
from typing import Literal

#: Largest ``content`` of one window, in UTF-8 bytes (GitLab's ``MAX_WINDOW_BYTES = 1.megabyte``).
MAX_WINDOW_BYTES = 1024 * 1024

#: Why a window holds fewer bytes than its lines: GitLab's ``cap_reason`` values.
CapReason = Literal["line_cut", "dropped_lines"]

#: Bytes per block of the sparse line index.
BLOCK_BYTES = 64 * 1024
# Below this many bytes a linear ``find`` beats further halving.
_LINEAR_BYTES = 512


class TextFile:
    """A text file as UTF-8 bytes, with a sparse index of its line breaks.

    Immutable once built, so one instance can be cached and shared by concurrent reads. (No
    ``__slots__``: the cache's size estimate walks ``__dict__`` to count :attr:`data`.)

    Args:
        data: the file's bytes (UTF-8).
        block_bytes: block size of the index (tests use small ones).

    Attributes:
        data: the file's bytes.
        total_lines: number of lines (a last line without ``\\n`` counts; an empty file has 0).
        breaks: ``\\n`` count in ``data`` up to the end of each block (cumulative).
    """

    def __init__(self, data: bytes, *, block_bytes: int = BLOCK_BYTES) -> None:
        self.data = data
        self.block_bytes = block_bytes
        running = 0
        breaks: array[int] = array("Q")
        for start in range(0, len(data), block_bytes):
            running += data.count(b"\n", start, start + block_bytes)
            breaks.append(running)
        self.breaks = breaks
        self.newlines = running
        self.total_lines = running + (1 if data and not data.endswith(b"\n") else 0)

    @classmethod
    def from_text(cls, text: str) -> TextFile:
        """Build from a decoded string (what GraphQL's ``rawTextBlob`` gives).

        Raises:
            UnicodeEncodeError: ``text`` holds lone surrogates, so it is not valid Unicode text.
        """
        return cls(text.encode("utf-8"))

    @property
    def size_bytes(self) -> int:
        """Length of :attr:`data` in bytes."""
        return len(self.data)

    def line_start(self, index: int) -> int:
        """Byte offset where zero-based line ``index`` starts; ``len(data)`` for ``index`` >= the
        number of lines (the end of the file)."""
        if index <= 0:
            return 0
        if index > self.newlines:
            return len(self.data)
        # The index-th "\n" (1-based) ends line index-1; the next line starts right after it.
        block = bisect_left(self.breaks, index)
        before = self.breaks[block - 1] if block else 0
        low = block * self.block_bytes
        high = min(low + self.block_bytes, len(self.data))
        return _nth_newline(self.data, index - before, low, high) + 1


def _nth_newline(data: bytes, nth: int, low: int, high: int) -> int:
    """Offset of the ``nth`` (1-based) ``\\n`` in ``data[low:high]``, which holds at least that many."""
    while high - low > _LINEAR_BYTES:
        middle = (low + high) // 2
        found = data.count(b"\n", low, middle)
        if found >= nth:
            high = middle
        else:
            nth -= found
            low = middle
    position = low - 1
    for _ in range(nth):
        position = data.find(b"\n", position + 1, high)
    return position


@dataclass(frozen=True)
class Window:
    """One window of a :class:`TextFile`.

    Attributes:
        content: the lines, joined exactly as in the file (line endings kept).
        offset: zero-based index of the first line asked for.
        limit: how many lines were asked for.
        line_count: lines in ``content`` (a cut line counts as one).
        total_lines: lines in the whole file.
        cap_reason: ``line_cut`` (one line longer than the cap, cut), ``dropped_lines`` (whole
            trailing lines left out to stay under the cap) or None.
    """

    content: str
    offset: int
    limit: int
    line_count: int
    total_lines: int
    cap_reason: CapReason | None

    @property
    def end(self) -> int:
        """Zero-based index just past the last returned line (the next window's offset)."""
        return self.offset + self.line_count

    @property
    def returned_lines(self) -> dict[str, int] | None:
        """``{"start", "end"}``, 1-based and inclusive, or None for an empty window."""
        if self.line_count == 0:
            return None
        return {"start": self.offset + 1, "end": self.end}

    @property
    def remaining(self) -> int:
        """Lines after this window."""
        return max(self.total_lines - self.end, 0)

    @property
    def next_offset(self) -> int | None:
        """Where to continue reading, or None when no lines remain."""
        return self.end if self.remaining > 0 else None

    @property
    def past_end(self) -> bool:
        """True when ``offset`` lies beyond the last line of a non-empty file."""
        return self.line_count == 0 and self.total_lines > 0


def window(file: TextFile, offset: int, limit: int, *, max_bytes: int = MAX_WINDOW_BYTES) -> Window:
    """Cut ``lines[offset:offset+limit]`` out of ``file``, at most ``max_bytes`` UTF-8 bytes long.

    Args:
        file: the file.
        offset: zero-based first line (>= 0); past the end gives an empty window.
        limit: lines wanted (>= 1).
        max_bytes: the byte cap (>= 4, so a cut line always keeps at least one character).

    Raises:
        ValueError: ``offset`` < 0, ``limit`` < 1 or ``max_bytes`` < 4.
    """
    if offset < 0 or limit < 1 or max_bytes < 4:
        raise ValueError(f"window(offset={offset}, limit={limit}, max_bytes={max_bytes}) is out of range")
    data = file.data
    total = file.total_lines
    first = min(offset, total)
    last = min(offset + limit, total)
    begin = file.line_start(first)
    end = file.line_start(last)
    if end - begin <= max_bytes:
        return Window(_decode(data, begin, end), offset, limit, last - first, total, None)
    # Too big: keep the lines whose "\n" falls inside the cap (each such line fits whole). Fewer
    # than last - first of them, or the whole window would have fit.
    fit = data.count(b"\n", begin, begin + max_bytes)
    if fit > 0:
        cut_at = data.rfind(b"\n", begin, begin + max_bytes) + 1
        return Window(_decode(data, begin, cut_at), offset, limit, fit, total, "dropped_lines")
    cut = begin + max_bytes
    while (data[cut] & 0xC0) == 0x80:  # a UTF-8 continuation byte: back off to a boundary
        cut -= 1
    return Window(_decode(data, begin, cut), offset, limit, 1, total, "line_cut")


def _decode(data: bytes, begin: int, end: int) -> str:
    # Boundaries are line starts or character boundaries, so the slice is always valid UTF-8.
    return data[begin:end].decode("utf-8")
