"""Line windows over a text file: ``lines[offset:offset+limit]``, capped at 1 MiB per window.

Pure code (no I/O), shared by ``get_repository_file``. The contract is GitLab's own
``get_repository_file`` tool (``shared/spec/gitlab_facts.md`` §2.4; gitlabhq
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
(unless a line had to be cut). Slicing works on UTF-8 bytes with a precomputed index of line
starts, so a window of a 10 MiB file costs a binary search, not a split of the whole file.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from dataclasses import dataclass
from itertools import accumulate
from typing import Literal

#: Largest ``content`` of one window, in UTF-8 bytes (GitLab's ``MAX_WINDOW_BYTES = 1.megabyte``).
MAX_WINDOW_BYTES = 1024 * 1024

#: Why a window holds fewer bytes than its lines: GitLab's ``cap_reason`` values.
CapReason = Literal["line_cut", "dropped_lines"]

# Building the index a chunk at a time bounds the transient list ``bytes.split`` makes.
_INDEX_CHUNK = 1024 * 1024


class TextFile:
    """A text file as UTF-8 bytes plus the byte offset where each line starts.

    Immutable once built, so one instance can be cached and shared by concurrent reads. (No
    ``__slots__``: the cache's size estimate walks ``__dict__`` to count :attr:`data`.)

    Attributes:
        data: the file's bytes (UTF-8).
        starts: ``total_lines + 1`` offsets into ``data``: line *i* is
            ``data[starts[i]:starts[i + 1]]``; the last entry is ``len(data)``.
    """

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.starts = line_starts(data)

    @classmethod
    def from_text(cls, text: str) -> TextFile:
        """Build from a decoded string (what GraphQL's ``rawTextBlob`` gives).

        Raises:
            UnicodeEncodeError: ``text`` holds lone surrogates, so it is not valid Unicode text.
        """
        return cls(text.encode("utf-8"))

    @property
    def total_lines(self) -> int:
        """Number of lines (a last line without ``\\n`` counts; an empty file has 0)."""
        return len(self.starts) - 1

    @property
    def size_bytes(self) -> int:
        """Length of :attr:`data` in bytes."""
        return len(self.data)

    @property
    def nbytes(self) -> int:
        """Approximate memory held, in bytes (for byte-bounded caches)."""
        return len(self.data) + self.starts.itemsize * len(self.starts) + 128


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
    total = file.total_lines
    starts = file.starts
    first = min(offset, total)
    last = min(offset + limit, total)
    begin = starts[first]
    if starts[last] - begin <= max_bytes:
        return Window(_decode(file.data, begin, starts[last]), offset, limit, last - first, total, None)
    # Whole lines that fit: the largest k with starts[first + k] - begin <= max_bytes.
    fit = bisect_right(starts, begin + max_bytes, first, last + 1) - 1 - first
    if fit > 0:
        content = _decode(file.data, begin, starts[first + fit])
        return Window(content, offset, limit, fit, total, "dropped_lines")
    cut = begin + max_bytes
    while (file.data[cut] & 0xC0) == 0x80:  # a UTF-8 continuation byte: back off to a boundary
        cut -= 1
    return Window(_decode(file.data, begin, cut), offset, limit, 1, total, "line_cut")


def _decode(data: bytes, begin: int, end: int) -> str:
    # Boundaries are line starts or character boundaries, so the slice is always valid UTF-8.
    return data[begin:end].decode("utf-8")


def line_starts(data: bytes, *, chunk: int = _INDEX_CHUNK) -> array[int]:
    """Offsets of every line start in ``data``, plus ``len(data)`` as the last entry.

    ``data`` is scanned ``chunk`` bytes at a time, so the transient list of pieces stays small.
    """
    starts: array[int] = array("I" if len(data) < 2**32 else "Q", [0])
    for base in range(0, len(data), chunk):
        # Each b"\n" at chunk offset p starts a line at base + p + 1; the chunk's last piece
        # has no b"\n" after it inside the chunk, so it adds no start.
        pieces = [len(piece) + 1 for piece in data[base : base + chunk].split(b"\n")]
        pieces.pop()
        offsets = accumulate(pieces, initial=base)
        next(offsets)  # ``initial`` itself is not a line start
        starts.extend(offsets)
    if starts[-1] != len(data):
        starts.append(len(data))
    return starts
