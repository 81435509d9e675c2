"""Shared argument types: one rule for project identifiers and GitLab ids across the tools."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gateway.tools.arguments import OptionalPositiveId, PositiveId, ProjectId
from gateway.tools.registry import ToolInput


class Args(ToolInput):
    project: ProjectId
    pipeline_id: PositiveId
    other: OptionalPositiveId = None


@pytest.mark.parametrize(
    ("given", "project", "pipeline_id"),
    [
        ({"project": 42, "pipeline_id": "7"}, "42", 7),
        ({"project": "grp/sub/proj", "pipeline_id": 7}, "grp/sub/proj", 7),
        ({"project": "grp%2Fsub%2Fproj", "pipeline_id": 7}, "grp%2Fsub%2Fproj", 7),
    ],
)
def test_accepted(given: dict[str, Any], project: str, pipeline_id: int) -> None:
    args = Args.model_validate(given)
    assert (args.project, args.pipeline_id, args.other) == (project, pipeline_id, None)


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"project": "g/p", "pipeline_id": None}, "is required and was null"),
        ({"project": None, "pipeline_id": 1}, "is required and was null"),
        ({"project": "g/p", "pipeline_id": True}, "must be a positive integer"),
        ({"project": "g/p", "pipeline_id": -1}, "must be a positive integer such as 987654, not -1"),
        ({"project": "g/p", "pipeline_id": "../../user"}, "must be a positive integer"),
        ({"project": 0, "pipeline_id": 1}, "project ID 0 must be a positive integer"),
        ({"project": "grp/../proj", "pipeline_id": 1}, "`..` segments"),
        ({"project": ["g/p"], "pipeline_id": 1}, "must be a numeric project ID or a full path string"),
        # The bad value is quoted as the caller wrote it in JSON, and only its start.
        ({"project": "g/p", "pipeline_id": True}, "such as 987654, not true"),
        ({"project": "g/p", "pipeline_id": "../../user"}, 'such as 987654, not "../../user"'),
        ({"project": ["g/p"], "pipeline_id": 1}, 'a full path string, not ["g/p"]'),
        ({"project": "0", "pipeline_id": 1}, 'project ID "0" must be a positive integer'),
        ({"project": "g/p", "pipeline_id": "x" * 500}, f'such as 987654, not "{"x" * 58}…'),
    ],
)
def test_refused(given: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError) as err:
        Args.model_validate(given)
    assert says in str(err.value)


def test_each_waiting_tool_names_its_wait_as_the_schema_does() -> None:
    # The tasks extension reads a call's wait by this name: a name the input schema lacks read
    # every call as the longest wait (a look with wait 0 answered as a task).
    from gateway.mcp.protocol.task_parts import requested_wait
    from gateway.tools import all_tools

    waiting = [t for t in all_tools() if t.wait_argument is not None]
    assert {t.name for t in waiting} >= {"wait_for_message", "get_pipeline"}
    for tool in waiting:
        assert tool.wait_argument in tool.input_model.model_fields, tool.name
    broker_wait = next(t for t in waiting if t.name == "wait_for_message")
    assert requested_wait(broker_wait, {"wait_seconds": 0}) == 0.0
    assert requested_wait(broker_wait, {"timeout_sec": 30}) == 30.0  # the alias, still accepted
