"""The transport's parts on their own: Host/Origin rules, the session store, Accept parsing."""

from __future__ import annotations

import pytest

from gateway.config import ServerSettings
from gateway.mcp.security import OriginHostGuard, split_host
from gateway.mcp.sessions import SessionsFull, SessionStore
from gateway.mcp.transport import _acceptable


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("localhost", ("localhost", None)),
        ("LocalHost:8080", ("localhost", "8080")),
        ("[::1]:9000", ("::1", "9000")),
        ("[::1]", ("::1", None)),
        ("example.com.", ("example.com", None)),
        ("::1", ("::1", None)),
        ("host:notaport", ("host:notaport", None)),
    ],
)
def test_split_host(value: str, expected: tuple[str, str | None]) -> None:
    assert split_host(value) == expected


def test_guard_on_loopback() -> None:
    guard = OriginHostGuard(ServerSettings(host="127.0.0.1"))
    assert guard.check("localhost:1", "http://127.0.0.1:2") is None
    assert guard.check("127.0.0.1", None) is None
    assert guard.check(None, None) is None
    assert guard.check("evil.example.com", None) is not None
    assert guard.check("localhost", "http://evil.example.com") is not None
    assert guard.check("localhost", "file://") is not None
    assert guard.check("localhost", "http://localhost/path") is not None
    assert guard.check("localhost.evil.com", None) is not None


def test_guard_bound_to_an_address_accepts_it() -> None:
    guard = OriginHostGuard(ServerSettings(host="10.1.2.3"))
    assert not guard.checks_host
    assert guard.check("anything:80", "http://10.1.2.3:8080") is None
    assert guard.check("anything:80", "http://10.1.2.4:8080") is not None


def test_guard_with_allowed_hosts_off_loopback_checks_host() -> None:
    guard = OriginHostGuard(ServerSettings(host="0.0.0.0", allowed_hosts=("gw.example.com",)))
    assert guard.checks_host
    assert guard.check("gw.example.com:443", None) is None
    assert guard.check("localhost:8080", None) is None
    assert guard.check("other.example.com", None) is not None
    assert guard.check("0.0.0.0:8080", None) is not None


def test_guard_cache_stays_bounded() -> None:
    guard = OriginHostGuard(ServerSettings())
    for i in range(1000):
        guard.host_allowed(f"h{i}.example.com")
    assert len(guard._host_ok) <= 256


def test_session_store_ttl_and_cap() -> None:
    now = [0.0]
    store = SessionStore(ttl_seconds=10, max_sessions=2, clock=lambda: now[0])
    a = store.create("2025-11-25", owner=None, client_info=None)
    now[0] = 5
    b = store.create("2025-11-25", owner=None, client_info=None)
    assert store.get(a.id) is a  # a is now the most recently used
    c = store.create("2025-11-25", owner=None, client_info=None)  # evicts b
    assert store.get(b.id) is None
    assert len(store) == 2
    now[0] = 16  # a and c last used at 5
    assert store.get(c.id) is None
    assert store.get(a.id) is None
    assert len(store) == 0


class _Busy:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def cancel(self, reason: str) -> None:
        self.reasons.append(reason)


def test_session_store_full_of_busy_sessions_refuses() -> None:
    store = SessionStore(ttl_seconds=10, max_sessions=1)
    session = store.create("2025-11-25", owner=None, client_info=None)
    busy = _Busy()
    session.inflight[1] = busy
    with pytest.raises(SessionsFull):
        store.create("2025-11-25", owner=None, client_info=None)
    assert store.close(session.id) is session
    assert busy.reasons == ["session_closed"]
    assert store.close(session.id) is None


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        ("application/json, text/event-stream", (True, True)),
        ("text/event-stream;q=1, application/json;q=0.5", (True, True)),
        ("application/json", (True, False)),
        ("text/event-stream", (False, True)),
        ("*/*", (True, True)),
        ("text/html", (False, False)),
    ],
)
def test_acceptable(accept: str, expected: tuple[bool, bool]) -> None:
    assert _acceptable(accept) == expected
