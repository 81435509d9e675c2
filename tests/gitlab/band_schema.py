"""A GitLab band's GraphQL schema: the newest schema minus what :mod:`tests.gitlab.versions` says it lacks.

Works on the newest schema's introspection result (cached per machine by
:mod:`tests.standin.schema_cache`), removes the declared types, fields, arguments, input fields and
enum values, then sweeps what can no longer exist (a field whose type was removed, an argument or
input field of a removed type, a union member or interface implementation that is gone) until
nothing changes, and builds the rest with ``build_client_schema``.

``python -m tests.gitlab.band_schema 17.5 ce`` prints that band's SDL.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from functools import cache
from pathlib import Path
from typing import Any

from graphql import GraphQLSchema, build_client_schema, print_schema

from tests.gitlab.versions import ARRIVALS, EE_ONLY_TYPES, NEWEST, Edition, has, parse_version
from tests.standin.schema_cache import gitlab_introspection

SCHEMA_FILE = Path(__file__).with_name("gitlab_schema.graphql")

_ROOTS = ("queryType", "mutationType", "subscriptionType")


def _named(ref: dict[str, Any]) -> str:
    while ref.get("ofType") is not None:
        ref = ref["ofType"]
    return str(ref["name"])


def _required(ref: dict[str, Any]) -> bool:
    return ref.get("kind") == "NON_NULL"


def _parse(coordinate: str) -> tuple[str, str | None, str | None]:
    """``Type.field(arg:)`` as ``(Type, field, arg)``; ``Enum.VALUE`` as ``(Enum, VALUE, None)``."""
    type_name, _, rest = coordinate.partition(".")
    if not rest:
        return type_name, None, None
    member, _, arg = rest.partition("(")
    return type_name, member, (arg.rstrip("):") or None)


def removed_coordinates(version: str, edition: Edition) -> list[str]:
    """The declared coordinates (and EE-only type patterns on CE) that the band lacks."""
    gone = [a.coordinate for a in ARRIVALS if not has(a, version, edition)]
    if edition == "ce":
        gone += list(EE_ONLY_TYPES)
    return gone


def band_introspection(version: str, edition: Edition, sdl: Path = SCHEMA_FILE) -> dict[str, Any]:
    """The introspection result of the band's schema (a new dict; the cached one is not changed)."""
    data = _copy(gitlab_introspection(sdl))
    schema = data["__schema"]
    types: dict[str, dict[str, Any]] = {t["name"]: t for t in schema["types"]}
    dead: set[str] = set()
    # Arguments first: a field removed too must still be there when its argument goes.
    for coordinate in sorted(removed_coordinates(version, edition), key=lambda c: "(" not in c):
        type_name, member, arg = _parse(coordinate)
        if member is None:
            matched = [n for n in types if fnmatch.fnmatchcase(n, type_name)]
            if not matched:
                raise KeyError(f"{coordinate}: no such type in {sdl.name}")
            dead.update(matched)
            continue
        owner = types.get(type_name)
        if owner is None:
            raise KeyError(f"{coordinate}: no type {type_name} in {sdl.name}")
        _remove_member(owner, member, arg, coordinate)
    _sweep(schema, types, dead)
    return data


def _copy(data: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``data`` deep enough for what this module changes (much cheaper than deepcopy)."""
    schema = dict(data["__schema"])
    types = []
    for t in schema["types"]:
        copied = dict(t)
        if t.get("fields") is not None:
            copied["fields"] = [dict(f) for f in t["fields"]]
        for key in ("inputFields", "enumValues", "interfaces", "possibleTypes"):
            if t.get(key) is not None:
                copied[key] = list(t[key])
        types.append(copied)
    schema["types"] = types
    schema["directives"] = [dict(d) for d in schema.get("directives") or []]
    return {**data, "__schema": schema}


def _remove_member(owner: dict[str, Any], member: str, arg: str | None, coordinate: str) -> None:
    for key in ("fields", "inputFields", "enumValues"):
        items = owner.get(key) or []
        hit = next((i for i in items if i["name"] == member), None)
        if hit is None:
            continue
        if arg is None:
            owner[key] = [i for i in items if i is not hit]
        else:
            if not any(a["name"] == arg for a in hit.get("args", [])):
                raise KeyError(f"{coordinate}: no argument {arg}")
            hit["args"] = [a for a in hit["args"] if a["name"] != arg]
        return
    raise KeyError(f"{coordinate}: no member {member} on {owner['name']}")


def _sweep(schema: dict[str, Any], types: dict[str, dict[str, Any]], dead: set[str]) -> None:
    """Remove ``dead`` types and everything that refers to them, until nothing changes."""
    changed = True
    while changed:
        changed = False
        for t in types.values():
            if t["name"] in dead:
                continue
            if t.get("fields") is not None:
                kept = []
                for f in t["fields"]:
                    if _named(f["type"]) in dead or any(
                        _required(a["type"]) and _named(a["type"]) in dead for a in f["args"]
                    ):
                        changed = True
                        continue
                    args = [a for a in f["args"] if _named(a["type"]) not in dead]
                    changed |= len(args) != len(f["args"])
                    f["args"] = args
                    kept.append(f)
                t["fields"] = kept
                if not kept:
                    dead.add(t["name"])
                    changed = True
            if t.get("inputFields") is not None:
                if any(_required(f["type"]) and _named(f["type"]) in dead for f in t["inputFields"]):
                    dead.add(t["name"])
                    changed = True
                    continue
                kept = [f for f in t["inputFields"] if _named(f["type"]) not in dead]
                changed |= len(kept) != len(t["inputFields"])
                t["inputFields"] = kept
            if t.get("interfaces"):
                # An implementation that lost an interface's field no longer implements it (GitLab
                # added the interface with the field).
                own = {f["name"] for f in t.get("fields") or []}
                for ref in list(t["interfaces"]):
                    iface = types[ref["name"]]
                    if any(f["name"] not in own for f in iface.get("fields") or []):
                        t["interfaces"].remove(ref)
                        iface["possibleTypes"] = [p for p in iface["possibleTypes"] if p["name"] != t["name"]]
                        changed = True
            for key in ("interfaces", "possibleTypes"):
                if t.get(key) is not None:
                    kept = [r for r in t[key] if r["name"] not in dead]
                    changed |= len(kept) != len(t[key])
                    t[key] = kept
            if t["kind"] == "UNION" and not t["possibleTypes"]:
                dead.add(t["name"])
                changed = True
    schema["types"] = [t for t in schema["types"] if t["name"] not in dead]
    for root in _ROOTS:
        if schema.get(root) and schema[root]["name"] in dead:
            raise ValueError(f"the root type {schema[root]['name']} would be removed")
    for d in schema.get("directives", []):
        d["args"] = [a for a in d["args"] if _named(a["type"]) not in dead]


@cache
def schema_for(version: str, edition: Edition, sdl: Path = SCHEMA_FILE) -> GraphQLSchema:
    """The schema of GitLab ``version`` (``"17.11"``, ``"17.11.3-ee"``) and ``edition`` (``ee``/``ce``).

    Built once per process and band (about a second each).

    Raises:
        ValueError: not a GitLab version, or older than the oldest modelled one.
        KeyError: :data:`tests.gitlab.versions.ARRIVALS` names something the SDL lacks.
    """
    if edition not in ("ee", "ce"):
        raise ValueError(f"edition must be 'ee' or 'ce', got {edition!r}")
    parse_version(version)
    return build_client_schema(band_introspection(version, edition, sdl))  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    """Print a band's SDL (sorted as GitLab's introspection gives it)."""
    ap = argparse.ArgumentParser(prog="python -m tests.gitlab.band_schema", description=__doc__)
    ap.add_argument("version", nargs="?", default=NEWEST, help=f"GitLab version (default {NEWEST})")
    ap.add_argument("edition", nargs="?", default="ee", choices=("ee", "ce"), help="default ee")
    args = ap.parse_args(argv)
    sys.stdout.write(print_schema(schema_for(args.version, args.edition)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
