"""Redirect URIs: which ones a client may register, and whether a presented one matches.

- Matching is exact string comparison (OAuth 2.1, draft-ietf-oauth-v2-1 §4.1.3; the MCP
  authorization specification asks for exact matching), with one exception: a loopback
  redirect (``http://127.0.0.1:<port>/…``, ``http://[::1]:<port>/…``, ``http://localhost:<port>/…``)
  matches with any port, because a native client listens on whatever port the system gives it
  (RFC 8252 §7.3, https://www.rfc-editor.org/rfc/rfc8252#section-7.3). GitLab's own OAuth
  provider (doorkeeper) treats loopback redirects the same way.
- Acceptable redirect URIs: ``https`` ones; ``http`` only to a loopback host; private-use
  schemes of native apps (RFC 8252 §7.1, e.g. ``com.example.app:/callback``); never a fragment
  (RFC 6749 §3.1.2) nor userinfo.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from gateway.config import is_loopback

__all__ = ["LOOPBACK_HOSTS", "redirect_uri_matches", "validate_redirect_uri"]

#: Host spellings of a loopback redirect whose port may differ (RFC 8252 §7.3; ``localhost``
#: is NOT RECOMMENDED there, but Claude Code and others use it).
LOOPBACK_HOSTS = ("127.0.0.1", "[::1]", "localhost")

#: Longest redirect URI accepted (characters): a bound, not a rule of any specification.
MAX_REDIRECT_URI_LENGTH = 2000

_LOOPBACK = re.compile(
    r"(?P<origin>http://(?:127\.0\.0\.1|\[::1\]|localhost))(?::(?P<port>[0-9]{1,5}))?(?P<rest>[/?].*)?",
    re.DOTALL,
)

#: RFC 3986 §3.1: scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ).
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")

#: Schemes that run or read something in the browser instead of reaching an app: never a
#: redirect target, whatever a client registers.
_FORBIDDEN_SCHEMES = frozenset(
    (
        "javascript",
        "vbscript",
        "data",
        "file",
        "blob",
        "about",
        "filesystem",
        "view-source",
        "ftp",
        "ws",
        "wss",
    )
)


def _loopback_parts(uri: str) -> tuple[str, str] | None:
    """``(origin without port, path and query)`` of a loopback ``http`` URI, or None."""
    match = _LOOPBACK.fullmatch(uri)
    if match is None:
        return None
    port = match.group("port")
    if port is not None and not 0 < int(port) <= 65535:
        return None
    return match.group("origin"), match.group("rest") or ""


def redirect_uri_matches(registered: str, presented: str) -> bool:
    """Whether ``presented`` (from an authorization or token request) matches ``registered``.

    Exact, case-sensitive string comparison, except that two loopback ``http`` URIs with the
    same host spelling, path and query match whatever their ports (RFC 8252 §7.3):
    ``http://127.0.0.1/cb`` matches ``http://127.0.0.1:53123/cb`` but not
    ``http://localhost:53123/cb``.
    """
    if registered == presented:
        return True
    ours, theirs = _loopback_parts(registered), _loopback_parts(presented)
    return ours is not None and ours == theirs


def validate_redirect_uri(uri: str) -> str | None:
    """None when ``uri`` may be registered as a redirect URI, else why not (one sentence, fit
    for an OAuth ``error_description``: plain ASCII, no quotes).

    Accepted: ``https://host/…``; ``http://`` to ``localhost`` or a loopback IP literal (RFC 8252
    §7.3); a private-use scheme of a native app such as ``com.example.app:/callback`` (RFC 8252
    §7.1: reverse domain names are what it asks for; single-word schemes such as ``cursor:``
    are accepted too, since clients in use rely on them). Refused: relative URIs, fragments,
    userinfo, whitespace or control characters, schemes that run code or read files in the
    browser (``javascript:``, ``data:``, ``file:``…), and URIs longer than 2000 characters.
    """
    if not uri:
        return "a redirect URI is empty"
    if len(uri) > MAX_REDIRECT_URI_LENGTH:
        return f"a redirect URI is longer than {MAX_REDIRECT_URI_LENGTH} characters"
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in uri):
        return "a redirect URI contains whitespace or control characters"
    scheme, colon, _ = uri.partition(":")
    if not colon or not _SCHEME.fullmatch(scheme):
        return (
            "a redirect URI must be an absolute URI with a scheme, such as https://app.example.com/callback"
        )
    if "#" in uri:
        return "a redirect URI must not contain a fragment (#)"
    try:
        parts = urlsplit(uri)
        host = parts.hostname
        parts.port  # noqa: B018  (raises ValueError on a bad port)
    except ValueError:
        return "a redirect URI is not a well-formed URI (check its host and port)"
    if parts.username is not None or parts.password is not None:
        return "a redirect URI must not contain a user name or password"
    lowered = scheme.lower()
    if lowered == "https":
        return None if host else "an https redirect URI must name a host"
    if lowered == "http":
        if host and is_loopback(host):
            return None
        return (
            "http redirect URIs are allowed only to loopback hosts (127.0.0.1, [::1], localhost): use https"
        )
    if lowered in _FORBIDDEN_SCHEMES:
        return f"the {lowered}: scheme is not allowed for redirect URIs"
    return None
