"""The transport's parts on their own: Host/Origin rules, sealed sessions, Accept parsing, the
encoding of tool results."""

from __future__ import annotations

import base64

import pytest
from mcp_types import JSONRPCResponse

from gateway.config import ServerSettings
from gateway.mcp.http.middlewares import _acceptable
from gateway.mcp.http.security import OriginHostGuard, split_host
from gateway.mcp.http.sessions import Session, SessionSealer, decode_key
from gateway.mcp.protocol.shaping import shaped, shaped_tool_result
from gateway.mcp.protocol.wire import encode, response
from gateway.tools.result import ToolResult


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


def _sealer(now: list[float], **kw: object) -> SessionSealer:
    return SessionSealer(
        key=bytes(range(32)),
        ttl_seconds=10,
        clock=lambda: now[0],
        **kw,  # type: ignore[arg-type]
    )


def test_sealed_session_round_trip_and_refusals() -> None:
    now = [1000.0]
    sealer = _sealer(now)
    session = sealer.issue("2025-06-18", {"roots": {}}, owner="agent:pm|gitlab:abc")
    opened = sealer.open(session.id, "agent:pm|gitlab:abc")
    assert opened is not None
    assert (opened.protocol_version, opened.capabilities) == ("2025-06-18", {"roots": {}})
    # Another caller's credential: not found.
    assert sealer.open(session.id, "agent:dev|gitlab:abc") is None
    # One byte changed anywhere in the sealed part: not found.
    for i in range(3, len(session.id)):
        flipped = "A" if session.id[i] != "A" else "B"
        assert sealer.open(session.id[:i] + flipped + session.id[i + 1 :], "agent:pm|gitlab:abc") is None
    # Sealed with another key: not found.
    other = SessionSealer(key=bytes(32), ttl_seconds=10)
    assert other.open(session.id, "agent:pm|gitlab:abc") is None
    # The next key in place, this one as previous: still found, and still only by its owner.
    rotated = SessionSealer(
        key=bytes(32), previous_key=bytes(range(32)), ttl_seconds=10, clock=lambda: now[0]
    )
    assert rotated.open(session.id, "agent:pm|gitlab:abc") is not None
    assert rotated.open(session.id, "agent:dev|gitlab:abc") is None
    # Past its expiry: not found.
    now[0] += 10
    assert sealer.open(session.id, "agent:pm|gitlab:abc") is None


def test_a_session_id_is_decrypted_once_and_still_checked_on_every_request() -> None:
    now = [1000.0]
    sealer = _sealer(now)
    session = sealer.issue("2025-11-25", {}, owner="agent:pm")
    opened: list[str] = []
    open_sealed = sealer._open_sealed

    def counting(session_id: str) -> Session | None:
        opened.append(session_id)
        return open_sealed(session_id)

    sealer._open_sealed = counting  # type: ignore[method-assign]
    for _ in range(3):
        assert sealer.open(session.id, "agent:pm") is not None
    assert opened == [session.id]
    # Found by its id, it is still only its owner's, and still expires.
    assert sealer.open(session.id, "agent:dev") is None
    now[0] += 10
    assert sealer.open(session.id, "agent:pm") is None
    # An id that does not open is not kept: each try is checked again.
    assert sealer.open(session.id + "A", "agent:pm") is None
    assert sealer.open(session.id + "A", "agent:pm") is None
    assert opened.count(session.id + "A") == 2


def test_a_session_is_bound_to_how_its_caller_was_authenticated() -> None:
    sealer = _sealer([0.0])
    session = sealer.issue("2025-11-25", {}, owner="open")
    assert sealer.open(session.id, "open") is not None
    # Where callers present client tokens, an id issued where nobody did is nobody's.
    assert sealer.open(session.id, "client-token:pm") is None
    assert "open" not in session.owner  # a keyed hash, not the owner itself


@pytest.mark.parametrize("value", ["", "v1.", "v1.!!!", "nope", "v1." + "A" * 5000])
def test_garbage_session_ids_are_not_found(value: str) -> None:
    assert _sealer([0.0]).open(value, "open") is None


def test_session_key_must_be_32_bytes() -> None:
    assert decode_key(base64.b64encode(bytes(32)).decode()) == bytes(32)
    assert decode_key(base64.urlsafe_b64encode(b"\xff" * 32).decode().rstrip("=")) == b"\xff" * 32
    with pytest.raises(ValueError, match="32"):
        decode_key(base64.b64encode(bytes(16)).decode())
    with pytest.raises(ValueError, match="base64"):
        decode_key("not base64 at all!")


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        ("application/json, text/event-stream", True),
        ("text/event-stream;q=1, application/json;q=0.5", True),
        ("application/json", False),
        ("text/event-stream", False),
        ("*/*", True),
        ("text/html", False),
    ],
)
def test_acceptable(accept: str, expected: bool) -> None:
    assert _acceptable(accept) == expected


@pytest.mark.parametrize("version", ["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"])
def test_a_tool_result_is_written_as_the_full_surface_shaping_writes_it(version: str) -> None:
    # The tool result path shapes the envelope alone and writes it with orjson; what a client
    # reads must stay what the protocol's result type gives, an integer past 64 bits included.
    structured = {"jobs": [{"id": 1, "name": "rspec é", "tags": ["a"], "duration": 1.5, "x": None}]}
    for result in (
        ToolResult(structured=structured),
        ToolResult(structured={"big": 2**70}, text="a note"),
        ToolResult(structured={"error": {"reason": "not_found", "message": "m"}}, text="m", is_error=True),
    ):
        full = encode(
            JSONRPCResponse(jsonrpc="2.0", id=7, result=shaped("tools/call", version, result.to_mcp()))
        )
        assert response(7, shaped_tool_result(version, result)) == full
