"""How much a GitLab answer may decode to: a bound on JSON values, checked before decoding.

GitLab's answers are read up to :data:`gateway.gitlab.transport.MAX_ANSWER_BYTES` after their
``Content-Encoding`` is decoded, but bytes are not what a JSON decoder allocates: ``[{},{},...]``
costs about 70 bytes of Python objects per 3 bytes of text, so a gzip answer of 65 KB on the wire
(a hostile GitLab or proxy) decoded to 64 MiB of text would become gigabytes of objects. An
answer is therefore decoded only when it holds at most :data:`MAX_ANSWER_VALUES` values, counted
as the separators and containers that make them (``,``, ``{``, ``[``), which C-speed
``bytes.count`` finds in milliseconds. Text inside strings (a file's contents) is told apart only
when the rough count is over the bound (:func:`check_json_budget`). While a JSON answer arrives,
:class:`ArrivingBudget` counts the same way and refuses it as soon as the end could only be
refused too, so ``[{},{},...]`` stops after about 3 MiB instead of 64 MiB read and scanned.
Nothing is counted in an answer of at most :data:`MAX_ANSWER_VALUES` bytes: every value counted
takes at least a byte, so it cannot be over the bound (nearly every answer GitLab gives: counting
a 20-job pipeline's answer, eight passes over it, was about 4% of a ``get_pipeline`` call's
instructions).
Depth is bounded by the decoder: orjson refuses nesting past 1,024 levels (the stdlib's decoder,
its fallback, raises ``RecursionError``, read here as the same refusal).
"""

from __future__ import annotations

import re

#: The most JSON values decoded from one GitLab answer (about 70 MiB of Python objects in the
#: worst shape). GitLab's largest JSON answers (a page of 100 pipelines, a pipeline's jobs, a
#: file's contents as one string) hold a few tens of thousands.
MAX_ANSWER_VALUES = 1_000_000
#: The most strings looked into when the rough count is over the bound (a bound on that CPU).
MAX_STRINGS_SCANNED = 100_000
#: A JSON string, escapes included (the unrolled loop: no backtracking).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


class AnswerTooComplex(ValueError):
    """A JSON answer holds more values, or deeper nesting, than the gateway decodes."""


def _values(content: bytes | bytearray, start: int = 0, end: int | None = None) -> int:
    return content.count(b",", start, end) + content.count(b"{", start, end) + content.count(b"[", start, end)


def _too_complex() -> AnswerTooComplex:
    return AnswerTooComplex(
        f"more than {MAX_ANSWER_VALUES:,} JSON values in one answer (the gateway's limit on what "
        "one GitLab answer may decode to)"
    )


class ArrivingBudget:
    """:func:`check_json_budget`'s counts kept as a JSON answer's chunks arrive: refuses it once
    what has arrived is refused whatever follows. Values past the bound before any ``"`` are all
    outside strings; past it with more than :data:`MAX_STRINGS_SCANNED` strings, the whole answer
    is refused in any case. Counts only grow, so an answer it lets through is then checked whole.
    """

    __slots__ = ("quotes", "size", "values")

    def __init__(self) -> None:
        self.size = 0
        self.values = 0
        self.quotes = 0

    def feed(self, chunk: bytes | bytearray) -> None:
        """Count ``chunk``; raise :class:`AnswerTooComplex` when the answer is already refused.

        Values are counted from the chunk that takes the answer past :data:`MAX_ANSWER_VALUES`
        bytes (fewer bytes cannot hold more values), so a refusal comes at most that many bytes
        later; whether a ``"`` came before is noted from the first chunk on."""
        self.size += len(chunk)
        if self.size <= MAX_ANSWER_VALUES:
            if not self.quotes and b'"' in chunk:
                self.quotes = 1
            return
        self.values += _values(chunk)
        if b'"' in chunk:
            self.quotes += max(1, chunk.count(b'"') - chunk.count(b'\\"'))
        if self.values > MAX_ANSWER_VALUES and (self.quotes == 0 or self.quotes // 2 > MAX_STRINGS_SCANNED):
            raise _too_complex()


def check_json_budget(content: bytes) -> None:
    """Raise :class:`AnswerTooComplex` when ``content`` holds more than :data:`MAX_ANSWER_VALUES`
    JSON values (outside strings).

    No copy of ``content`` is made: the rare answer whose rough count is over the bound (a large
    file's text) has its separators inside strings counted in place, string by string, and only
    when it holds at most :data:`MAX_STRINGS_SCANNED` strings (more strings than that, with that
    many separators, is no answer GitLab gives)."""
    if len(content) <= MAX_ANSWER_VALUES:
        return  # each value counted takes a byte at least
    rough = _values(content)
    if rough <= MAX_ANSWER_VALUES:
        return
    strings = (content.count(b'"') - content.count(b'\\"')) // 2
    if strings <= MAX_STRINGS_SCANNED:
        inside = 0
        for match in _STRING.finditer(content):
            inside += _values(content, *match.span())
        if rough - inside <= MAX_ANSWER_VALUES:
            return
    raise _too_complex()
