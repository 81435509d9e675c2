"""Line windows (``gateway.tools.repository.file_window``): GitLab's ``lines[offset, limit]`` with the
1 MiB cap, and the property the issue asks for: reading any file in windows of any size and joining
them gives the file back byte for byte."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gateway.tools.repository.file_window import MAX_WINDOW_BYTES, TextFile, Window, window


def read_all(file: TextFile, limit: int, max_bytes: int = MAX_WINDOW_BYTES) -> tuple[str, list[Window]]:
    """Follow ``next_offset`` from 0 to the end, as an agent would; return the joined content."""
    parts: list[str] = []
    windows: list[Window] = []
    offset = 0
    while True:
        win = window(file, offset, limit, max_bytes=max_bytes)
        windows.append(win)
        parts.append(win.content)
        if win.next_offset is None:
            return "".join(parts), windows
        assert win.next_offset > offset
        offset = win.next_offset


# -- strategies ------------------------------------------------------------------------------

_CHARS = st.characters(codec="utf-8", exclude_characters="\n\r")  # 1- to 4-byte characters, no breaks
_ENDINGS = st.sampled_from(["\n", "\r\n"])


@st.composite
def files(draw: st.DrawFn) -> str:
    """Files of many shapes: mixed ``\\n``/``\\r\\n``, with or without a final newline, empty, blank
    lines, lone ``\\r``, multi-byte UTF-8, and now and then one huge line (up to 300 kB)."""
    shape = draw(st.sampled_from(["lines", "empty", "huge", "breaks_only"]))
    if shape == "empty":
        return ""
    if shape == "breaks_only":
        return "".join(draw(st.lists(st.sampled_from(["\n", "\r\n", "\r"]), max_size=30)))
    if shape == "huge":
        unit = draw(st.text(_CHARS, min_size=1, max_size=8))
        line = unit * draw(st.integers(1, 300_000 // (len(unit.encode()) or 1)))
        return line + draw(st.sampled_from(["", "\n", "\r\n", "\nafter\n"]))
    lines = draw(st.lists(st.tuples(st.text(_CHARS | st.just("\r"), max_size=40), _ENDINGS), max_size=60))
    text = "".join(body + end for body, end in lines)
    if draw(st.booleans()):
        text += draw(st.text(_CHARS, min_size=1, max_size=20))  # no final newline
    return text


# -- the property ----------------------------------------------------------------------------


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example],
)
@given(
    text=files(),
    limit=st.one_of(st.integers(1, 5), st.integers(1, 2000)),
    block=st.sampled_from([1, 3, 64, 4096, 65536]),
)
@example(text="x" * 1_000_000, limit=1, block=65536)  # one huge line, no newline (just under 1 MiB)
@example(text="é🎉" * 170_000 + "\r\n", limit=3, block=65536)  # ~1 MB of multi-byte characters, one line
@example(text="a\r\n" * 2500 + "tail", limit=500, block=64)
@example(text="", limit=500, block=65536)
def test_windows_of_any_size_rebuild_the_file_byte_for_byte(text: str, limit: int, block: int) -> None:
    file = TextFile(text.encode("utf-8"), block_bytes=block)
    joined, windows = read_all(file, limit)
    assert joined.encode("utf-8") == text.encode("utf-8")
    # Ruby's String#lines: split after "\n" only, so "\r" and "\r\n" never add lines.
    assert file.total_lines == text.count("\n") + (0 if text == "" or text.endswith("\n") else 1)
    assert all(w.cap_reason is None for w in windows)
    assert sum(w.line_count for w in windows) == file.total_lines


@settings(max_examples=200, deadline=None)
@given(text=files(), limit=st.integers(1, 50), max_bytes=st.integers(4, 200))
def test_small_caps_never_split_a_character_and_say_why_they_cut(
    text: str, limit: int, max_bytes: int
) -> None:
    file = TextFile.from_text(text)
    joined, windows = read_all(file, limit, max_bytes=max_bytes)
    data = text.encode("utf-8")
    assert "\ufffd" not in joined or "\ufffd" in text
    for win in windows:
        size = len(win.content.encode("utf-8"))
        assert size <= max_bytes
        begin = file.line_start(min(win.offset, file.total_lines))
        # Every window is exactly the bytes of the file from its first line: nothing altered.
        assert data[begin : begin + size] == win.content.encode("utf-8")
        if win.cap_reason == "line_cut":
            assert win.line_count == 1 and size > max_bytes - 4
        elif win.cap_reason == "dropped_lines":
            assert 0 < win.line_count < min(limit, file.total_lines - win.offset)
    if all(w.cap_reason != "line_cut" for w in windows):
        assert joined == text


@given(data=st.binary(max_size=5000), block=st.integers(1, 700))
def test_line_starts_are_right_for_any_block_size(data: bytes, block: int) -> None:
    expected = [0] + [i + 1 for i, b in enumerate(data) if b == 0x0A]
    file = TextFile(data, block_bytes=block)
    assert [file.line_start(i) for i in range(len(expected))] == expected
    assert file.line_start(len(expected)) == file.line_start(10**9) == len(data)
    assert file.total_lines == data.count(b"\n") + (0 if not data or data.endswith(b"\n") else 1)


# -- examples (GitLab's contract) ------------------------------------------------------------


def test_gitlab_lines_semantics() -> None:
    file = TextFile.from_text("a\r\nb\rc\n\nlast")
    assert file.total_lines == 4
    assert [window(file, i, 1).content for i in range(4)] == ["a\r\n", "b\rc\n", "\n", "last"]
    assert TextFile.from_text("").total_lines == 0
    assert TextFile.from_text("\n").total_lines == 1


def test_window_positions() -> None:
    file = TextFile.from_text("".join(f"{i}\n" for i in range(10)))
    win = window(file, 3, 4)
    assert (win.content, win.returned_lines, win.next_offset, win.remaining) == (
        "3\n4\n5\n6\n",
        {"start": 4, "end": 7},
        7,
        3,
    )
    last = window(file, 8, 5)
    assert (last.returned_lines, last.next_offset, last.past_end) == ({"start": 9, "end": 10}, None, False)
    beyond = window(file, 10, 5)
    assert (beyond.content, beyond.returned_lines, beyond.next_offset, beyond.past_end) == (
        "",
        None,
        None,
        True,
    )
    assert window(TextFile.from_text(""), 0, 5).past_end is False


def test_cap_keeps_whole_lines_that_fit_exactly() -> None:
    line = "x" * 9 + "\n"
    file = TextFile.from_text(line * 5)
    assert window(file, 0, 5, max_bytes=30) == Window(line * 3, 0, 5, 3, 5, "dropped_lines")
    assert window(file, 0, 3, max_bytes=30).cap_reason is None  # exactly at the cap
    assert window(file, 0, 1, max_bytes=10).cap_reason is None


def test_one_line_over_the_cap_is_cut_on_a_character_boundary() -> None:
    file = TextFile.from_text("🎉" * 10 + "\nnext\n")  # 4-byte characters
    win = window(file, 0, 2, max_bytes=10)
    assert (win.content, win.cap_reason, win.line_count, win.next_offset) == ("🎉🎉", "line_cut", 1, 1)
    assert window(file, 1, 1, max_bytes=10).content == "next\n"


def test_real_cap_is_one_mebibyte() -> None:
    file = TextFile.from_text("a" * (MAX_WINDOW_BYTES + 10))
    win = window(file, 0, 1)
    assert len(win.content) == MAX_WINDOW_BYTES and win.cap_reason == "line_cut"


@pytest.mark.parametrize(("offset", "limit", "cap"), [(-1, 1, 10), (0, 0, 10), (0, 1, 3)])
def test_out_of_range_arguments(offset: int, limit: int, cap: int) -> None:
    with pytest.raises(ValueError, match="out of range"):
        window(TextFile.from_text("a\n"), offset, limit, max_bytes=cap)


def test_index_of_a_big_file_is_compact() -> None:
    data = b"".join(b"L%07d\n" % i for i in range(1, 200_001))
    file = TextFile(data)
    assert file.total_lines == 200_000
    assert len(file.breaks) == len(data) // (64 * 1024) + 1  # one integer per 64 KiB, not per line
    assert window(file, 150_000, 2).content == "L0150001\nL0150002\n"
