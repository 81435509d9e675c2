"""Secrets out of log text and log fields: the rules of :class:`Redactor`.

Redaction (:class:`Redactor`) runs on every line, whatever logged it, before it is written:

- values of sensitive keys in structured fields (``Authorization``, ``PRIVATE-TOKEN``,
  ``Job-Token``, ``Cookie``, ``token``, ``password``, ``client_secret``..., and names ending in
  a parameter name the text rules know, such as ``feed_token`` or ``db_password``), at any depth;
- in any text (messages, field values, exception text, stack traces, access-log lines):
  ``Bearer``/``Basic`` credentials, ``Header: value`` pairs of those headers, URL query
  parameters such as ``private_token=`` or ``access_token=``, passwords in URLs
  (``https://user:secret@host``), GitLab tokens by their documented prefixes (``glpat-``,
  ``gloas-``, ``gldt-``, ``glrt-``, ``glcbt-``, ``glptt-``, ``glft-``, ``glimt-``, ``glagent-``,
  ``glsoat-``, ``glffct-``..., GitLab docs "Token prefixes",
  https://docs.gitlab.com/security/tokens/#token-prefixes), and the runner registration prefix
  ``GR1348941``;
- every known secret verbatim: the configured service token, the client tokens, and secrets
  registered at run time with :meth:`Redactor.add_secret` (a bounded LRU of callers' passthrough
  tokens of at least 8 characters, looked up by set membership, never by a regular expression
  rebuilt per caller; found as whole runs of token characters, so one glued to other letters or
  digits without a separator is not).

Redacted text reads ``[REDACTED]``; a GitLab token keeps its prefix (``glpat-[REDACTED]``) so an
operator can still tell which kind of token was involved.
"""

from __future__ import annotations

import functools
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

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
PLAIN_KEY = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
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
                # A key inside a value may be anyone's (a header name, a caller's map), even a token.
                out[self.redact(str(key))] = (
                    REDACTED if is_sensitive_key(str(key)) else self.redact_value(item, _depth=_depth + 1)
                )
            return out
        if isinstance(value, list | tuple | set | frozenset):
            return [self.redact_value(item, _depth=_depth + 1) for item in value]
        if isinstance(value, datetime):
            return value.isoformat()
        return self.redact(str(value))

    def redact_fields(self, fields: Mapping[str, Any]) -> dict[str, Any]:
        """A log line's fields safe to log: the names are the code's (kept when :data:`PLAIN_KEY`),
        the values as :meth:`redact_value` makes them (sensitive names lose theirs)."""
        return {
            key if PLAIN_KEY.fullmatch(key) else self.redact(key): (
                REDACTED if is_sensitive_key(key) else self.redact_value(value)
            )
            for key, value in fields.items()
        }

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


#: A name ending in a parameter name the text rules redact after ``=`` (``feed_token``,
#: ``db_password``): the value of such a field is as secret as ``feed_token=...`` in a URL.
_SECRET_NAME_END = re.compile(rf"(?i)(?<![A-Za-z0-9])(?:{_QUERY_KEYS})\Z")


@functools.lru_cache(maxsize=1024)
def is_sensitive_key(name: str) -> bool:
    """True when a header or field called ``name`` holds a secret (case and ``_``/``-`` ignored)."""
    name = name.strip()
    return name.lower().replace("_", "-") in SENSITIVE_KEYS or _SECRET_NAME_END.search(name) is not None
