"""What callers send never reaches the log raw: control bytes in a method name or an activity line
are escaped, a huge method name is cut, and malformed HTTP is one INFO line, not an aiohttp
traceback at ERROR. Both log formats, read from the real process's output."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable

import httpx
import pytest

from tests.e2e.harness import GatewayProcess
from tests.e2e.rpc import Rpc

pytestmark = pytest.mark.e2e

#: NUL, ESC (a terminal colour sequence), a C1 control, a line separator, a forged line.
NASTY = "x\x00y\x1b[31mred\x9bz\u2028w\nFAKE LINE level=ERROR"
RAW_FORBIDDEN = ("\x00", "\x1b", "\x9b", "\u2028")


def raw_request(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


@pytest.mark.parametrize("fmt", ["json", "plain"])
def test_control_bytes_and_huge_method_names_never_reach_the_log_raw(
    start_gateway: Callable[..., GatewayProcess], fmt: str
) -> None:
    gw = start_gateway(
        env={
            "GATEWAY_LOGGING__FORMAT": fmt,
            "GATEWAY_LOGGING__LEVEL": "DEBUG",
            "GITLAB_URL": "http://127.0.0.1:9",
        }
    )
    huge = "m" * 600_000
    with Rpc(gw.mcp_url) as session:
        for method in (NASTY, huge):
            resp = session.post(json.dumps({"jsonrpc": "2.0", "id": 7, "method": method}))
            assert resp.status_code in (200, 400, 404), resp.status_code
            # Refused at the edge (-32600: control characters) or as an unknown method (-32601).
            assert resp.json()["error"]["code"] in (-32600, -32601)
        call = {
            "jsonrpc": "2.0",
            "id": 8,
            "method": "tools/call",
            "params": {"name": "log_activity", "arguments": {"message": NASTY}},
        }
        session.post(json.dumps(call), {"X-Agent-Id": "dev"})
    gw.stop()
    log = gw.log()
    for forbidden in RAW_FORBIDDEN:
        assert forbidden not in log, f"{forbidden!r} written raw into the {fmt} log"
    assert "\nFAKE LINE" not in log
    assert huge not in log and max(len(line) for line in log.splitlines()) < 20_000
    for path in (gw.state_dir / "logs").glob("*.log"):
        text = path.read_text(encoding="utf-8")
        for forbidden in RAW_FORBIDDEN:
            assert forbidden not in text, f"{forbidden!r} written raw into {path.name}"
        assert "\nFAKE LINE" not in text


def test_malformed_headers_are_one_info_line_not_an_error_traceback(
    start_gateway: Callable[..., GatewayProcess],
) -> None:
    gw = start_gateway(env={"GITLAB_URL": "http://127.0.0.1:9", "GATEWAY_LOGGING__FORMAT": "json"})
    bad = [
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nBroken header line\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Bad\x00Name: 1\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Long: " + b"a" * 70_000 + b"\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: nope\r\n\r\n",
    ]
    for data in bad:
        answer = raw_request(gw.port, data)
        assert answer[:12] in (b"HTTP/1.1 400", b"HTTP/1.0 400"), answer[:100]
    assert httpx.get(f"{gw.url}/healthz", timeout=5).status_code == 200  # still serving
    gw.stop()
    lines = [json.loads(line) for line in gw.log().splitlines() if line.startswith("{")]
    assert not [line for line in lines if line.get("level") == "ERROR"], "malformed requests logged as ERROR"
    assert "Traceback" not in gw.log()
    refused = [line for line in lines if "malformed HTTP request" in line.get("message", "")]
    assert len(refused) == len(bad)
