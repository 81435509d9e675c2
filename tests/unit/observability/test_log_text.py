"""Caller text in log lines: control characters escaped, values bounded."""

from __future__ import annotations

import io
import json
import logging

import pytest

from gateway.config import LoggingSettings
from gateway.observability.log_text import FIELD_LIMIT, escape_controls, safe_fields, safe_text
from gateway.observability.logging import configure_logging, unconfigure_logging


@pytest.mark.parametrize(
    "raw, shown",
    [
        ("a\x00b", "a\\x00b"),
        ("\x1b[31m", "\\x1b[31m"),
        ("x\x9by", "x\\x9by"),
        ("l\u2028m", "l\\u2028m"),
        ("s\ud800", "s\\ud800"),
        ("one\ntwo\r", "one\\x0atwo\\x0d"),
        ("tab\tand é ✓", "tab\tand é ✓"),
        # Format characters: a bidi override or isolate displays the line reordered.
        ("evil\u202etxt.exe", "evil\\u202etxt.exe"),
        ("\u2066a\u2069\u2067b\u2068", "\\u2066a\\u2069\\u2067b\\u2068"),
        ("zero\u200bwidth\ufeff", "zero\\u200bwidth\\ufeff"),
        ("tag\U000e0041", "tag\\U000e0041"),
    ],
)
def test_unsafe_characters_are_escaped(raw: str, shown: str) -> None:
    assert escape_controls(raw) == shown


def test_newlines_kept_where_asked() -> None:
    assert escape_controls("a\nb\x00", one_line=False) == "a\nb\\x00"


def test_long_values_are_cut_and_say_so() -> None:
    out = safe_text("m" * 10_000)
    assert out.startswith("m" * FIELD_LIMIT) and out.endswith(f"…[{10_000 - FIELD_LIMIT} more characters]")


def test_tracebacks_are_kept_whole() -> None:
    trace = "Traceback\n" + "  frame\n" * 1000
    assert safe_fields({"exc_info": trace})["exc_info"] == trace


@pytest.mark.parametrize("fmt", ["json", "plain"])
def test_a_log_line_with_a_hostile_method_stays_one_safe_line(fmt: str) -> None:
    stream = io.StringIO()
    configure_logging(LoggingSettings(format=fmt), stream=stream)
    try:
        logging.getLogger("gateway.mcp").warning(
            "unknown method %s", "x\x00\n\x1b" + "m" * 100_000, extra={"method": "y\x00\ud800" * 1000}
        )
    finally:
        unconfigure_logging()
    text = stream.getvalue()
    assert text.count("\n") == 1 and "\x00" not in text and "\x1b" not in text and "\ud800" not in text
    assert len(text) < 20_000
    if fmt == "json":
        json.loads(text)


def test_a_quoted_plain_value_keeps_its_text_as_written() -> None:
    # A value with spaces is quoted; its other characters (the cut's ellipsis, a name in another
    # script) are written as they are, not as \uNNNN escapes, while controls stay escaped.
    stream = io.StringIO()
    configure_logging(LoggingSettings(format="plain"), stream=stream)
    try:
        logging.getLogger("gateway.gitlab").warning(
            "retrying", extra={"detail": "no answer from Zürich " + "x" * 300, "agent": "dev\x1bä"}
        )
    finally:
        unconfigure_logging()
    text = stream.getvalue()
    assert 'detail="no answer from Zürich ' in text and "…[" in text and "\\u2026" not in text
    assert "\x1b" not in text and text.count("\n") == 1


@pytest.mark.parametrize("fmt", ["plain", "json"])
def test_a_reason_keeps_its_advice_to_the_end(fmt: str) -> None:
    # A reason is the gateway's own sentence, ending with what to do: never cut at 256.
    reason = "Could not connect to GitLab at https://gitlab.example.com: " + "check this, " * 40 + "and that."
    stream = io.StringIO()
    configure_logging(LoggingSettings(format=fmt), stream=stream)
    try:
        logging.getLogger("gateway.gitlab").info("retrying GitLab request", extra={"reason": reason})
    finally:
        unconfigure_logging()
    text = stream.getvalue()
    assert "more characters]" not in text and "and that." in text
