"""Redirect URIs at sign-in: exact matching with free loopback ports (RFC 8252 §7.3), and which
URIs a client may register (https; http to loopback only; private-use schemes; no fragment, no
userinfo)."""

from __future__ import annotations

import pytest

from gateway.signin.redirects import redirect_uri_matches, validate_redirect_uri


@pytest.mark.parametrize(
    ("registered", "presented"),
    [
        ("https://app.example.com/callback", "https://app.example.com/callback"),
        ("http://127.0.0.1/callback", "http://127.0.0.1:53123/callback"),
        ("http://127.0.0.1:3000/callback", "http://127.0.0.1:53123/callback"),
        ("http://[::1]:3000/callback", "http://[::1]:8080/callback"),
        ("http://localhost:3000/callback?x=1", "http://localhost:49152/callback?x=1"),
        ("http://localhost:3000", "http://localhost:49152"),
        ("com.example.app:/oauth2redirect", "com.example.app:/oauth2redirect"),
    ],
)
def test_a_redirect_uri_matches_exactly_or_on_loopback_with_any_port(registered: str, presented: str) -> None:
    assert redirect_uri_matches(registered, presented)


@pytest.mark.parametrize(
    ("registered", "presented"),
    [
        # The port is free only on loopback, over http.
        ("https://app.example.com/callback", "https://app.example.com:8443/callback"),
        ("https://localhost:3000/callback", "https://localhost:4000/callback"),
        ("http://10.0.0.5:3000/callback", "http://10.0.0.5:4000/callback"),
        # Anything but the port must be the same, byte for byte.
        ("http://127.0.0.1:3000/callback", "http://localhost:3000/callback"),
        ("http://127.0.0.1:3000/callback", "http://127.0.0.1:3000/callback/"),
        ("http://127.0.0.1:3000/callback", "http://127.0.0.1:3000/Callback"),
        ("http://127.0.0.1:3000/callback", "http://127.0.0.1:3000/callback?next=/"),
        ("https://app.example.com/callback", "https://APP.example.com/callback"),
        ("https://app.example.com/callback", "https://app.example.com/callback?x=1"),
        # Neither userinfo nor an out-of-range port slips through the loopback rule.
        ("http://127.0.0.1:3000/callback", "http://evil@127.0.0.1:3000/callback"),
        ("http://127.0.0.1:3000/callback", "http://127.0.0.1:99999/callback"),
        ("http://127.0.0.1:3000/callback", "http://127.0.0.1.evil.example:3000/callback"),
    ],
)
def test_any_other_difference_does_not_match(registered: str, presented: str) -> None:
    assert not redirect_uri_matches(registered, presented)


@pytest.mark.parametrize(
    "uri",
    [
        "https://app.example.com/callback",
        "https://app.example.com:8443/oauth/callback?client=1",
        "http://127.0.0.1:3000/callback",
        "http://[::1]/callback",
        "http://localhost:53123/callback",
        "com.example.app:/oauth2redirect",
        "cursor://anysphere.cursor-mcp/oauth/callback",
    ],
)
def test_acceptable_redirect_uris(uri: str) -> None:
    assert validate_redirect_uri(uri) is None


@pytest.mark.parametrize(
    ("uri", "reason"),
    [
        ("", "empty"),
        ("/callback", "absolute URI"),
        ("app.example.com/callback", "absolute URI"),
        ("https://app.example.com/callback#frag", "fragment"),
        ("https://user:pw@app.example.com/callback", "user name or password"),
        ("http://app.example.com/callback", "only to loopback hosts"),
        ("http://10.0.0.5/callback", "only to loopback hosts"),
        ("https:///callback", "must name a host"),
        ("javascript:alert(1)", "javascript: scheme is not allowed"),
        ("data:text/html,hi", "data: scheme is not allowed"),
        ("file:///etc/passwd", "file: scheme is not allowed"),
        ("https://app.example.com/call back", "whitespace"),
        ("https://app.example.com:99999/callback", "port"),
        ("https://app.example.com/" + "a" * 2000, "longer than 2000"),
    ],
)
def test_unacceptable_redirect_uris_say_why(uri: str, reason: str) -> None:
    said = validate_redirect_uri(uri)
    assert said is not None and reason in said
    # Fit for an OAuth error_description (RFC 6749 §5.2): printable ASCII without " or \.
    assert all(0x20 <= ord(ch) <= 0x7E and ch not in '"\\' for ch in said)
