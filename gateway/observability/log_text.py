"""Text fit for a log line: no raw control characters, no unbounded values.

Callers choose method names, tool names, agent ids and activity texts, and all of them reach log
lines. A NUL, an ESC (terminal escape sequences), a C1 control, a line or paragraph separator or a
lone UTF-16 surrogate written raw can forge lines, drive the terminal of whoever reads the log,
or make the UTF-8 encoder of the log stream fail; a bidi override (U+202E) or another format
character displays a line reordered or hides text. They are written as ``\\xNN`` / ``\\uNNNN``
instead; a value longer than its limit keeps its head and says how much was cut.
"""

from __future__ import annotations

import re
from typing import Any

#: Unicode's format characters (general category Cf, Unicode 14): the bidi embeddings, overrides
#: and isolates (U+202A-202E, U+2066-2069) that display a line reversed or reordered, zero-width
#: characters that hide text, the byte-order mark, tags. Listed rather than computed at import (a
#: scan of every code point); a later Unicode's few new ones are the only gap.
_FORMAT = (
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U00013438"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
)
#: C0 controls but TAB and LF, DEL, C1 controls, the separators ``str.splitlines`` breaks on
#: (U+2028, U+2029), lone surrogates (not encodable as UTF-8) and format characters.
_UNSAFE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff{_FORMAT}]")
#: The same plus LF and CR: for values that must stay on one line.
_UNSAFE_ONE_LINE = re.compile(f"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff{_FORMAT}]")

#: Longest field value written whole (a method name, a tool name, an agent id...).
FIELD_LIMIT = 256
#: Longest message written whole (tracebacks are kept whole: they come from our code).
MESSAGE_LIMIT = 8192
#: Fields that hold tracebacks: multi-line by nature, never cut.
TRACEBACK_FIELDS = frozenset({"exc_info", "stack_info"})
#: Fields that hold a sentence of the gateway's own (why a GitLab request is retried, what
#: failed), whose end is the advice: cut at the message's limit, not at a field's.
SENTENCE_FIELDS = frozenset({"reason", "error"})


def field_limit(key: str) -> int:
    """The longest value of field ``key`` written whole."""
    return MESSAGE_LIMIT if key in SENTENCE_FIELDS else FIELD_LIMIT


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def escape_controls(text: str, *, one_line: bool = True) -> str:
    """``text`` with every unsafe character written as an escape (LF and CR too if ``one_line``)."""
    pattern = _UNSAFE_ONE_LINE if one_line else _UNSAFE
    return pattern.sub(_escape, text) if pattern.search(text) else text


def truncate(text: str, limit: int) -> str:
    """``text``, or its first ``limit`` characters and how many more there were."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…[{len(text) - limit} more characters]"


def safe_text(text: str, *, limit: int | None = FIELD_LIMIT, one_line: bool = True) -> str:
    """Cut to ``limit`` (None: no cut), then escaped (cutting first bounds the escaping's work)."""
    return escape_controls(truncate(text, limit) if limit is not None else text, one_line=one_line)


def safe_value(value: Any, *, limit: int = FIELD_LIMIT, _depth: int = 0) -> Any:
    """JSON-like ``value`` with every string (keys too) made :func:`safe_text`."""
    if isinstance(value, str):
        return safe_text(value, limit=limit)
    if _depth >= 8:
        return value
    if isinstance(value, dict):
        return {
            (safe_text(k) if isinstance(k, str) else k): safe_value(v, limit=limit, _depth=_depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [safe_value(item, limit=limit, _depth=_depth + 1) for item in value]
    return value


def safe_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """A log line's fields made safe: tracebacks kept whole (escaped, newlines kept), the
    message and :data:`SENTENCE_FIELDS` cut at :data:`MESSAGE_LIMIT`, every other value at
    :data:`FIELD_LIMIT`."""
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if key in TRACEBACK_FIELDS and isinstance(value, str):
            out[key] = safe_text(value, limit=None, one_line=False)
        elif key == "message" and isinstance(value, str):
            out[key] = safe_text(value, limit=MESSAGE_LIMIT, one_line=False)
        else:
            out[safe_text(key)] = safe_value(value, limit=field_limit(key))
    return out
