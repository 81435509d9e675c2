"""The README's Python client examples work as printed, against the real gateway: the SDK's
default (MCP 2026-07-28, no session) and its `mode="legacy"` (2025-11-25: initialize, a session)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest

from tests.conftest import REPO
from tests.e2e.harness import GatewayProcess

pytestmark = pytest.mark.e2e

EXAMPLES = REPO / "docs" / "examples"
EXAMPLE = EXAMPLES / "mcp_client.py"
LEGACY_EXAMPLE = EXAMPLES / "mcp_client_legacy.py"


def _run(example: str, url: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / example), url], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_python_sdk_examples_list_tools_and_call_one_in_each_era(
    start_gateway: Callable[..., GatewayProcess],
) -> None:
    gateway = start_gateway(env={"GITLAB_URL": "http://127.0.0.1:9"})  # the broker needs no GitLab
    modern = _run(EXAMPLE.name, gateway.mcp_url)
    assert "get_pipeline, " in modern[0]
    assert modern[-1] == "broker state: IDLE"
    legacy = _run(LEGACY_EXAMPLE.name, gateway.mcp_url)
    assert legacy[0] == "protocol version: 2025-11-25"
    assert legacy[1] == modern[0]  # the same tools in both eras
    assert legacy[-1] == "broker state: IDLE"
    # The gateway saw each era as such: the access lines say which.
    log = gateway.log()
    assert "era=modern" in log and "era=legacy" in log


def test_the_readme_shows_the_example_as_it_is() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    body = EXAMPLE.read_text(encoding="utf-8")
    code = body[body.index("import asyncio") :]
    assert code in readme


def test_the_readme_shows_what_the_legacy_example_changes() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "docs/examples/mcp_client_legacy.py" in readme
    modern = EXAMPLE.read_text(encoding="utf-8").splitlines()
    legacy = LEGACY_EXAMPLE.read_text(encoding="utf-8").splitlines()
    changed = [line for line in legacy[legacy.index("import asyncio") :] if line not in modern]
    assert changed, "the legacy example is the modern one"
    assert [line for line in changed if line.strip() not in readme] == []
