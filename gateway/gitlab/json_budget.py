"""How much a GitLab answer may decode to: a bound on JSON values, checked before decoding.

GitLab's answers are read up to :data:`gateway.gitlab.transport.MAX_ANSWER_BYTES` after their
``Content-Encoding`` is decoded, but bytes are not what a JSON decoder allocates: ``[{},{},...]``
costs about 70 bytes of Python objects per 3 bytes of text, so a gzip answer of 65 KB on the wire
(a hostile GitLab or proxy) decoded to 64 MiB of text would become gigabytes of objects. An
answer is therefore decoded only when it holds at most :data:`MAX_ANSWER_VALUES` values, counted
as the separators and containers that make them (``,``, ``{``, ``[``), which C-speed
``bytes.count`` finds in milliseconds. Text inside strings (a file's contents) counts only when
the rough count is over the bound: then the strings are taken out and the structure alone counted.
Depth is bounded by the decoder: orjson refuses nesting past 1,024 levels (the stdlib's decoder,
its fallback, raises ``RecursionError``, read here as the same refusal).
"""

from __future__ import annotations

import re

#: The most JSON values decoded from one GitLab answer (about 70 MiB of Python objects in the
#: worst shape). GitLab's largest JSON answers (a page of 100 pipelines, a pipeline's jobs, a
#: file's contents as one string) hold a few tens of thousands.
MAX_ANSWER_VALUES = 1_000_000
#: A JSON string, escapes included (the unrolled loop: no backtracking).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


class AnswerTooComplex(ValueError):
    """A JSON answer holds more values, or deeper nesting, than the gateway decodes."""


def _values(content: bytes) -> int:
    return content.count(b",") + content.count(b"{") + content.count(b"[")


def check_json_budget(content: bytes) -> None:
    """Raise :class:`AnswerTooComplex` when ``content`` holds more than :data:`MAX_ANSWER_VALUES`
    JSON values (outside strings)."""
    if _values(content) <= MAX_ANSWER_VALUES:
        return
    if _values(_STRING.sub(b'""', content)) > MAX_ANSWER_VALUES:
        raise AnswerTooComplex(
            f"more than {MAX_ANSWER_VALUES:,} JSON values in one answer (the gateway's limit on what "
            "one GitLab answer may decode to)"
        )
