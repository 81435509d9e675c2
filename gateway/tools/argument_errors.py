"""The message a caller gets for arguments that fail validation: one sentence per wrong argument.

Pydantic's own messages name Python's types ("a valid dictionary"); the caller wrote JSON, so a
value of the wrong JSON type is described in JSON's terms (RFC 8259: object, array, string,
number, true/false), followed by the value the caller sent.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from gateway.tools.arguments import shown

#: Pydantic error types that mean "another JSON type was sent", and what was expected instead.
_JSON_TYPES = {
    "dict_type": "a JSON object",
    "model_type": "a JSON object",
    "model_attributes_type": "a JSON object",
    "list_type": "a JSON array",
    "tuple_type": "a JSON array",
    "set_type": "a JSON array",
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
}


def describe_validation_error(tool_name: str, props: Mapping[str, Any], err: ValidationError) -> str:
    """``Invalid arguments for <tool>: ...``: for each wrong argument its name, what was wrong,
    and what it accepts (from ``props``, the input schema's properties)."""
    parts: list[str] = []
    for e in err.errors():
        name = argument_name(e["loc"])
        if e["type"] == "extra_forbidden":
            accepted = ", ".join(props) or "no arguments"
            meant = _meant(name, props)
            hint = f" (did you mean `{meant}`?)" if meant else ""
            parts.append(f"unknown argument `{name}`{hint}; {tool_name} accepts: {accepted}")
            continue
        if e["type"] == "missing":
            parts.append(f"`{name}` is required" + _accepts(props.get(name.split(".")[0])))
            continue
        parts.append(f"`{name}`: {_problem(e)}" + _accepts(props.get(name.split(".")[0])))
    return f"Invalid arguments for {tool_name}: " + "; ".join(parts) + "."


#: Names one tool takes for what another calls otherwise: GitLab's REST API says ``id`` for the
#: project in some places and ``project_id`` in others (every tool here accepts both; a tool
#: declared without the alias still gets the hint).
_SAME_THING = {"id": "project_id", "project_id": "id"}


def _meant(name: str, accepted: Mapping[str, Any]) -> str | None:
    """The accepted argument an unknown ``name`` most likely meant: a near spelling, or the other
    name of the project (``id``, ``project_id``)."""
    other = _SAME_THING.get(name)
    if other in accepted:
        return other
    close = difflib.get_close_matches(name, list(accepted), n=1, cutoff=0.75)
    return close[0] if close else None


def argument_name(loc: Sequence[int | str]) -> str:
    """``variables.0.key`` for a location inside the arguments (``arguments``: the whole object)."""
    return ".".join(str(p) for p in loc) or "arguments"


def _problem(e: ErrorDetails) -> str:
    expected = _JSON_TYPES.get(e["type"])
    if expected is None:
        return e["msg"].removeprefix("Value error, ")
    return f"Input should be {expected}, got {_sent(e.get('input'))}"


def _sent(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return shown(value)


def _accepts(prop: dict[str, Any] | None) -> str:
    """What an argument takes, from its JSON Schema: its values, or the shape of its items and its
    description (after a dash: descriptions have parentheses of their own)."""
    if not prop:
        return ""
    if "enum" in prop:
        return f" (accepts one of: {', '.join(map(str, prop['enum']))})"
    said = [part for part in (_list_shape(prop), str(prop.get("description", "")).rstrip(".")) if part]
    return " — " + ": ".join(said) if said else ""


def _list_shape(prop: dict[str, Any]) -> str:
    """``a list of objects {key, value, variable_type?}`` for an array of objects (``?``: optional)."""
    for branch in [prop, *prop.get("anyOf", [])]:
        items = branch.get("items") if branch.get("type") == "array" else None
        if isinstance(items, dict) and items.get("type") == "object" and items.get("properties"):
            required = set(items.get("required", []))
            keys = [key if key in required else f"{key}?" for key in items["properties"]]
            return "a list of objects {" + ", ".join(keys) + "}"
    return ""
