"""JSON Schemas of the tools' models, as ``tools/list`` and the docs give them: as small as they
can be without saying less (``$ref``s inlined, titles and keywords that say nothing dropped, bare
``anyOf`` types merged), the prose left out where only a validator reads them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from gateway.errors import REASONS
from gateway.gitlab.urls import MAX_ID

#: ``structuredContent.error`` of an ``isError: true`` result (see :meth:`ToolError.to_structured`).
ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reason": {"type": "string", "enum": list(REASONS)},
        "message": {"type": "string"},
    },
    "required": ["reason", "message"],
}


def json_schema(model: type[BaseModel], *, share_repeated: bool = False) -> dict[str, Any]:
    """``model``'s JSON Schema, as small as it can be without saying less.

    Local ``$ref``s are inlined (non-recursive ones): a model reading an ``inputSchema`` should not
    have to resolve references, and some model APIs refuse them. With ``share_repeated`` (output
    schemas, which validators read), a definition that would be inlined more than once is kept
    once in ``$defs`` instead. Titles are dropped, and ``anyOf`` of bare types
    (``[{"type": "string"}, {"type": "null"}]``) becomes one ``type`` list: the same schema in
    JSON Schema 2020-12, a quarter of the bytes.
    """
    raw = model.model_json_schema()
    defs = raw.pop("$defs", {})
    inlined: dict[str, Any] = {}

    def walk(node: Any, seen: tuple[str, ...]) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                name = ref.split("/")[-1]
                if name in seen:
                    return {"type": "object"}
                if name not in inlined and name not in seen:
                    inlined[name] = walk(defs[name], (*seen, name))
                extra = {k: walk(v, seen) for k, v in node.items() if k not in ("$ref", "title")}
                return {**inlined[name], **extra}
            out = {k: walk(v, seen) for k, v in node.items() if not _says_nothing(k, v)}
            return _bare_types(out)
        if isinstance(node, list):
            return [walk(v, seen) for v in node]
        return node

    out: dict[str, Any] = walk(raw, ())
    assert isinstance(out, dict)
    return _share_repeated(out, inlined) if share_repeated else out


def _says_nothing(key: str, value: Any) -> bool:
    """A keyword that adds nothing a reader or validator uses: a title (the property's name,
    reworded), ``additionalProperties: true`` (JSON Schema's default) and ``default: null`` (no
    value of the declared type; leaving the argument out is how it is not given), and an id's
    ``maximum`` of 2**63 - 1 (GitLab's ids are 64-bit; no agent meets the bound, and the
    gateway still refuses a larger one)."""
    return (
        (key == "title" and isinstance(value, str))
        or (key == "additionalProperties" and value is True)
        or (key == "default" and value is None)
        or (key == "maximum" and value == MAX_ID)
    )


def without_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: without_descriptions(v)
            for k, v in node.items()
            # a field named description or additionalProperties stays: only the keywords go
            if not (k == "description" and isinstance(v, str))
            and not (k == "additionalProperties" and v is False)
        }
    if isinstance(node, list):
        return [without_descriptions(v) for v in node]
    return node


def _bare_types(node: dict[str, Any]) -> dict[str, Any]:
    branches = node.get("anyOf")
    if (
        isinstance(branches, list)
        and len(branches) > 1
        and all(isinstance(b, dict) and set(b) == {"type"} and isinstance(b["type"], str) for b in branches)
        and "type" not in node
    ):
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        return {"type": [b["type"] for b in branches], **rest}
    return node


def _share_repeated(schema: dict[str, Any], definitions: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` with each definition that appears in it more than once moved to ``$defs``."""

    def key(node: Any) -> str:
        return json.dumps(node, sort_keys=True)

    counts: dict[str, int] = {}

    def count(node: Any) -> None:
        if isinstance(node, dict):
            counts[key(node)] = counts.get(key(node), 0) + 1
            for v in node.values():
                count(v)
        elif isinstance(node, list):
            for v in node:
                count(v)

    count(schema)
    shared = {key(d): name for name, d in definitions.items() if counts.get(key(d), 0) > 1}
    if not shared:
        return schema
    kept: dict[str, Any] = {}

    def replace(node: Any, top: bool = False) -> Any:
        if isinstance(node, dict):
            name = None if top else shared.get(key(node))
            if name is not None:
                if name not in kept:
                    kept[name] = None  # reserve: a definition never refers to itself here
                    kept[name] = {k: replace(v) for k, v in node.items()}
                return {"$ref": f"#/$defs/{name}"}
            return {k: replace(v) for k, v in node.items()}
        if isinstance(node, list):
            return [replace(v) for v in node]
        return node

    out: dict[str, Any] = replace(schema, top=True)
    out["$defs"] = kept
    return out
