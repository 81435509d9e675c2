"""GraphQL operations: named operations in ``.graphql`` documents, sent by name.

Documents live in ``gateway/gitlab/operations/<domain>/<file>.graphql`` (validated against
GitLab's published schema by the tests). Every file is self-contained, exactly what GitLab
receives: it holds the fragments it spreads, and operations that share a fragment share a file
(``ci/pipeline_mutations.graphql``). An operation is known by the snake_case form of its GraphQL
name (``query GetPipeline`` is ``get_pipeline``), unique across files; that is what the client is
asked for and what metrics label. :func:`graphql_body` builds the request body GitLab's
``/api/graphql`` takes: ``{"query", "operationName", "variables"}``, the query being the whole file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

from gateway.gitlab.needs import base_name, derive_document, is_derived

OPERATIONS_DIR = Path(__file__).parent / "operations"
_OPERATION_NAME = re.compile(r"^\s*(?:query|mutation|subscription)\s+([_A-Za-z][_0-9A-Za-z]*)", re.MULTILINE)
_WORD_START = re.compile(r"(?<!^)(?=[A-Z])")


class _Operation(NamedTuple):
    path: Path
    declared: str  # the name in the document, sent as ``operationName``


def snake_case(graphql_name: str) -> str:
    """``GetPipeline`` and ``getPipeline`` → ``get_pipeline``."""
    return _WORD_START.sub("_", graphql_name).lower()


@cache
def _operations() -> dict[str, _Operation]:
    """Every named operation under :data:`OPERATIONS_DIR`, by name, found once."""
    operations: dict[str, _Operation] = {}
    for path in sorted(OPERATIONS_DIR.rglob("*.graphql")):
        for declared in _OPERATION_NAME.findall(path.read_text(encoding="utf-8")):
            name = snake_case(declared)
            if name in operations:
                raise RuntimeError(
                    f"two GraphQL operations are named {name!r}: {operations[name].path}, {path}"
                )
            operations[name] = _Operation(path, declared)
    return operations


def _operation(name: str) -> _Operation:
    found = _operations().get(base_name(name))
    if found is None:
        raise FileNotFoundError(f"no GraphQL operation {name!r} under {OPERATIONS_DIR}")
    return found


def operation_path(name: str) -> Path:
    """The file that holds operation ``name``.

    Raises:
        FileNotFoundError: no such operation.
    """
    return _operation(name).path


@cache
def load_operation(name: str) -> str:
    """The document sent for operation ``name``: the whole file that holds it, or for a derived
    name (``get_pipeline[-exitCode]``, :mod:`gateway.gitlab.needs`) the document made from it.

    Raises:
        FileNotFoundError: no such operation.
    """
    text = operation_path(name).read_text(encoding="utf-8")
    return derive_document(name, text) if is_derived(name) else text


def operation_name(name: str) -> str:
    """The GraphQL name of operation ``name`` (sent as ``operationName``).

    Raises:
        FileNotFoundError: no such operation.
    """
    return _operation(name).declared


def graphql_body(name: str, variables: Mapping[str, Any]) -> bytes:
    """The JSON body that runs operation ``name`` with ``variables`` (None values dropped, so
    GraphQL sees them as not given).

    Raises:
        ValueError: a variable is not JSON (NaN, infinity, an object JSON cannot encode).
    """
    given = {key: value for key, value in variables.items() if value is not None}
    return _body_head(name) + _compact(given).encode() + b"}"


@cache
def _body_head(name: str) -> bytes:
    """``{"query":…,"operationName":…,"variables":`` of operation ``name``, encoded once: the
    document is kilobytes of text that JSON escaping would otherwise go over on every call."""
    head = {"query": load_operation(name), "operationName": operation_name(name)}
    return _compact(head)[:-1].encode() + b',"variables":'


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
