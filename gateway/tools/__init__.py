"""Tool declarations, one folder per domain (``ci``, ``duo``, ``repository``, ``broker``), and their registry.

A tool with real logic is one module declaring ``TOOLS``; the broker's thin tools are one table.
Modules are found, not listed: a new module in a domain folder that declares ``TOOLS`` is served,
documented and snapshot-tested without touching any other file.
"""

from __future__ import annotations

import pkgutil
from difflib import get_close_matches
from functools import cache
from importlib import import_module
from typing import TYPE_CHECKING

from gateway.tools.registry import Tool

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gateway.config import Settings

#: Domain folders, in ``tools/list`` order; within one, modules come in name order.
DOMAINS: tuple[str, ...] = ("ci", "duo", "repository", "broker")


@cache
def tool_modules() -> tuple[str, ...]:
    """Every module under a domain folder that declares ``TOOLS``."""
    found: list[str] = []
    for domain in DOMAINS:
        package = import_module(f"{__name__}.{domain}")
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
            name = f"{package.__name__}.{info.name}"
            if not info.ispkg and hasattr(import_module(name), "TOOLS"):
                found.append(name)
    return tuple(found)


def all_tools() -> list[Tool]:
    """Every declared tool, in module order."""
    tools: list[Tool] = []
    for name in tool_modules():
        tools.extend(import_module(name).TOOLS)
    return tools


def undeclared_tool_names(settings: Settings, tools_option: str = "tools") -> list[str]:
    """One line per option that names a tool no tool or alias has (``tools``, shown as
    ``tools_option``: the flag or variable it came from; and ``tools`` of a ``client_tokens``
    entry): a misspelt name would silently serve less than meant."""
    named = [(tools_option, settings.tools)] + [
        (f"client_tokens[{i}].tools (agent {client.agent_id!r})", client.tools or ())
        for i, client in enumerate(settings.client_tokens)
    ]
    if not any(names for _, names in named):
        return []
    declared = {name for tool in all_tools() for name in (tool.name, *tool.aliases)}
    listed = ", ".join(tool.name for tool in all_tools())

    def unknown_names(names: Sequence[str]) -> str:
        return ", ".join(
            repr(name) + "".join(f" (did you mean {m!r}?)" for m in get_close_matches(name, declared, n=1))
            for name in names
        )

    return [
        f"{option}: unknown tool {unknown_names(unknown)}; the tools are {listed}"
        for option, names in named
        if (unknown := [name for name in names if name not in declared])
    ]
