"""The README's Python client example works as printed, against the real gateway."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest

from tests.conftest import REPO
from tests.e2e.harness import GatewayProcess

pytestmark = pytest.mark.e2e

EXAMPLE = REPO / "docs" / "examples" / "mcp_client.py"


def test_the_python_sdk_example_lists_tools_and_calls_one(
    start_gateway: Callable[..., GatewayProcess],
) -> None:
    gateway = start_gateway(env={"GITLAB_URL": "http://127.0.0.1:9"})  # the broker needs no GitLab
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), gateway.mcp_url], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "get_pipeline, " in done.stdout
    assert done.stdout.splitlines()[-1] == "broker state: IDLE"


def test_the_readme_shows_the_example_as_it_is() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    body = EXAMPLE.read_text(encoding="utf-8")
    code = body[body.index("import asyncio") :]
    assert code in readme
