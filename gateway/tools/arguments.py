"""Argument types shared by the GitLab tools, so a project or an id is checked the same way everywhere.

- :data:`ProjectId` / :data:`OptionalProjectId`: a numeric project ID (JSON number or digits) or a
  full path (``group/subgroup/project``, or URL-encoded once); normalised to a string, checked
  before any request (identifiers are validated before they reach a
  GitLab path).
- :data:`PositiveId` / :data:`OptionalPositiveId`: a positive integer below 2**63 (GitLab's ids
  are bigint); digits in a string are accepted, booleans are not (pydantic's lax mode would read
  ``true`` as 1).
- :func:`schema_extra`: states in the JSON Schema what the validators enforce, and drops
  ``"default": null`` from optional arguments (null is no value of their declared type).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import BeforeValidator, Field
from pydantic.json_schema import SkipJsonSchema

from gateway.gitlab.errors import InvalidReference
from gateway.gitlab.urls import MAX_ID, is_numeric_id, project_full_path

PROJECT_ID_DOC = (
    "ID or full path of the project, e.g. `42` or `group/subgroup/project` (URL-encoded "
    "`group%2Fsubgroup%2Fproject` is accepted too)."
)
#: Every GitLab tool names the project ``project_id``. GitLab's built-in MCP server says ``id`` in
#: some tools (``get_pipeline``, ``get_job``) and ``project_id`` in others (``get_artifact_file``,
#: ``save_pipeline``, ``get_repository_file``); every tool here accepts ``id`` too, never listed.
PROJECT_ALIASES: Mapping[str, str] = MappingProxyType({"id": "project_id"})
_ID_RANGE = {"minimum": 1, "maximum": MAX_ID}
#: A JSON null for a required argument (some clients send null for a value they could not parse).
_NULL = "is required and was null; give a value"


def shown(value: Any, limit: int = 60) -> str:
    """``value`` as the caller wrote it, in JSON (``true``, ``"abc"``, not Python's ``True``,
    ``'abc'``), cut to ``limit`` characters: an error quotes a bad argument, never all of a large one."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def project_id(value: Any) -> str:
    """Validate a project identifier; return digits for an ID, the path as given otherwise.

    Raises:
        ValueError: not a string or integer, a non-positive ID, or a path GitLab cannot have
            (no namespace, empty or ``..`` segments, encoded twice).
    """
    if value is None:
        raise ValueError(_NULL)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"must be a numeric project ID or a full path string, not {shown(value)}")
    if is_numeric_id(value):
        number = int(value)
        if not 0 < number <= MAX_ID:
            raise ValueError(f"project ID {shown(value)} must be a positive integer")
        return str(number)
    try:
        project_full_path(str(value))
    except InvalidReference as err:
        raise ValueError(err.message) from None
    return str(value)


def text_argument(value: Any) -> Any:
    """A string argument that also takes a JSON number (a ref such as ``1234``), never a boolean.

    Raises:
        ValueError: anything else.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f"must be a string, not {shown(value)}")
    return str(value)


def digits_read(value: Any) -> Any:
    """Digits in a string (``"42"``, ``" 42 "``) as the integer they write; anything else as it is.
    Integer arguments accept them because the intent is plain; ``true`` or ``2.0`` stay what they
    are, for the caller's check to refuse."""
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        return int(value.strip())
    return value


def positive_id(value: Any) -> int:
    """Validate a GitLab id: a positive integer (digits in a string accepted).

    Raises:
        ValueError: anything else, booleans included.
    """
    if value is None:
        raise ValueError(_NULL)
    value = digits_read(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"must be a positive integer such as 987654, not {shown(value)}")
    if not 0 < value <= MAX_ID:
        raise ValueError(f"must be a positive integer such as 987654, not {shown(value)}")
    return value


def optional(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``check`` for an optional argument: None passes through."""
    return lambda value: None if value is None else check(value)


def schema_extra(**extra: Any) -> Callable[[dict[str, Any]], None]:
    """``json_schema_extra`` for an argument: add ``extra`` (constraints the validators enforce)
    and drop ``"default": null``, which is no value of the argument's declared type."""

    def update(schema: dict[str, Any]) -> None:
        if schema.get("default", 0) is None:
            del schema["default"]
        schema.update(extra)

    return update


ProjectId = Annotated[str, BeforeValidator(project_id), Field(description=PROJECT_ID_DOC)]
OptionalProjectId = Annotated[
    str | SkipJsonSchema[None],
    BeforeValidator(optional(project_id)),
    Field(description=PROJECT_ID_DOC, json_schema_extra=schema_extra()),
]
PositiveId = Annotated[int, BeforeValidator(positive_id), Field(json_schema_extra=_ID_RANGE)]
OptionalPositiveId = Annotated[
    int | SkipJsonSchema[None],
    BeforeValidator(optional(positive_id)),
    Field(json_schema_extra=schema_extra(**_ID_RANGE)),
]
OptionalText = Annotated[
    str | SkipJsonSchema[None], BeforeValidator(text_argument), Field(json_schema_extra=schema_extra())
]
