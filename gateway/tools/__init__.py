"""Tool declarations, one folder per domain (``ci``, ``repository``, ``duo``, ``broker``), and their registry.

A tool with real logic is one module declaring ``TOOLS``; the broker's thin tools are one table.
"""

from __future__ import annotations

from importlib import import_module

from gateway.tools.registry import Tool

#: Modules that declare ``TOOLS``, in ``tools/list`` order; a new tool adds its module here.
TOOL_MODULES: tuple[str, ...] = (
    "gateway.tools.ci.get_pipeline",
    "gateway.tools.ci.superseded",
    "gateway.tools.ci.save_pipeline",
    "gateway.tools.duo.get_duo_session",
    "gateway.tools.repository.get_repository_file",
    "gateway.tools.broker.tools",
)


def all_tools() -> list[Tool]:
    """Every declared tool, in module order."""
    tools: list[Tool] = []
    for name in TOOL_MODULES:
        tools.extend(import_module(name).TOOLS)
    return tools
