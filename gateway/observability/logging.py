"""Structured logs on stderr: one JSON object per line (``logging.format = "json"``) or a plain
human line (``"plain"``), with every token and secret redacted.

Lines the gateway writes (``docs/operations.md`` lists their fields):

- ``gateway.mcp``: one INFO line per MCP request, the access line (the transport;
  ``request_id`` — also sent to GitLab as ``X-Request-Id`` and returned in tool errors —,
  ``method``, ``tool``, ``outcome``, ``duration_ms``, and ``gitlab_requests`` / ``gitlab``, the
  GitLab requests it made as ``operation:status``, and ``trace_id`` with tracing on; see
  :mod:`gateway.observability.access`).
- ``gateway.gitlab``: one DEBUG line per GitLab request (``operation``, ``status``,
  ``duration_ms``), and an INFO line per retry.
- anything else the process logs (aiohttp's server errors, the broker), through the same handler.

Fields are passed with ``extra={...}``. A line logged while :func:`bind_request_id` is active
carries that request id even when the caller did not pass one.

Every line is redacted (:mod:`gateway.observability.redaction` says how) before it is written.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import re
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

from gateway.observability import client_errors as malformed_requests
from gateway.observability.access import TRACE, RequestTrace
from gateway.observability.log_text import (
    FIELD_LIMIT,
    MESSAGE_LIMIT,
    field_limit,
    safe_fields,
    safe_text,
    safe_value,
)
from gateway.observability.redaction import PLAIN_KEY, REDACTED, Redactor, is_sensitive_key

if TYPE_CHECKING:
    from gateway.config import LoggingSettings, Settings


# -- request id ---------------------------------------------------------------------------------

#: The request id of the MCP request being handled in this task (set by :func:`bind_request_id`).
REQUEST_ID: ContextVar[str | None] = ContextVar("gateway_request_id", default=None)


@contextmanager
def bind_request_id(request_id: str | None) -> Iterator[RequestTrace]:
    """Within this block, every log line of this task (and tasks it starts) carries ``request_id``,
    and GitLab requests are noted on the returned trace (for the request's access line)."""
    trace = RequestTrace()
    token = REQUEST_ID.set(request_id)
    trace_token = TRACE.set(trace)
    try:
        yield trace
    finally:
        TRACE.reset(trace_token)
        REQUEST_ID.reset(token)


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` from :data:`REQUEST_ID` to records that have none."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            request_id = REQUEST_ID.get()
            if request_id is not None:
                record.request_id = request_id
        return True


# -- formatters ---------------------------------------------------------------------------------

_RESERVED = frozenset(RESERVED_ATTRS) | {"taskName", "message", "asctime", "color_message"}


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The ``extra={...}`` fields of ``record`` (not the standard ``LogRecord`` attributes)."""
    return {
        key: value
        for key, value in record.__dict__.items()
        if key not in _RESERVED and not key.startswith("_") and value is not None
    }


class JsonLogFormatter(JsonFormatter):
    """One JSON object per line: ``time`` (RFC 3339, UTC), ``level``, ``logger``, ``message``,
    the record's extra fields, and ``exc_info`` / ``stack_info`` as text when present.

    Every value is passed through :meth:`Redactor.redact_value` before serialisation.
    """

    def __init__(self, redactor: Redactor) -> None:
        super().__init__(
            "{levelname}{name}{message}",
            style="{",
            rename_fields={"levelname": "level", "name": "logger"},
            timestamp="time",
            json_ensure_ascii=False,
        )
        self.redactor = redactor

    def add_fields(
        self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]
    ) -> None:
        super().add_fields(log_data, record, message_dict)
        # "time" first for people reading raw lines; dict order is the output order.
        when = log_data.pop("time", None)
        if isinstance(when, datetime):
            stamp = when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
            items = [("time", stamp), *log_data.items()]
            log_data.clear()
            log_data.update(items)
        for key in [k for k, v in log_data.items() if v is None]:
            del log_data[key]

    def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
        redacted: dict[str, Any] = self.redactor.redact_fields(log_data)
        return safe_fields(redacted)  # after redaction: a cut never splits a secret


class PlainLogFormatter(logging.Formatter):
    """A line for people: ``time level logger message key=value...``, redacted part by part."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")
        self.redactor = redactor

    def formatMessage(self, record: logging.LogRecord) -> str:
        # One line, bounded, no raw control characters; redacted before the cut.
        record.message = safe_text(self.redactor.redact(record.message), limit=MESSAGE_LIMIT)
        return super().formatMessage(record)

    def format(self, record: logging.LogRecord) -> str:
        # The message is one line (formatMessage), so a traceback or stack starts at the first
        # newline. Every part is redacted once on its own: the message, each field below, the
        # traceback here; the rest of the line is the time, the level and the logger's name.
        head, sep, tail = super().format(record).partition("\n")
        extras = self._fields(record)
        if extras:
            head = f"{head} {extras}"
        return f"{head}{sep}{self.redactor.redact(tail)}" if sep else head

    def _fields(self, record: logging.LogRecord) -> str:
        """``key=value`` for each extra field, each value redacted, then made one bounded line."""
        redactor = self.redactor
        parts = []
        for key, value in record_fields(record).items():
            if is_sensitive_key(key):
                text = REDACTED
            elif isinstance(value, bool | int | float):
                text = str(value)
            elif isinstance(value, str):
                # Redacted before the cut: a cut never splits a secret.
                text = redactor.redact(value)
                if _BARE_VALUE.fullmatch(text) is None:  # else safe_text and quoting change nothing
                    text = _plain_value(safe_text(text, limit=field_limit(key)))
            else:
                text = _plain_value(safe_value(redactor.redact_value(value), limit=field_limit(key)))
            name = key if _plain_key(key) else safe_text(redactor.redact(key))
            parts.append(f"{name}={text}")
        return " ".join(parts)


#: A value :func:`safe_text` and :func:`_plain_value` leave as it is (no control character, no
#: space, quote or ``=``, within the field limit): nearly every value of the access line.
_BARE_VALUE = re.compile(rf"[A-Za-z0-9_.:/@+\-\[\]]{{1,{FIELD_LIMIT}}}")


@functools.lru_cache(maxsize=256)
def _plain_key(key: str) -> bool:
    """``key`` is a field name the code chose (:data:`PLAIN_KEY`); the same few on every line."""
    return PLAIN_KEY.fullmatch(key) is not None


#: A character that makes a plain ``key=value`` ambiguous (``\s`` is ``str.isspace``'s set).
_NEEDS_QUOTES = re.compile(r'[\s"=]')


def _plain_value(value: Any) -> str:
    if isinstance(value, str):
        # Already safe_text (no control character, separator or surrogate left raw), so other
        # text, such as the cut's "…", is written as it is rather than as a \uNNNN escape.
        if value and _NEEDS_QUOTES.search(value) is None:
            return value
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool | int | float):
        return str(value)
    try:
        return json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return json.dumps(str(value))


# -- set-up -------------------------------------------------------------------------------------

_HANDLER_MARK = "_gateway_handler"
_active: Redactor | None = None

#: Loggers that would add a second line per request (or echo URLs); quiet unless level is DEBUG.
_CHATTY = ("httpx", "httpcore", "aiohttp.access")
#: Loggers quiet even at DEBUG: a line per SQL statement (with its parameters: message bodies)
#: or per HTTP/2 header frame helps no operator.
_NOISY = ("aiosqlite", "hpack", "alembic")


def secrets_of(settings: Settings) -> list[str]:
    """The configured secrets: the service GitLab token, every client token, the console's tokens."""
    out: list[str] = []
    if settings.gitlab.token is not None:
        out.append(settings.gitlab.token.get_secret_value())
    out.extend(client.token.get_secret_value() for client in settings.client_tokens)
    for console_token in (settings.console.operator_token, settings.console.viewer_token):
        if console_token is not None:
            out.append(console_token.get_secret_value())
    if settings.broker.database_url is not None:
        from urllib.parse import unquote, urlsplit

        # The broker database's password, also percent-decoded (psycopg may echo either form).
        with contextlib.suppress(ValueError):
            password = urlsplit(settings.broker.database_url.get_secret_value()).password
            if password:
                out.extend({password, unquote(password)})
    return out


def configure_logging(
    settings: LoggingSettings, *, secrets: Iterable[str] = (), stream: IO[str] | None = None
) -> Redactor:
    """Send every log record of the process to ``stream`` (stderr) in the configured format.

    Replaces a handler installed by an earlier call (tests call this repeatedly); leaves other
    handlers alone. ``httpx``, ``httpcore`` and ``aiohttp.access`` are kept at WARNING unless
    ``level`` is DEBUG, so each GitLab request and MCP request is one line.

    Args:
        settings: ``[logging]``: ``format`` (json | plain) and ``level``.
        secrets: values redacted verbatim (see :func:`secrets_of`).
        stream: where lines go; ``sys.stderr`` by default.

    Returns:
        the installed :class:`Redactor` (also used by :func:`register_secret`).
    """
    global _active
    redactor = Redactor(secrets)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    setattr(handler, _HANDLER_MARK, True)
    handler.setFormatter(
        JsonLogFormatter(redactor) if settings.format == "json" else PlainLogFormatter(redactor)
    )
    handler.addFilter(RequestIdFilter())
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    level = logging.getLevelName(settings.level)
    root.setLevel(level)
    for name in _CHATTY:
        logging.getLogger(name).setLevel(logging.DEBUG if level == logging.DEBUG else logging.WARNING)
    for name in _NOISY:
        logging.getLogger(name).setLevel(logging.WARNING)
    malformed_requests.install()
    _active = redactor
    return redactor


def unconfigure_logging() -> None:
    """Remove the handler :func:`configure_logging` installed (tests; harmless otherwise)."""
    global _active
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(old)
        old.close()
    root.setLevel(logging.WARNING)
    for name in (*_CHATTY, *_NOISY):
        logging.getLogger(name).setLevel(logging.NOTSET)
    _active = None


def register_secret(value: str | None) -> None:
    """Redact ``value`` verbatim from every later log line (a caller's passthrough token, say).

    A no-op before :func:`configure_logging`; the set is bounded (:data:`MAX_RUNTIME_SECRETS`).
    """
    if _active is not None:
        _active.add_secret(value)


def redact(text: str) -> str:
    """``text`` redacted by the installed redactor (or by the pattern rules alone before set-up)."""
    return (_active or Redactor()).redact(text)
