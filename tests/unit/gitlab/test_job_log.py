"""The job log cleaner: what GitLab's job page shows, and where each section lies."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import pytest

from gateway.gitlab.job_log import LogCleaner, clean_log, failing_section, failing_tail, split_lines
from gateway.tools.ci.log_reads import read_tail

E = "\x1b"
K = f"\r{E}[0K{E}[0K{E}[36;1m"  # a runner section header's prefix

RUNNER_LOG = (
    f"{E}[0KRunning with gitlab-runner 17.5.0 (abc123){E}[0;m\n"
    f'section_start:1700000000:prepare_executor{K}Preparing the "docker" executor{E}[0;m\n'
    f"{E}[0KUsing Docker executor with image python:3.12 ...{E}[0;m\n"
    f"section_end:1700000004:prepare_executor\r{E}[0K"
    f"section_start:1700000004:get_sources[collapsed=true]{K}Getting source from Git repository{E}[0;m\n"
    "Receiving objects:  10% (1/10)\rReceiving objects:  50% (5/10)\r"
    "Receiving objects: 100% (10/10), done.\n"
    f"section_end:1700000010:get_sources\r{E}[0K"
    f'section_start:1700000010:step_script{K}Executing "step_script" stage of the job script{E}[0;m\n'
    f"{E}[32;1m$ pytest{E}[0;m\n"
    "tests/test_a.py::test_ok PASSED — ✓\n"
    f"{E}[31mFAILED tests/test_a.py::test_bad - assert 1 == 2{E}[0m\n"
    f"section_end:1700000070:step_script\r{E}[0K"
    f"section_start:1700000070:upload_artifacts_on_failure{K}Uploading artifacts for failed job{E}[0;m\n"
    "Uploading artifacts...\n"
    f"section_end:1700000072:upload_artifacts_on_failure\r{E}[0K"
    f"section_start:1700000072:cleanup_file_variables{K}Cleaning up project directory{E}[0;m\n"
    f"section_end:1700000073:cleanup_file_variables\r{E}[0K"
    f"{E}[31;1mERROR: Job failed: exit code 1\n{E}[0;m\n"
)

EXPECTED_TEXT = (
    "Running with gitlab-runner 17.5.0 (abc123)\n"
    'Preparing the "docker" executor\n'
    "Using Docker executor with image python:3.12 ...\n"
    "Getting source from Git repository\n"
    "Receiving objects: 100% (10/10), done.\n"
    'Executing "step_script" stage of the job script\n'
    "$ pytest\n"
    "tests/test_a.py::test_ok PASSED — ✓\n"
    "FAILED tests/test_a.py::test_bad - assert 1 == 2\n"
    "Uploading artifacts for failed job\n"
    "Uploading artifacts...\n"
    "Cleaning up project directory\n"
    "ERROR: Job failed: exit code 1\n"
    "\n"
)


def test_a_runner_log_reads_as_the_job_page_shows_it() -> None:
    log = clean_log(RUNNER_LOG)
    assert log.text == EXPECTED_TEXT
    assert [
        (s.name, s.header, s.first_line, s.last_line, s.duration_seconds, s.collapsed) for s in log.sections
    ] == [
        ("prepare_executor", 'Preparing the "docker" executor', 2, 3, 4, False),
        ("get_sources", "Getting source from Git repository", 4, 5, 6, True),
        ("step_script", 'Executing "step_script" stage of the job script', 6, 9, 60, False),
        ("upload_artifacts_on_failure", "Uploading artifacts for failed job", 10, 11, 2, False),
        ("cleanup_file_variables", "Cleaning up project directory", 12, 12, 1, False),
    ]
    assert not any(s.open for s in log.sections)


def test_the_failing_tail_is_the_end_of_step_script_not_the_runners_aftermath() -> None:
    log = clean_log(RUNNER_LOG)
    tail = failing_tail(log, 2)
    assert tail.section is not None and tail.section.name == "step_script"
    assert (tail.first_line, tail.last_line) == (8, 9)
    assert (
        tail.text == "tests/test_a.py::test_ok PASSED — ✓\nFAILED tests/test_a.py::test_bad - assert 1 == 2\n"
    )
    # more lines than the section has: the whole section, header included
    assert failing_tail(log, 100).first_line == 6


def test_a_section_open_at_the_end_is_where_the_job_stopped() -> None:
    raw = (
        f"section_start:1:step_script\r{E}[0Kscript\n"
        f"section_start:2:tests[collapsed=true]\r{E}[0Krunning tests\n"
        "test 1\n"
        "test 2 hangs"
    )
    log = clean_log(raw)
    assert log.text == "script\nrunning tests\ntest 1\ntest 2 hangs"
    tests = log.sections[1]
    assert (tests.name, tests.depth, tests.open, tests.last_line, tests.duration_seconds) == (
        "tests",
        1,
        True,
        4,
        None,
    )
    assert failing_section(log.sections) is tests
    assert failing_tail(log, 1).text == "test 2 hangs\n"


def test_a_log_without_sections_tails_itself() -> None:
    log = clean_log("a\nb\nc\n")
    tail = failing_tail(log, 2)
    assert (tail.section, tail.first_line, tail.last_line, tail.text) == (None, 2, 3, "b\nc\n")


def test_carriage_returns_and_erases_behave_as_a_terminal() -> None:
    assert clean_log("abcdef\rxy\n").text == "xycdef\n"
    assert clean_log(f"abcdef\r{E}[0Kxy\n").text == "xy\n"
    assert clean_log(f"abcdef\rxy{E}[K\n").text == "xy\n"
    assert clean_log(f"abc{E}[2Kd\n").text == "   d\n"
    assert clean_log("done\r\n").text == "done\n"  # CRLF endings
    assert clean_log(f"{E}]0;title\x07x{E}[1;31my\x08z\n").text == "xz\n"


def test_user_sections_nested_and_markers_mid_line() -> None:
    raw = (
        f"section_start:10:outer[collapsed=true,hide_duration=true]\r{E}[0KOuter\n"
        f"before section_start:11:inner\r{E}[0KInner\n"
        f"inner body section_end:15:inner\r{E}[0K\n"
        f"section_end:20:outer\r{E}[0K\n"
        "after\n"
    )
    log = clean_log(raw)
    assert log.text == "Outer\nbefore \nInner\ninner body \nafter\n"
    outer, inner = log.sections
    assert (outer.first_line, outer.last_line, outer.duration_seconds, outer.collapsed) == (1, 4, 10, True)
    assert (inner.header, inner.first_line, inner.last_line, inner.depth, inner.duration_seconds) == (
        "Inner",
        3,
        4,
        1,
        4,
    )


def test_an_unknown_section_end_is_ignored_and_a_section_end_closes_inner_ones() -> None:
    raw = (
        f"section_start:1:a\r{E}[0KA\n"
        f"section_start:2:b\r{E}[0KB\n"
        f"section_end:3:nope\r{E}[0K\n"
        f"section_end:5:a\r{E}[0K\n"
    )
    log = clean_log(raw)
    assert log.text == "A\nB\n"
    assert [(s.name, s.last_line, s.duration_seconds) for s in log.sections] == [("a", 2, 4), ("b", 2, 3)]


def test_cleaning_line_by_line_equals_cleaning_whole() -> None:
    raw_lines = list(split_lines(RUNNER_LOG))
    for cut in range(len(raw_lines) + 1):
        head = "".join(raw_lines[:cut])
        rest = "".join(raw_lines[cut:])
        assert clean_log(head).text + clean_log(rest).text == EXPECTED_TEXT


def test_bytes_are_decoded_as_utf8_with_replacement() -> None:
    assert clean_log("é ✓\n".encode()).text == "é ✓\n"
    assert clean_log(b"bad \xff byte\n").text == "bad \ufffd byte\n"


FRAGMENTS = [
    "plain text ",
    "grüße 日本語 ✓ ",
    f"{E}[32;1m",
    f"{E}[0;m",
    f"{E}[0K",
    f"{E}[K",
    f"{E}[1K",
    f"{E}[2K",
    "\r",
    "\x08",
    "\t",
    f"{E}]0;title\x07",
    f"section_start:100:s1[collapsed=true]\r{E}[0K",
    f"section_end:105:s1\r{E}[0K",
    "section_ not a marker ",
    "\x01",
]


@pytest.mark.parametrize("seed", range(5))
def test_the_shortcuts_clean_as_the_terminal_model_does(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(400):
        body = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(0, 8)))
        shortcut, model = LogCleaner(), LogCleaner()
        assert shortcut.feed(body + "\n") == model.feed_terminal(body, True), repr(body)
        assert shortcut.emitted == model.emitted


@pytest.mark.parametrize("chunk", [1, 5, 64, 4096])
async def test_a_streamed_tail_matches_the_whole_log_cleaned(chunk: int) -> None:
    rng = random.Random(chunk)
    lines = ["".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(0, 6))) for _ in range(300)]
    plain = [f"{E}[32mline {i} ✓{E}[0m" for i in range(300)]  # regions with colours only
    raw = ("\n".join(lines + plain + lines[:50]) + "\npartial").encode()

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(raw), chunk):
            yield raw[i : i + chunk]

    whole = clean_log(raw)
    for wanted in (1, 7, 400, 2000):
        read = await read_tail(chunks(), wanted)
        assert read.content == "".join(f"{line}\n" for line in whole.lines[-wanted:])[: len(read.content)]
        assert read.content.rstrip("\n") == "\n".join(whole.lines[-wanted:])
        assert read.total_lines == len(whole.lines)
        assert [(s.name, s.first_line, s.last_line) for s in read.sections] == [
            (s.name, s.first_line, s.last_line) for s in whole.sections
        ]
        assert read.total_bytes == len(raw) and read.end == len(raw)
