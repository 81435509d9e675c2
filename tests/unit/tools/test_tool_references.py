"""Tool definitions never send an agent to a tool this gateway does not serve, unless they say where it is.

An agent connected only to this gateway reads ``tools/list``: a description that names, say,
``approve_duo_agent_action`` without saying it belongs to GitLab's built-in MCP server sends the
agent looking for a tool it cannot call. Error texts are pinned word for word by each tool's tests.
"""

from __future__ import annotations

import json
import re

from gateway.tools import all_tools

TOOLS = all_tools()
SERVED = {tool.name for tool in TOOLS} | {alias for tool in TOOLS for alias in tool.aliases}
#: GitLab's MCP tool names follow ``verb_object`` (GitLab's MCP tool guidelines: get_ /
#: list_ / save_ / delete_), plus the Duo verbs of its tools.
TOOL_NAME = re.compile(r"\b(?:get|list|save|delete|create|update|search|trigger|ask|approve)_[a-z_]+\b")
WHERE = "GitLab's built-in MCP server"


def _sentences(definition: dict[str, object]) -> list[str]:
    texts: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "description" and isinstance(value, str):
                    texts.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(definition)
    return [s for text in texts for s in re.split(r"(?<=[.!?])\s+", text)]


def test_unserved_tools_are_named_with_where_they_live() -> None:
    offending = []
    for tool in TOOLS:
        for sentence in _sentences(tool.to_mcp()):
            names = set(TOOL_NAME.findall(sentence)) - SERVED
            if names and WHERE not in sentence:
                offending.append((tool.name, sorted(names), sentence))
    assert offending == [], json.dumps(offending, indent=1)
