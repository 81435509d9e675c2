"""GraphQL operations: one ``.graphql`` document per operation, sent by file stem.

Documents live in ``gateway/gitlab/operations/<name>.graphql`` (validated against GitLab's
published schema by the tests). :func:`graphql_body` builds the request body GitLab's
``/api/graphql`` takes: ``{"query", "operationName", "variables"}``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

OPERATIONS_DIR = Path(__file__).parent / "operations"
_OPERATION_NAME = re.compile(r"^\s*(?:query|mutation|subscription)\s+([_A-Za-z][_0-9A-Za-z]*)", re.MULTILINE)


@cache
def load_operation(name: str) -> str:
    """The text of ``operations/<name>.graphql``.

    Raises:
        FileNotFoundError: no such operation file.
    """
    return (OPERATIONS_DIR / f"{name}.graphql").read_text(encoding="utf-8")


@cache
def operation_name(name: str) -> str | None:
    """The operation name declared in ``operations/<name>.graphql`` (sent as ``operationName``)."""
    names = _OPERATION_NAME.findall(load_operation(name))
    return names[0] if len(names) == 1 else None


def graphql_body(name: str, variables: Mapping[str, Any]) -> bytes:
    """The JSON body that runs operation ``name`` with ``variables`` (None values dropped, so
    GraphQL sees them as not given).

    Raises:
        ValueError: a variable is not JSON (NaN, infinity, an object JSON cannot encode).
    """
    body: dict[str, Any] = {"query": load_operation(name)}
    declared = operation_name(name)
    if declared is not None:
        body["operationName"] = declared
    body["variables"] = {key: value for key, value in variables.items() if value is not None}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
