"""``get_job`` ``tail_lines``: the last lines of a streamed log, counted over raw bytes and cleaned
only where returned, whatever the chunks GitLab's answer arrives in.

Each log is compared with the whole log cleaned at once (:func:`gateway.gitlab.job_log.clean_log`):
the same last lines, line count and sections, for every way of cutting it into chunks.
"""

from __future__ import annotations

import random
import tracemalloc
from collections.abc import AsyncIterator, Callable, Iterable, Iterator

import httpx
import pytest
import respx

from gateway.config import Settings
from gateway.gitlab.job_log import CleanedLog, clean_log, split_lines
from gateway.tools.ci import log_reads
from gateway.tools.ci.log_reads import MAX_TAIL_CHARS, MAX_TAIL_RAW_BYTES, read_tail
from tests.standin.job_logs import FAILED_LOG
from tests.unit.gitlab.tool_env import ToolEnv, ok

E = "\x1b"
GITLAB = "https://gitlab.example.com"
JOB_URL = f"{GITLAB}/api/v4/projects/grp%2Fsub%2Fproj/jobs/5010"


def section(kind: str, name: str, ts: int) -> str:
    return f"section_{kind}:{ts}:{name}\r{E}[0K"


#: A runner's log with what a tail must see through: CRLF endings, colours, ``\r`` redraws,
#: a marker-only line (no cleaned line), a marker after text (two), nested sections, multi-byte
#: characters, and no newline at the end.
LOG = (
    f"{E}[0KRunning with gitlab-runner 17.5.0{E}[0;m\r\n"
    + section("start", "prepare", 100)
    + f"{E}[36;1mPreparing{E}[0;m\n"
    + "".join(f"{E}[32mline {i:03d} grüße ✓{E}[0m\r\n" for i in range(40))
    + "Receiving 10%\rReceiving 100%, done.\n"
    + section("end", "prepare", 110)
    + "\n"
    + section("start", "step_script", 110)
    + "Executing step_script\n"
    + "text first "
    + section("start", "inner[collapsed=true]", 111)
    + "inner header\n"
    + "".join(f"{E}[31mFAILED test_{i} 日本語{E}[0m\n" for i in range(30))
    + section("end", "inner", 115)
    + section("end", "step_script", 120)
    + f"{E}[31;1mERROR: Job failed: exit code 1{E}[0;m\n"
    + "\n"
    + "the last line, unterminated ✓"
).encode()


def lines_of(text: str) -> list[str]:
    return list(split_lines(text))


async def stream(raw: bytes, cuts: Iterable[int]) -> AsyncIterator[bytes]:
    """``raw`` cut at ``cuts`` (offsets), as GitLab's answer may arrive."""
    start = 0
    for cut in [*sorted(set(cuts)), len(raw)]:
        if cut > start:
            yield raw[start:cut]
            start = cut


def every(size: int, raw: bytes) -> range:
    return range(size, len(raw), size)


async def check_tail(
    raw: bytes, cuts: Iterable[int], wanted: int, whole: CleanedLog | None = None
) -> log_reads.LogRead:
    whole = whole or clean_log(raw)
    read = await read_tail(stream(raw, cuts), wanted)
    expected = lines_of(whole.text)[-wanted:]
    assert read.content == "".join(expected)
    assert read.lines == len(expected)
    assert read.total_lines == len(whole.lines)
    assert read.first_line == len(whole.lines) - len(expected) + 1
    assert [(s.name, s.header, s.first_line, s.last_line, s.duration_seconds) for s in read.sections] == [
        (s.name, s.header, s.first_line, s.last_line, s.duration_seconds) for s in whole.sections
    ]
    assert read.end == read.total_bytes == read.bytes_read == len(raw)
    # start is where the returned lines begin in the raw log: cleaning from there ends with them
    assert clean_log(raw[read.start :]).text.endswith(read.content)
    assert read.cap_reason is None
    return read


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 11, 64, 997, 1 << 20])
@pytest.mark.parametrize("wanted", [1, 2, 3, 10, 45, 200])
async def test_a_tail_is_the_same_whatever_the_chunks(size: int, wanted: int) -> None:
    await check_tail(LOG, every(size, LOG), wanted)


async def test_lines_split_across_chunks_and_escapes_cut_at_every_boundary() -> None:
    # one cut at each position where an escape sequence, a CRLF, a marker or a character begins
    # or ends: every such split is seen by some chunking below
    whole = clean_log(LOG)
    for i in range(1, len(LOG)):
        if LOG[i - 1 : i + 1] in (b"\r\n", b"\x1b[") or LOG[i : i + 8] == b"section_" or LOG[i] >= 0x80:
            await check_tail(LOG, [i - 1, i, i + 4], 35 if i % 2 else 2, whole)


async def test_crlf_lines_lose_their_carriage_return() -> None:
    read = await check_tail(b"one\r\ntwo\r\nthree\r\n", every(4, b"one\r\ntwo\r\nthree\r\n"), 2)
    assert read.content == "two\nthree\n"


async def test_a_log_without_a_final_newline_ends_with_its_unterminated_line() -> None:
    read = await check_tail(b"a\nb\nc", [3], 2)
    assert read.content == "b\nc" and read.total_lines == 3


async def test_a_log_shorter_than_the_tail_is_returned_whole() -> None:
    read = await check_tail(LOG, every(100, LOG), 5000)
    assert read.content == clean_log(LOG).text and read.first_line == 1 and read.start == 0
    assert (await read_tail(stream(b"", []), 5)).content == ""


async def test_a_tail_ending_in_marker_only_lines_counts_the_lines_before_them() -> None:
    raw = (section("start", "s", 1) + "header\nlast\n" + section("end", "s", 2) + "\n").encode()
    read = await check_tail(raw, every(3, raw), 1)
    assert read.content == "last\n"


async def test_the_raw_bytes_held_stay_bounded_however_long_the_log() -> None:
    line = f"{E}[32m[compile]{E}[0m src/module.c → build/module.o ✓\n".encode()
    chunk = line * (65536 // len(line))

    async def chunks(count: int, piece: bytes) -> AsyncIterator[bytes]:
        for _ in range(count):
            yield piece

    tracemalloc.start()
    try:
        read = await read_tail(chunks(100, chunk), 1000)  # 6.5 MB of log
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        small_log = line * 5_000  # in 37-byte chunks, joined into blocks before they are held
        small = await read_tail(stream(small_log, every(37, small_log)), 50)
        _, small_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert read.lines == 1000 and read.total_lines == 100 * chunk.count(b"\n")
    assert peak < 2 * MAX_TAIL_RAW_BYTES, f"{peak / 2**20:.1f} MiB held"
    assert small.total_lines == 5_000 and small_peak < len(small_log) + 4 * 2**20


async def test_a_last_line_longer_than_a_tail_holds_is_cut_at_its_start() -> None:
    long_line = "長" * (MAX_TAIL_RAW_BYTES // 3 + 1000)
    raw = f"first\nsecond\n{E}[1m{long_line}{E}[0m\n".encode()
    read = await read_tail(stream(raw, every(65536, raw)), 3)
    assert read.cap_reason == "line_cut" and read.lines == 1
    assert read.content.endswith("長\n") and len(read.content) <= MAX_TAIL_CHARS
    assert read.total_lines == 3 and read.first_line == 3


async def test_long_lines_before_the_tail_are_counted_once() -> None:
    raw = ("x" * (3 * log_reads.MAX_LINE_BYTES) + "\nshort\nlast\n").encode()
    read = await check_tail(raw, every(65536, raw), 2)
    assert read.content == "short\nlast\n" and read.total_lines == 3


async def test_fewer_lines_than_asked_when_they_would_pass_the_character_cap() -> None:
    raw = ("y" * 200_000 + "\n").encode() * 4
    read = await read_tail(stream(raw, every(65536, raw)), 4)
    assert read.cap_reason == "max_chars" and read.lines == 2 and read.first_line == 3


# -- through get_job, with GitLab mocked -----------------------------------------------------------


@pytest.fixture
async def env(make_settings: Callable[..., Settings]) -> AsyncIterator[ToolEnv]:
    async with httpx.AsyncClient() as http:
        yield ToolEnv(make_settings(), http)


def serve_log(router: respx.MockRouter, raw: bytes, size: int) -> None:
    async def body() -> AsyncIterator[bytes]:
        for i in range(0, len(raw), size):
            yield raw[i : i + size]

    job = {"id": 5010, "name": "rspec", "status": "failed", "pipeline": {"id": 1}, "web_url": "x"}
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job))
    router.get(f"{JOB_URL}/trace").mock(
        side_effect=lambda request: httpx.Response(
            200, content=body(), headers={"Content-Type": "text/plain"}
        )
    )


@pytest.fixture
def router() -> Iterator[respx.MockRouter]:
    with respx.mock(assert_all_mocked=True, assert_all_called=False) as mocked:
        yield mocked


@pytest.mark.parametrize("size", [1, 9, 4096])
async def test_get_job_tail_says_what_it_read(env: ToolEnv, router: respx.MockRouter, size: int) -> None:
    raw = FAILED_LOG.encode() + LOG
    serve_log(router, raw, size)
    args = {"id": "grp/sub/proj", "job_id": 5010, "include": ["log"], "tail_lines": 4}
    log = ok(await env.call("get_job", args), "get_job")["log"]
    assert log["content"] == "".join(lines_of(clean_log(raw).text)[-4:])
    meta = log["metadata"]
    assert meta["bytes_read"] == meta["total_bytes"] == len(raw)
    assert meta["total_lines"] == len(clean_log(raw).lines)
    window = {"id": "grp/sub/proj", "job_id": 5010, "include": ["log"], "byte_offset": 100, "byte_limit": 50}
    meta = ok(await env.call("get_job", window), "get_job")["log"]["metadata"]
    assert 150 <= meta["bytes_read"] < 150 + size + 5  # up to the window's end, not the whole log


async def test_a_marker_cut_between_its_carriage_return_and_escape_is_still_seen() -> None:
    head = "a\n" + section("start", "s", 1)
    rest = "header\nbody\n"
    end = "done\n" + section("end", "s", 2)
    raw = (head + rest + end + "\nlast\n").encode()
    cut_start = len(head.encode()) - len(f"{E}[0K")  # after the marker's \r, before its escape
    cut_end = len((head + rest + end).encode()) - len(f"{E}[0K")
    read = await check_tail(raw, [cut_start, cut_end], 2)
    assert [(s.name, s.first_line, s.last_line) for s in read.sections] == [("s", 2, 4)]


@pytest.mark.parametrize("seed", range(4))
async def test_random_logs_cut_at_random_places(seed: int) -> None:
    rng = random.Random(seed)
    pieces = [
        "plain ",
        "grüße ✓ ",
        f"{E}[32;1m",
        f"{E}[0K",
        f"{E}[2K",
        "\r",
        "\r\n",
        "\n",
        "\n",
        section("start", "a", 1),
        section("end", "a", 2),
        section("start", "b[collapsed=true]", 3),
        section("end", "b", 4),
        "section_ text ",
    ]
    for _ in range(60):
        raw = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 80))).encode()
        cuts = [rng.randrange(len(raw) + 1) for _ in range(rng.randint(0, 12))]
        await check_tail(raw, cuts, rng.choice([1, 2, 5, 30]))
