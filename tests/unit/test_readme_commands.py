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


def test_readme_tools_list_table_is_what_bench_measures() -> None:
    # The README's table is bench/tools_list.py's markdown(): the same toolsets, tool counts, and
    # bytes within a tenth (a description's rewording need not touch the README).
    from bench.tools_list import markdown

    def table(text: str) -> dict[str, tuple[int, int]]:
        found = re.findall(r"^\| (default|all|`\w+`) \| (\d+) \| ([\d,]+) \|$", text, re.MULTILINE)
        return {name: (int(tools), int(size.replace(",", ""))) for name, tools, size in found}

    measured = table(markdown())
    shown = table((REPO / "README.md").read_text())
    assert {k: v[0] for k, v in shown.items()} == {k: v[0] for k, v in measured.items()}, (
        "update README's tools/list table from `python -m bench.tools_list --markdown`"
    )
    for name, (_, size) in measured.items():
        assert abs(shown[name][1] - size) <= size / 10, (name, shown[name][1], size)
