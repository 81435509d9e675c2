"""Tool declarations (one module per GitLab domain, plus the broker) and their registry."""

from __future__ import annotations

from importlib import import_module

from gateway.tools.registry import Tool

#: Modules that declare ``TOOLS``; a new tool touches one of these (or adds one here).
TOOL_MODULES: tuple[str, ...] = (
    "gateway.tools.pipelines",
    "gateway.tools.pipeline_legacy",
    "gateway.tools.save_pipeline",
    "gateway.tools.duo_sessions",
    "gateway.tools.repository_files",
    "gateway.tools.broker",
)


def all_tools() -> list[Tool]:
    """Every declared tool, in module order."""
    tools: list[Tool] = []
    for name in TOOL_MODULES:
        tools.extend(import_module(name).TOOLS)
    return tools
