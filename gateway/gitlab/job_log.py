"""A job log as a person reads it on GitLab's job page: the runner's terminal markup resolved.

GitLab Runner writes a job's log for a terminal (https://docs.gitlab.com/ci/jobs/job_logs/):
SGR colours (``\\e[32;1m`` … ``\\e[0;m``), ``\\e[0K`` (erase to the end of the line), progress
redrawn after a ``\\r``, and collapsible sections::

    section_start:<unix ts>:<name>[collapsed=true]\\r\\e[0K<header>
    …
    section_end:<unix ts>:<name>\\r\\e[0K

Pure functions, no I/O. The rules, each chosen so that **a log cleaned line by line equals the log
cleaned whole** (cleaning ``a + b`` gives ``clean(a) + clean(b)`` whenever ``a`` ends with ``\\n``,
which is what lets a byte window that ends at a line boundary be cleaned on its own):

- Lines end at ``\\n``; a ``\\n`` in the raw log stays one in the text (the last line has none when
  the log does not end with one, as a running job's log often does).
- Within a line, ``\\r`` moves the cursor back to the line's start and later text overwrites what
  was there, as a terminal does; ``\\e[K``/``\\e[0K`` erase from the cursor to the end, ``\\e[1K``
  blanks the start, ``\\e[2K`` the whole line. What is left when the line ends is its last state.
- Every other escape sequence (colours, cursor moves, OSC titles) is dropped, and so are
  backspaces and other C0 control characters but tab.
- Section markers are removed. A marker after visible text on the same line ends that line (GitLab's
  page starts a section's header on a line of its own). A raw line that held markers and is blank once
  cleaned is left out (the line a runner writes for ``section_end``), so line numbers match the text.
- A section's ``first_line`` is its header's line, ``last_line`` the last line before its
  ``section_end`` (1-based, in :attr:`CleanedLog.text`). A ``section_end`` closes the innermost open
  section of that name (and any opened inside it); one with no open section of its name is ignored.
  A section still open when the log ends has ``last_line`` at the log's last line and no duration.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

#: Sections the runner opens after the job's script, for its own housekeeping: not where a job
#: fails, so :func:`failing_section` looks past them (after_script's failures never fail a job).
RUNNER_AFTERMATH = frozenset(
    {
        "after_script",
        "archive_cache",
        "archive_cache_on_failure",
        "upload_artifacts_on_success",
        "upload_artifacts_on_failure",
        "cleanup_file_variables",
    }
)

_TOKEN = re.compile(
    r"section_(?P<kind>start|end):(?P<ts>\d+):(?P<name>[A-Za-z0-9_.\-]+)(?:\[(?P<opts>[^\]\r\n]*)\])?"
    r"\r\x1b\[0?K"
    r"|\x1b\[(?P<params>[0-9;?]*)(?P<final>[@-~])"  # CSI: SGR, erase, cursor moves
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC (window titles, hyperlinks)
    r"|\x1b[()][0-9A-Za-z]|\x1b[@-_]?"  # charset designations, other two-byte escapes
    r"|\r|[\x00-\x08\x0b-\x1f\x7f]"
)
#: Cheap test for a line that needs no more than its newline removed.
_PLAIN = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]|section_")
#: What makes a line need the terminal's cursor: without any of these (most lines: colours
#: only), the cursor stays at the end and cleaning is deleting escapes (:data:`STRIP`).
NEEDS_CURSOR = re.compile(r"[\r\x08]|section_|\x1b\[[12]K")
#: Every escape sequence and C0 control character but tab and newline.
_STRIP_PATTERN = (
    r"\x1b\[[0-9;?]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[()][0-9A-Za-z]|\x1b[@-_]?"
    r"|[\x00-\x08\x0b-\x1f\x7f]"
)
STRIP = re.compile(_STRIP_PATTERN)


@dataclass
class LogSection:
    """One collapsible section of a job log (line numbers are 1-based, in the cleaned text).

    ``last_line`` is ``first_line - 1`` for a section with no line of its own (rare: no header and
    nothing printed). ``duration_seconds`` is ``section_end``'s timestamp minus ``section_start``'s,
    None while the section is open.
    """

    name: str
    header: str
    first_line: int
    last_line: int
    duration_seconds: int | None
    collapsed: bool
    depth: int = 0  # 0 for a top-level section, 1 for one opened inside it, ...
    _start_ts: int = field(default=0, repr=False)
    _open: bool = field(default=True, repr=False)

    @property
    def open(self) -> bool:
        """True when the log ended before this section's ``section_end``."""
        return self._open


@dataclass
class CleanedLog:
    """A cleaned log: its text and its sections, in the order they start."""

    text: str
    sections: list[LogSection]

    @property
    def lines(self) -> list[str]:
        """The text's lines, without their newlines."""
        lines = self.text.split("\n")
        return lines[:-1] if lines[-1] == "" else lines


class LogCleaner:
    """Cleans a log one raw line at a time (a stream never needs to be held whole).

    Feed each raw line with its ``\\n`` (the last one may lack it) to :meth:`feed`, which returns
    the cleaned lines it makes (none, one, or more when a marker splits it), each ending with ``\\n``
    but for the unterminated last one. :attr:`sections` grows as markers are met; :meth:`finish`
    closes the sections still open at the end.

    Args:
        first_line: the line number of the first cleaned line fed (1 unless resuming).
    """

    def __init__(self, first_line: int = 1) -> None:
        self.sections: list[LogSection] = []
        self.emitted = first_line - 1  # cleaned lines made so far, counting from first_line
        self._stack: list[LogSection] = []
        self._headers: list[LogSection] = []  # started on this raw line, waiting for its text

    def feed(self, raw: str) -> list[str]:
        """The cleaned lines of one raw line (see the module's rules)."""
        terminated = raw.endswith("\n")
        body = raw[:-1] if terminated else raw
        if not _PLAIN.search(body):
            self.emitted += 1
            return [raw]
        if not NEEDS_CURSOR.search(body):
            self.emitted += 1
            return [STRIP.sub("", body) + ("\n" if terminated else "")]
        return self.feed_terminal(body, terminated)

    def feed_terminal(self, body: str, terminated: bool) -> list[str]:
        """:meth:`feed` for a line (without its ``\\n``) played through the terminal model; the
        shortcuts above give the same result for the lines they take."""
        out: list[str] = []
        text = ""
        cursor = 0
        had_marker = False
        pos = 0
        for match in _TOKEN.finditer(body):
            if match.start() > pos:
                text, cursor = _write(text, cursor, body[pos : match.start()])
            pos = match.end()
            kind = match.group("kind")
            if kind is not None:
                had_marker = True
                if text:  # a marker after visible text ends that text's line
                    out.append(self._emit(text) + "\n")
                    text, cursor = "", 0
                if kind == "start":
                    self._start(match.group("name"), int(match.group("ts")), match.group("opts") or "")
                else:
                    self._end(match.group("name"), int(match.group("ts")))
                continue
            piece = match.group(0)
            if piece == "\r":
                cursor = 0
            elif match.group("final") == "K":
                mode = match.group("params") or "0"
                if mode == "0":
                    text = text[:cursor]
                elif mode == "1":
                    text = " " * min(cursor, len(text)) + text[cursor:]
                elif mode == "2":
                    text = ""
            elif piece == "\x08":
                cursor = max(0, cursor - 1)
            # any other escape or control character: dropped
        if pos < len(body):
            text, cursor = _write(text, cursor, body[pos:])
        if text or not had_marker:
            out.append(self._emit(text) + ("\n" if terminated else ""))
        self._headers.clear()
        return out

    def finish(self) -> list[LogSection]:
        """The sections, those still open ending at the last line."""
        for section in self._stack:
            section.last_line = max(self.emitted, section.first_line - 1)
        self._stack.clear()
        return self.sections

    def _emit(self, text: str) -> str:
        self.emitted += 1
        for section in self._headers:
            section.header = text
        self._headers.clear()
        return text

    def _start(self, name: str, ts: int, opts: str) -> None:
        collapsed = any(o.strip() == "collapsed=true" for o in opts.split(","))
        section = LogSection(
            name=name,
            header="",
            first_line=self.emitted + 1,
            last_line=self.emitted,
            duration_seconds=None,
            collapsed=collapsed,
            depth=len(self._stack),
            _start_ts=ts,
        )
        self.sections.append(section)
        self._stack.append(section)
        self._headers.append(section)

    def _end(self, name: str, ts: int) -> None:
        for index in range(len(self._stack) - 1, -1, -1):
            if self._stack[index].name == name:
                for section in self._stack[index:]:
                    section.last_line = max(self.emitted, section.first_line - 1)
                    section.duration_seconds = max(0, ts - section._start_ts)
                    section._open = False
                    if section in self._headers:
                        self._headers.remove(section)
                del self._stack[index:]
                return


def _write(text: str, cursor: int, chunk: str) -> tuple[str, int]:
    """``chunk`` written at ``cursor`` over ``text``, as a terminal overwrites."""
    if cursor == len(text):
        return text + chunk, cursor + len(chunk)
    if cursor > len(text):
        text += " " * (cursor - len(text))
    end = cursor + len(chunk)
    return text[:cursor] + chunk + text[end:], end


def split_lines(raw: str) -> Iterator[str]:
    """``raw``'s lines, each with its ``\\n`` (the last may have none)."""
    start = 0
    while start < len(raw):
        end = raw.find("\n", start)
        if end < 0:
            yield raw[start:]
            return
        yield raw[start : end + 1]
        start = end + 1


def clean_lines(raw_lines: Iterable[str], first_line: int = 1) -> CleanedLog:
    """:func:`clean_log` over raw lines (each with its ``\\n``)."""
    cleaner = LogCleaner(first_line)
    parts: list[str] = []
    for raw in raw_lines:
        parts.extend(cleaner.feed(raw))
    return CleanedLog(text="".join(parts), sections=cleaner.finish())


def clean_log(raw: str | bytes) -> CleanedLog:
    """The log as GitLab's job page shows it, and its sections (bytes are read as UTF-8, an
    invalid sequence becoming U+FFFD)."""
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    return clean_lines(split_lines(raw))


@dataclass
class FailingTail:
    """The last lines of the section where a job most likely failed.

    ``section`` is None when the log has no section (then the lines are the log's own last ones).
    ``first_line``/``last_line`` number the lines returned, in the cleaned log.
    """

    section: LogSection | None
    first_line: int
    last_line: int
    text: str


def failing_section(sections: list[LogSection]) -> LogSection | None:
    """The section where a job most likely failed.

    1. A section still open at the end of the log (innermost): the job stopped inside it (a
       timeout, a cancellation, a runner failure) or is still running.
    2. Otherwise the last top-level section that ended and is not the runner's aftermath
       (:data:`RUNNER_AFTERMATH`): usually ``step_script``; ``get_sources`` when the clone failed,
       ``prepare_executor`` when the image could not be pulled.
    3. Otherwise the last section, whichever it is; None when there is none.
    """
    open_sections = [s for s in sections if s.open]
    if open_sections:
        return max(open_sections, key=lambda s: (s.depth, s.first_line))
    top = [s for s in sections if s.depth == 0 and s.name not in RUNNER_AFTERMATH]
    if top:
        return top[-1]
    return sections[-1] if sections else None


def failing_tail(log: CleanedLog, lines: int) -> FailingTail:
    """The last ``lines`` lines (at least 1) of :func:`failing_section`, or of the whole log."""
    all_lines = log.lines
    section = failing_section(log.sections)
    if section is None:
        first, last = 1, len(all_lines)
    else:
        first, last = section.first_line, min(section.last_line, len(all_lines))
    first = max(first, last - max(1, lines) + 1)
    return FailingTail(
        section=section,
        first_line=first,
        last_line=last,
        text="".join(line + "\n" for line in all_lines[first - 1 : last]),
    )
