"""Structured logs on stderr: one JSON object per line (``logging.format = "json"``) or a plain
human line (``"plain"``), with every token and secret redacted.

Lines the gateway writes (``docs/operations.md`` lists their fields):

- ``gateway.mcp``: one INFO line per MCP request, the access line (the transport;
  ``request_id`` — also sent to GitLab as ``X-Request-Id`` and returned in tool errors —,
  ``method``, ``tool``, ``outcome``, ``duration_ms``, and ``gitlab_requests`` / ``gitlab``, the
  GitLab requests it made as ``operation:status``; see :mod:`gateway.observability.access`).
- ``gateway.gitlab``: one DEBUG line per GitLab request (``operation``, ``status``,
  ``duration_ms``), and an INFO line per retry.
- anything else the process logs (aiohttp's server errors, the broker), through the same handler.

Fields are passed with ``extra={...}``. A line logged while :func:`bind_request_id` is active
carries that request id even when the caller did not pass one.

Redaction (:class:`Redactor`) runs on every line, whatever logged it, before it is written:

- values of sensitive keys in structured fields (``Authorization``, ``PRIVATE-TOKEN``,
  ``Job-Token``, ``Cookie``, ``token``, ``password``, ``client_secret``...), at any depth;
- in any text (messages, field values, exception text, stack traces, access-log lines):
  ``Bearer``/``Basic`` credentials, ``Header: value`` pairs of those headers, URL query
  parameters such as ``private_token=`` or ``access_token=``, passwords in URLs
  (``https://user:secret@host``), GitLab tokens by their documented prefixes (``glpat-``,
  ``gloas-``, ``gldt-``, ``glrt-``, ``glcbt-``, ``glptt-``, ``glft-``, ``glimt-``, ``glagent-``,
  ``glsoat-``, ``glffct-``..., GitLab docs "Token prefixes",
  https://docs.gitlab.com/security/tokens/#token-prefixes), and the runner registration prefix
  ``GR1348941``;
- every known secret verbatim: the configured service token, the client tokens, and secrets
  registered at run time with :func:`register_secret` (a bounded LRU of callers' passthrough
  tokens of at least 8 characters, looked up by set membership, never by a regular expression
  rebuilt per caller; found as whole runs of token characters, so one glued to other letters or
  digits without a separator is not).

Redacted text reads ``[REDACTED]``; a GitLab token keeps its prefix (``glpat-[REDACTED]``) so an
operator can still tell which kind of token was involved.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import re
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

from gateway.observability import client_errors as malformed_requests
from gateway.observability.access import TRACE, RequestTrace
from gateway.observability.log_text import MESSAGE_LIMIT, safe_fields, safe_text, safe_value

if TYPE_CHECKING:
    from gateway.config import LoggingSettings, Settings

REDACTED = "[REDACTED]"

#: Header and field names whose values are secrets, compared lower-case with ``_`` read as ``-``.
SENSITIVE_KEYS: frozenset[str] = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "private-token",
        "job-token",
        "deploy-token",
        "x-gitlab-token",
        "x-api-key",
        "api-key",
        "apikey",
        "cookie",
        "set-cookie",
        "token",
        "access-token",
        "refresh-token",
        "id-token",
        "gitlab-token",
        "service-token",
        "client-token",
        "client-tokens",
        "password",
        "passwd",
        "secret",
        "client-secret",
        "private-key",
    }
)

#: GitLab's token prefixes (https://docs.gitlab.com/security/tokens/#token-prefixes). An
#: instance-wide prefix (``acme-glpat-...``) still matches: ``-`` ends a word.
GITLAB_TOKEN_PREFIXES: tuple[str, ...] = (
    "glpat",  # personal, project and group access tokens
    "gloas",  # OAuth application secret
    "gldt",  # deploy token
    "glrt",  # runner authentication token
    "glrtr",  # runner authentication token created in the UI
    "glcbt",  # CI/CD job token
    "glptt",  # pipeline trigger token
    "glft",  # feed token
    "glimt",  # incoming mail token
    "glagent",  # GitLab agent for Kubernetes token
    "glsoat",  # SCIM token
    "glffct",  # feature flags client token
)

_QUERY_KEYS = (
    r"private[_-]?token|access[_-]?token|job[_-]?token|refresh[_-]?token|id[_-]?token|"
    r"feed[_-]?token|token|password|passwd|client[_-]?secret|secret|api[_-]?key|_gitlab_session"
)
_HEADER_KEYS = (
    r"proxy-authorization|authorization|private[_-]token|job[_-]token|deploy[_-]token|x-gitlab-token|"
    r"x-api-key|set-cookie|cookie"
)
#: Rules applied to every piece of text, in order. Each keeps what identifies the place
#: (the scheme, the parameter or header name) and drops the secret.
_TEXT_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    # https://user:secret@host → https://[REDACTED]@host (RFC 3986 userinfo).
    (
        re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.\-]*://)[^/\s:@?#]+:[^/\s@?#]+@"),
        r"\g<scheme>" + REDACTED + "@",
    ),
    # Header: value (text, repr of a dict, HTTP dumps). The value runs to the end of the line
    # or to a closing quote, so "Bearer x" goes whole; name=value forms are the next rule's.
    (
        re.compile(
            rf"(?i)\b(?P<key>{_HEADER_KEYS})(?P<sep>[\"']?\s*:\s*[\"']?)(?!\[REDACTED\])(?P<value>[^\r\n\"',}}]+)"
        ),
        r"\g<key>\g<sep>" + REDACTED,
    ),
    # private_token=..., access_token=..., "token": "...", password=... in URLs, forms, JSON.
    (
        re.compile(
            rf"(?i)(?<![A-Za-z0-9])(?P<key>{_QUERY_KEYS})(?P<sep>[\"']?\s*[:=]\s*[\"']?)(?!\[REDACTED\])(?P<value>[^&\s\"',;}}#)>\]]+)"
        ),
        r"\g<key>\g<sep>" + REDACTED,
    ),
    # Bearer / Basic credentials anywhere (RFC 6750 §2.1 token68 syntax).
    (re.compile(r"(?i)\b(?P<scheme>bearer|basic)\s+[A-Za-z0-9\-._~+/]+=*"), r"\g<scheme> " + REDACTED),
    # GitLab tokens by prefix; newer tokens carry dots (routable tokens), so dots belong to them.
    (
        re.compile(r"\b(?P<prefix>" + "|".join(GITLAB_TOKEN_PREFIXES) + r")-[A-Za-z0-9_\-.]+"),
        r"\g<prefix>-" + REDACTED,
    ),
    # Runner registration tokens (deprecated, still issued by older instances).
    (re.compile(r"\bGR1348941[A-Za-z0-9_\-]+"), "GR1348941" + REDACTED),
)

#: A field or header name that cannot hold a secret itself (only its value may).
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
#: Matches wherever one of :data:`_TEXT_RULES` could: a text without it needs none of them.
_RULE_TRIGGER = re.compile(
    r"(?i)://|authoriz|token|cookie|bearer|basic|passw|secret|api[_-]?key|_gitlab_session"
    r"|\bgl[a-z]{2,7}-|GR1348941"
)
# The same test for ASCII text (nearly every line), lower-cased: a case-sensitive search of
# literals skips ahead by their first characters, which the case-insensitive one cannot, and is
# ~5x faster on a log line. Keep the two in step with _RULE_TRIGGER.
_TRIGGER_LOWER = re.compile(
    r"://|authoriz|token|cookie|bearer|basic|passw|secret|api[_-]?key|_gitlab_session|gr1348941"
)
_TRIGGER_GITLAB_PREFIX = re.compile(r"\bgl[a-z]{2,7}-")


def _may_hold_secret(text: str) -> bool:
    """True when one of :data:`_TEXT_RULES` could match ``text`` (:data:`_RULE_TRIGGER` matches)."""
    if not text.isascii():
        return _RULE_TRIGGER.search(text) is not None
    lowered = text.lower()
    return _TRIGGER_LOWER.search(lowered) is not None or (
        "gl" in lowered and _TRIGGER_GITLAB_PREFIX.search(lowered) is not None
    )


#: Shortest configured secret redacted verbatim; shorter ones would blank out ordinary words.
MIN_SECRET_LENGTH = 4
#: Shortest secret registered at run time (:meth:`Redactor.add_secret`). GitLab's tokens are far
#: longer; a shorter value ("test") would blank ordinary words in every later line, and is still
#: redacted where it appears as a header or field value (the key rules above).
MIN_RUNTIME_SECRET_LENGTH = 8
#: Most secrets registered at run time (least recently registered dropped first).
MAX_RUNTIME_SECRETS = 4096
#: Most runtime secrets sharing one anchor (see :meth:`Redactor.add_secret`): bounds the verbatim
#: searches one line can cost, whatever callers sent.
MAX_SECRETS_PER_ANCHOR = 4
#: Runs of token characters (RFC 6750 token68 without ``+/=``, which also separate words in URLs
#: and forms). A runtime secret made only of these is found by a set lookup per run, so the cost
#: of a line does not grow with the number of registered secrets.
_TOKEN_RUN = re.compile(r"[A-Za-z0-9_\-.~]{8,}")
#: Runs of token characters of any length: the anchors of runtime secrets that are not one run.
_ANY_RUN = re.compile(r"[A-Za-z0-9_\-.~]+")


class Redactor:
    """Removes secrets from text and from structured log fields.

    Args:
        secrets: values to remove verbatim wherever they appear (configured tokens).
        max_runtime_secrets: bound of the LRU filled by :meth:`add_secret`.

    Thread-safe: log records may be formatted from any thread.
    """

    def __init__(
        self, secrets: Iterable[str] = (), *, max_runtime_secrets: int = MAX_RUNTIME_SECRETS
    ) -> None:
        self._lock = threading.Lock()
        # Fixed at start: the one regular expression is compiled here and never again.
        self._fixed = frozenset(s for s in secrets if s and len(s) >= MIN_SECRET_LENGTH)
        self._literal = _literal_pattern(self._fixed)
        # Runtime secret -> its anchor ("" for a secret that is one run of token characters).
        self._runtime: OrderedDict[str, str] = OrderedDict()
        self._runs: set[str] = set()  # runtime secrets that are one run of token characters
        self._anchored: dict[str, tuple[str, ...]] = {}  # anchor -> the other runtime secrets
        self._max_runtime = max_runtime_secrets

    def add_secret(self, value: str | None) -> None:
        """Redact ``value`` verbatim from now on (ignored when shorter than
        :data:`MIN_RUNTIME_SECRET_LENGTH`).

        Meant for secrets met while serving (a caller's passthrough GitLab token), so it must stay
        cheap whatever callers send: the set keeps the :data:`MAX_RUNTIME_SECRETS` most recently
        registered, in O(1) per call. A value that is one run of token characters is found by a
        set lookup per run of a line; any other value (``a!b``, ``with space``) is indexed by its
        longest run of token characters (its anchor) and searched verbatim only in lines holding
        that anchor as a whole run, at most :data:`MAX_SECRETS_PER_ANCHOR` per anchor (the oldest
        is dropped). A value with no token character at all is only redacted by the key rules.
        """
        if not value or len(value) < MIN_RUNTIME_SECRET_LENGTH or value in self._fixed:
            return
        anchor = ""
        if not _TOKEN_RUN.fullmatch(value):
            anchor = max(_ANY_RUN.findall(value), key=len, default="")
            if not anchor:
                return
        with self._lock:
            if value in self._runtime:
                self._runtime.move_to_end(value)
                return
            self._runtime[value] = anchor
            if not anchor:
                self._runs.add(value)
            else:
                bucket = self._anchored.get(anchor, ())  # oldest first
                if len(bucket) >= MAX_SECRETS_PER_ANCHOR:
                    self._runtime.pop(bucket[0], None)
                    bucket = bucket[1:]
                self._anchored[anchor] = (*bucket, value)
            while len(self._runtime) > self._max_runtime:
                self._forget(*self._runtime.popitem(last=False))

    def _forget(self, value: str, anchor: str) -> None:
        if not anchor:
            self._runs.discard(value)
            return
        bucket = tuple(s for s in self._anchored.get(anchor, ()) if s != value)
        if bucket:
            self._anchored[anchor] = bucket
        else:
            self._anchored.pop(anchor, None)

    def _runtime_run(self, match: re.Match[str]) -> str:
        run = match.group(0)
        runs = self._runs
        if run in runs:
            return REDACTED
        # "…<secret>." at the end of a sentence, "-<secret>" in a list: punctuation that is also
        # a token character. A secret glued to letters or digits is not found (documented).
        core = run.strip(".-_~")
        if core != run and core in runs:
            return run.replace(core, REDACTED)
        return run

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced (see the module docstring for the rules)."""
        if len(text) < MIN_SECRET_LENGTH:
            return text
        literal = self._literal
        if literal is not None:
            text = literal.sub(REDACTED, text)
        if len(text) >= MIN_RUNTIME_SECRET_LENGTH:
            anchored = self._anchored
            if anchored:
                runs = set(_ANY_RUN.findall(text))
                runs.update([run.strip(".-_~") for run in runs])  # "…<secret>." as below
                # Set intersection in C: the cost of a line does not grow with the secrets held.
                for anchor in anchored.keys() & runs:
                    # Longest first: one secret inside another leaves no partial leftover.
                    for secret in sorted(anchored.get(anchor, ()), key=len, reverse=True):
                        text = text.replace(secret, REDACTED)
            if self._runs:
                text = _TOKEN_RUN.sub(self._runtime_run, text)
        # Most values (ids, names, durations) trigger no rule: one scan decides that.
        if _may_hold_secret(text):
            for pattern, replacement in _TEXT_RULES:
                text = pattern.sub(replacement, text)
        return text

    def redact_value(self, value: Any, *, _depth: int = 0) -> Any:
        """A copy of ``value`` safe to log: mappings lose the values of sensitive keys, strings
        are redacted, sequences are walked; anything else becomes its redacted ``str()``.

        JSON scalars (numbers, booleans, None) pass unchanged. Depth is capped at 8.
        """
        if value is None or isinstance(value, bool | int | float):
            return value
        if isinstance(value, str):
            return self.redact(value)
        if _depth >= 8:
            return REDACTED
        if isinstance(value, Mapping):
            out: dict[str, Any] = {}
            for key, item in value.items():
                name = key if isinstance(key, str) and _PLAIN_KEY.fullmatch(key) else self.redact(str(key))
                out[name] = (
                    REDACTED if is_sensitive_key(str(key)) else self.redact_value(item, _depth=_depth + 1)
                )
            return out
        if isinstance(value, list | tuple | set | frozenset):
            return [self.redact_value(item, _depth=_depth + 1) for item in value]
        if isinstance(value, datetime):
            return value.isoformat()
        return self.redact(str(value))

    def redact_strings(self, value: Any) -> Any:
        """A copy of JSON-like ``value`` with every string redacted; keys and structure kept."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, Mapping):
            return {key: self.redact_strings(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self.redact_strings(item) for item in value]
        return value


def _literal_pattern(values: Iterable[str]) -> re.Pattern[str] | None:
    ordered = sorted(set(values), key=len, reverse=True)  # longest first: no partial leftovers
    return re.compile("|".join(map(re.escape, ordered))) if ordered else None


@functools.lru_cache(maxsize=1024)
def is_sensitive_key(name: str) -> bool:
    """True when a header or field called ``name`` holds a secret (case and ``_``/``-`` ignored)."""
    return name.strip().lower().replace("_", "-") in SENSITIVE_KEYS


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
        redacted: dict[str, Any] = self.redactor.redact_value(log_data)
        return safe_fields(redacted)  # after redaction: a cut never splits a secret


class PlainLogFormatter(logging.Formatter):
    """A line for people: ``time level logger message key=value...``, redacted as a whole."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")
        self.redactor = redactor

    def formatMessage(self, record: logging.LogRecord) -> str:
        # One line, bounded, no raw control characters; redacted before the cut.
        record.message = safe_text(self.redactor.redact(record.message), limit=MESSAGE_LIMIT)
        return super().formatMessage(record)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = safe_value(self.redactor.redact_value(record_fields(record)))
        if fields:
            extras = " ".join(f"{key}={_plain_value(value)}" for key, value in fields.items())
            head, sep, tail = line.partition("\n")  # fields on the first line, traceback after
            line = f"{head} {extras}{sep}{tail}"
        return self.redactor.redact(line)


#: A character that makes a plain ``key=value`` ambiguous (``\s`` is ``str.isspace``'s set).
_NEEDS_QUOTES = re.compile(r'[\s"=]')


def _plain_value(value: Any) -> str:
    if isinstance(value, str):
        return value if value and _NEEDS_QUOTES.search(value) is None else json.dumps(value)
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
    """The configured secrets: the service GitLab token and every client token."""
    out: list[str] = []
    if settings.gitlab.token is not None:
        out.append(settings.gitlab.token.get_secret_value())
    out.extend(client.token.get_secret_value() for client in settings.client_tokens)
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
