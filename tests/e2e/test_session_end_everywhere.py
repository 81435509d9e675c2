"""Sessions across gateway processes: two replicas on one PostgreSQL broker database with one
session key, passthrough mode (each caller's own GitLab token). A session opened on one is served
by the other and after a restart; one ended by DELETE on one is not found on either, nor after a
restart, nor on a replica that moved to the next key."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import GatewayProcess
from tests.e2e.rpc import ACCEPT, PROTOCOL, initialize_request

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

KEY = base64.b64encode(bytes(range(32))).decode()
NEXT_KEY = base64.b64encode(bytes(range(1, 33))).decode()
HEADERS = {"Accept": ACCEPT, "Content-Type": "application/json", "PRIVATE-TOKEN": "glpat-caller-0000000001"}
PING = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})


def gateway(tmp_path: Path, name: str, postgres_url: str, **env: str) -> GatewayProcess:
    return GatewayProcess(
        env={
            "GITLAB_URL": "http://127.0.0.1:9",
            "GATEWAY_GITLAB__CREDENTIAL_MODE": "passthrough",
            "GATEWAY_BROKER__DATABASE_URL": postgres_url,
            "GATEWAY_SERVER__SESSION_KEY": KEY,
            **env,
        },
        state_dir=tmp_path / name,
    )


def open_session(http: httpx.Client, g: GatewayProcess) -> str:
    answer = http.post(g.mcp_url, content=json.dumps(initialize_request("t", PROTOCOL)), headers=HEADERS)
    assert answer.status_code == 200, answer.text
    return str(answer.headers["Mcp-Session-Id"])


def ping(http: httpx.Client, g: GatewayProcess, sid: str) -> int:
    headers = {**HEADERS, "Mcp-Session-Id": sid, "MCP-Protocol-Version": PROTOCOL}
    return http.post(g.mcp_url, content=PING, headers=headers).status_code


def test_sessions_span_replicas_and_restarts_until_deleted_anywhere(
    tmp_path: Path, postgres_url: str
) -> None:
    a = gateway(tmp_path, "a", postgres_url).start(60.0)
    b = gateway(tmp_path, "b", postgres_url).start(60.0)
    try:
        with httpx.Client(timeout=30, trust_env=False) as http:
            kept, ended = open_session(http, a), open_session(http, a)
            # The caller's session, found by the other replica: its owner is bound under the
            # shared key, not under one made at random per process.
            assert ping(http, b, kept) == 200
            headers = {**HEADERS, "Mcp-Session-Id": ended, "MCP-Protocol-Version": PROTOCOL}
            assert http.delete(a.mcp_url, headers=headers).status_code == 204
            assert ping(http, a, ended) == 404
            assert ping(http, b, ended) == 404
            a.stop()
            a.start(60.0)
            assert ping(http, a, kept) == 200
            assert ping(http, a, ended) == 404
            b.stop()
            # The next key in place, the old one as previous (a rotation's second step).
            b = gateway(
                tmp_path,
                "b",
                postgres_url,
                GATEWAY_SERVER__SESSION_KEY=NEXT_KEY,
                GATEWAY_SERVER__SESSION_PREVIOUS_KEY=KEY,
            ).start(60.0)
            assert ping(http, b, kept) == 200
            assert ping(http, b, ended) == 404
    finally:
        a.stop()
        b.stop()
