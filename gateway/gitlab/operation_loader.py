"""GraphQL operations: one ``.graphql`` document per operation, sent by file stem.

Documents live in ``gateway/gitlab/operations/<domain>/<name>.graphql`` (validated against
GitLab's published schema by the tests); ``<name>`` is unique across domains and is what the
client sends and metrics label. A selection repeated by several operations is a fragment in
``<name>.fragment.graphql``: a document that spreads ``...Fragment`` gets the fragment's
definition appended when loaded, so GitLab receives one self-contained document.
:func:`graphql_body` builds the request body GitLab's ``/api/graphql`` takes:
``{"query", "operationName", "variables"}``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

OPERATIONS_DIR = Path(__file__).parent / "operations"
FRAGMENT_SUFFIX = ".fragment.graphql"
_OPERATION_NAME = re.compile(r"^\s*(?:query|mutation|subscription)\s+([_A-Za-z][_0-9A-Za-z]*)", re.MULTILINE)
_FRAGMENT_DEFINITION = re.compile(r"^\s*fragment\s+([_A-Za-z][_0-9A-Za-z]*)\s+on\b", re.MULTILINE)
#: ``...Name`` (a fragment spread), not ``... on Type`` (an inline fragment).
_SPREAD = re.compile(r"\.\.\.\s*(?!on\b)([_A-Za-z][_0-9A-Za-z]*)")


@cache
def _files() -> tuple[dict[str, Path], dict[str, Path]]:
    """Operation files by name and fragment files by fragment name, found once."""
    operations: dict[str, Path] = {}  # a name is unique across domains
    fragments: dict[str, Path] = {}
    for path in sorted(OPERATIONS_DIR.rglob("*.graphql")):
        if path.name.endswith(FRAGMENT_SUFFIX):
            for name in _FRAGMENT_DEFINITION.findall(path.read_text(encoding="utf-8")):
                fragments[name] = path
            continue
        if path.stem in operations:
            raise RuntimeError(
                f"two GraphQL operations are named {path.stem!r}: {operations[path.stem]}, {path}"
            )
        operations[path.stem] = path
    return operations, fragments


def operation_path(name: str) -> Path:
    """The file of operation ``name``.

    Raises:
        FileNotFoundError: no such operation.
    """
    path = _files()[0].get(name)
    if path is None:
        raise FileNotFoundError(f"no GraphQL operation {name!r} under {OPERATIONS_DIR}")
    return path


@cache
def load_operation(name: str) -> str:
    """The document sent for operation ``name``: its file plus every fragment file it spreads.

    Raises:
        FileNotFoundError: no such operation, or it spreads a fragment no file defines.
    """
    text = operation_path(name).read_text(encoding="utf-8")
    fragments = _files()[1]
    included: list[Path] = []
    defined = set(_FRAGMENT_DEFINITION.findall(text))  # fragments the file defines itself
    pending = list(_SPREAD.findall(text))
    while pending:
        fragment = pending.pop()
        if fragment in defined:
            continue
        path = fragments.get(fragment)
        if path is None:
            raise FileNotFoundError(
                f"operation {name!r} spreads ...{fragment}, which no fragment file defines"
            )
        if path not in included:
            included.append(path)
            pending.extend(_SPREAD.findall(path.read_text(encoding="utf-8")))
    return "\n".join([text, *(p.read_text(encoding="utf-8") for p in included)]) if included else text


@cache
def operation_name(name: str) -> str | None:
    """The operation name declared in operation ``name``'s file (sent as ``operationName``)."""
    names = _OPERATION_NAME.findall(load_operation(name))
    return names[0] if len(names) == 1 else None


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
    head: dict[str, Any] = {"query": load_operation(name)}
    declared = operation_name(name)
    if declared is not None:
        head["operationName"] = declared
    return _compact(head)[:-1].encode() + b',"variables":'


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
