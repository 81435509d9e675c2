"""Rules every declared tool follows, and snapshots of each tool's MCP definition.

Snapshots live in ``tests/snapshots/tools/<tool>.json``; a change to a tool's contract shows up
in review. Regenerate with ``UPDATE_TOOLSNAPS=1 pytest tests/unit/test_tool_contract.py``; a
missing snapshot fails unless regenerating.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from gateway.config import TOOLSETS
from gateway.errors import ToolError
from gateway.tools import all_tools
from gateway.tools.docs import ROOT, outputs, pages
from gateway.tools.registry import NAME_PATTERN, Registry, Tool, parse_arguments

SNAPSHOTS = Path(__file__).resolve().parents[1] / "snapshots" / "tools"
TOOLS = all_tools()


def _walk(schema: Any, path: str = "$") -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(schema, dict):
        out.append((path, schema))
        for key, value in schema.items():
            out.extend(_walk(value, f"{path}.{key}"))
    elif isinstance(schema, list):
        for i, value in enumerate(schema):
            out.extend(_walk(value, f"{path}[{i}]"))
    return out


def test_registry_builds_with_every_tool() -> None:
    Registry(TOOLS)


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_tool_declaration_rules(tool: Tool) -> None:
    assert re.match(NAME_PATTERN, tool.name)
    for alias in tool.aliases:
        assert re.match(NAME_PATTERN, alias)
    assert len(tool.description) >= 20, "describe what the tool does and when to use it"
    schema = tool.input_schema()
    Draft202012Validator.check_schema(schema)
    assert schema["type"] == "object"
    assert schema.get("additionalProperties") is False, "unknown arguments must be refused"
    for name, prop in schema.get("properties", {}).items():
        assert prop.get("description"), f"argument {name!r} has no description"
    for where, node in _walk(schema):
        if node.get("type") == "array":
            assert "items" in node, f"array without items at {where}"
    output = tool.output_schema()
    if output is not None:
        Draft202012Validator.check_schema(output)
    assert tool.to_mcp()["annotations"]["readOnlyHint"] is tool.annotations.read_only
    assert tool.toolset in TOOLSETS, "a toolset operators cannot select with `toolsets`"


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_tool_snapshot(tool: Tool) -> None:
    path = SNAPSHOTS / f"{tool.name}.json"
    current = (
        json.dumps(
            {**tool.to_mcp(), "aliases": list(tool.aliases), "toolset": tool.toolset},
            indent=2,
            sort_keys=True,
        )
        + "\n"
    )
    if os.environ.get("UPDATE_TOOLSNAPS"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(current)
    assert path.exists(), f"no snapshot for {tool.name}: run UPDATE_TOOLSNAPS=1 pytest {__file__}"
    assert path.read_text() == current, (
        f"{tool.name} changed its MCP contract; if intended, UPDATE_TOOLSNAPS=1"
    )


GENERATED = outputs()


@pytest.mark.parametrize("path", sorted(GENERATED), ids=lambda p: str(p.relative_to(ROOT)))
def test_generated_docs_are_current(path: Path) -> None:
    """Every docs/tools page, the index and the README's tool table come from the declarations."""
    if os.environ.get("UPDATE_TOOLSNAPS"):
        path.write_text(GENERATED[path], encoding="utf-8")
    assert path.exists() and path.read_text(encoding="utf-8") == GENERATED[path], (
        f"{path.relative_to(ROOT)} is stale: run python -m gateway.tools.docs"
    )


def test_an_argument_taking_a_list_of_objects_shows_the_fields_of_its_items() -> None:
    broker = (ROOT / "docs" / "tools" / "broker.md").read_text(encoding="utf-8")
    assert "| `phases` | array of object | yes |  | The phases in the order they run |" in broker
    assert "| `phases[].phase` | integer 0..1000000 | yes |  | Phase number |" in broker
    assert "| `phases[].issues` | array of string | yes |  | Issue ids of the phase, in order |" in broker
    save = (ROOT / "docs" / "tools" / "save_pipeline.md").read_text(encoding="utf-8")
    assert '| `variables[].variable_type` | `env_var` \\| `file` |  | `"env_var"` |' in save


def test_the_index_gives_each_tool_its_whole_first_paragraph() -> None:
    index = (ROOT / "docs" / "tools" / "index.md").read_text(encoding="utf-8")
    for tool in TOOLS:
        row = next(line for line in index.splitlines() if line.startswith(f"| `{tool.name}` |"))
        summary = row.rstrip(" |").rsplit(" | ", 1)[-1]
        # A wrapped description is not cut at its first line: the summary ends a sentence.
        assert summary.endswith((".", ")", ":", "`")), (tool.name, summary[-60:])
    assert "`wait_seconds` waits for a running pipeline to finish." in index


def test_every_tool_has_a_generated_page() -> None:
    paged = {tool.name for page in pages() for tool in page.tools}
    assert paged == {tool.name for tool in TOOLS}
    on_disk = {p.name for p in (ROOT / "docs" / "tools").glob("*.md")}
    assert on_disk == {p.name for p in GENERATED if p.parent == ROOT / "docs" / "tools"}, (
        "a page without a module"
    )


@pytest.mark.parametrize("tool", [t for t in TOOLS if t.output_model is not None], ids=lambda t: t.name)
def test_error_results_conform_to_the_output_schema(tool: Tool) -> None:
    """Clients (the MCP Inspector among them) validate structuredContent even on isError results."""
    from gateway.errors import ToolError
    from gateway.tools.registry import ToolResult

    schema = tool.output_schema()
    assert schema is not None
    error = ToolResult.from_error(ToolError("not_found", "Pipeline 9 not found or inaccessible.")).to_mcp()
    Draft202012Validator(schema).validate(error["structuredContent"])
    # ...and the error shape alone does not satisfy a tool whose success fields are required.
    if schema.get("anyOf"):
        assert not Draft202012Validator(schema["anyOf"][0]).is_valid({"error": {}})


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_null_for_an_optional_argument_means_not_given(tool: Tool) -> None:
    # Model clients often send every argument, null for those they leave out: null then means the
    # default, for every optional argument of every tool (it once was an internal error for one,
    # a bad_request for others).
    for name, field in tool.input_model.model_fields.items():
        if field.is_required():
            continue
        try:
            parse_arguments(tool, {name: None})
        except ToolError as err:  # only the required arguments left out may be named
            assert name not in err.details.get("invalid_arguments", []), (name, err.message)
