"""The README's commands run what the tests run."""

from __future__ import annotations

import re

from tests.conftest import REPO


def test_readme_runs_the_inspector_version_the_tests_run() -> None:
    # Without a version npx runs whichever Inspector it cached before; one too old for --header
    # fails with "Arguments cannot be passed to a URL-based MCP server".
    installed = re.search(
        r"@modelcontextprotocol/inspector@(\S+)", (REPO / "scripts" / "install-test-tools").read_text()
    )
    assert installed is not None
    readme = (REPO / "README.md").read_text()
    commands = re.findall(r"npx -y (@modelcontextprotocol/inspector\S*)", readme)
    assert commands
    assert set(commands) == {f"@modelcontextprotocol/inspector@{installed[1]}"}


def test_readme_counts_the_tools_a_default_gateway_lists() -> None:
    from gateway.config.clients import DEFAULT_TOOLSETS
    from gateway.tools import all_tools

    served = [t.name for t in all_tools() if t.toolset in DEFAULT_TOOLSETS]
    said = re.search(r"prints `(\d+) tools: ([a-z_]+), ", (REPO / "README.md").read_text())
    assert said is not None
    assert int(said[1]) == len(served) and said[2] == served[0]
