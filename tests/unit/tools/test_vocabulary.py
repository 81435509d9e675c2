"""One name per thing across every tool's arguments: an agent that called one tool with a name
must not be refused by the next for using it.

The table maps each concept to the one name ``inputSchema`` lists, and the other names agents are
known to write for it (GitLab's built-in MCP server, GitLab's REST API, earlier releases of this
gateway). No tool may list another name as its own; every tool that takes the concept accepts the
known ones as aliases, so a call written for another server still works.
"""

from __future__ import annotations

import re

import pytest

from gateway.tools import all_tools
from gateway.tools.registry import Tool, ToolInput, parse_arguments

#: concept's listed name → other names agents write for it.
VOCABULARY: dict[str, frozenset[str]] = {
    "project_id": frozenset({"id", "project", "projectId", "project_path", "projectPath"}),
    "pipeline_id": frozenset({"pipelineId", "pipeline"}),
    "job_id": frozenset({"jobId", "build_id"}),
    "wait_seconds": frozenset({"timeout_sec", "timeout", "timeoutSec", "wait", "wait_sec"}),
    "first": frozenset({"per_page", "page_size", "pageSize", "perPage"}),
    "file_path": frozenset({"filePath", "path"}),
    "plan_id": frozenset({"planId"}),
    "reply_to": frozenset({"replyTo"}),
    "pr_id": frozenset({"prId"}),
    "has_next_phase": frozenset({"hasNextPhase"}),
    "auto_advance": frozenset({"autoAdvance"}),
    "cooldown_minutes": frozenset({"cooldownMinutes"}),
    "tail_lines": frozenset({"tailLines", "tail"}),
    "byte_offset": frozenset({"byteOffset"}),
    "byte_limit": frozenset({"byteLimit"}),
}
#: Aliases every tool taking the thing must accept: GitLab's own server names the project ``id``
#: in some tools and ``project_id`` in others.
REQUIRED_ALIASES = {"id": "project_id"}
_OTHER_NAMES = {other: name for name, others in VOCABULARY.items() for other in others}
_SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
TOOLS = all_tools()


def _listed(tool: Tool) -> list[str]:
    return list(tool.input_schema().get("properties", {}))


def _aliases(tool: Tool) -> dict[str, str]:
    model = tool.input_model
    return dict(model.argument_aliases) if issubclass(model, ToolInput) else {}


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_no_tool_lists_another_name_for_a_known_thing(tool: Tool) -> None:
    wrong = {name: _OTHER_NAMES[name] for name in _listed(tool) if name in _OTHER_NAMES}
    assert not wrong, f"{tool.name} lists {wrong} (other name → the one every tool uses)"


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_arguments_are_snake_case(tool: Tool) -> None:
    assert [n for n in _listed(tool) if not _SNAKE.match(n)] == []


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_aliases_point_at_listed_arguments_and_are_not_listed(tool: Tool) -> None:
    listed = set(_listed(tool))
    for alias, name in _aliases(tool).items():
        assert name in listed, f"{tool.name}: alias {alias!r} names {name!r}, which it does not list"
        assert alias not in listed


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_known_old_names_are_accepted_wherever_the_thing_is_taken(tool: Tool) -> None:
    listed = set(_listed(tool))
    missing = {a: n for a, n in REQUIRED_ALIASES.items() if n in listed and _aliases(tool).get(a) != n}
    assert not missing, f"{tool.name} refuses {missing}"


def test_every_gitlab_tool_that_names_a_project_calls_it_project_id() -> None:
    takers = [t.name for t in TOOLS if "project_id" in _listed(t)]
    assert {"get_pipeline", "list_pipelines", "get_job", "get_artifact_file", "save_pipeline"} <= set(takers)
    assert "get_repository_file" in takers


def test_an_alias_is_read_as_the_listed_argument() -> None:
    tool = next(t for t in TOOLS if t.name == "get_pipeline")
    args = parse_arguments(tool, {"id": "group/project", "pipeline_id": 7})
    assert args.project_id == "group/project"  # type: ignore[attr-defined]


def test_an_alias_and_its_argument_with_different_values_are_refused() -> None:
    from gateway.errors import ToolError

    tool = next(t for t in TOOLS if t.name == "get_job")
    with pytest.raises(ToolError) as caught:
        parse_arguments(tool, {"id": "a/b", "project_id": "c/d", "job_id": 1})
    assert "`id` and `project_id` are two names of one argument" in caught.value.message


def test_broker_camel_case_arguments_still_work() -> None:
    tool = next(t for t in TOOLS if t.name == "set_phase_plan")
    args = parse_arguments(
        tool,
        {
            "planId": "p",
            "phases": [{"phase": 1, "issues": ["A-1"]}],
            "autoAdvance": True,
            "cooldownMinutes": 1,
        },
    )
    assert (args.plan_id, args.auto_advance, args.cooldown_minutes) == ("p", True, 1)  # type: ignore[attr-defined]
