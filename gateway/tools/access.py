"""Which tools one caller may list and call: the narrowing layers below the deployment's.

The deployment chooses the served tools (``toolsets``, ``tools``, ``read_only``: the
:class:`~gateway.tools.registry.Registry`). Below it, each layer can only narrow:

1. the caller's client token (``toolsets``, ``tools``, ``read_only`` of its ``client_tokens`` entry);
2. the request's headers ``X-MCP-Toolsets``, ``X-MCP-Tools`` and ``X-MCP-Readonly`` (the names
   GitHub's MCP server gives them).

Within one layer a tool is enabled when its toolset is listed or its name (or an alias) is, as
with GitHub's ``--toolsets`` and ``--tools``: a layer naming neither enables every tool. Across
layers a tool must be enabled by every one, so no layer widens another. A layer that is read-only
hides every tool whose annotations are not read-only.

A :class:`ToolAccess` is built once per request, where the caller is authenticated, and handed
down with the :class:`~gateway.tools.caller.Caller`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from gateway.config import expand_toolsets


class _Hints(Protocol):
    @property
    def read_only(self) -> bool: ...


class Tool(Protocol):
    """What the narrowing reads of a tool (:class:`gateway.tools.registry.Tool`, whose registry
    imports this module: named by shape, so the two do not import each other)."""

    @property
    def name(self) -> str: ...

    @property
    def toolset(self) -> str: ...

    @property
    def aliases(self) -> tuple[str, ...]: ...

    @property
    def annotations(self) -> _Hints: ...


TOOLSETS_HEADER = "X-MCP-Toolsets"
TOOLS_HEADER = "X-MCP-Tools"
READONLY_HEADER = "X-MCP-Readonly"
_TRUE = frozenset({"true", "1", "yes", "on"})
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")


@dataclass(frozen=True)
class Restriction:
    """One narrowing layer.

    Attributes:
        source: what set it, as an error names it ("the client_tokens entry of agent 'pm'").
        toolsets: the toolsets it enables, or None: it does not limit by toolset.
        tools: the tool names it enables besides those toolsets, or None.
        read_only: it hides every tool that is not read-only.
    """

    source: str
    toolsets: frozenset[str] | None = None
    tools: frozenset[str] | None = None
    read_only: bool = False

    def why_hidden(self, tool: Tool) -> str | None:
        """Why this layer hides ``tool``, or None when it lets it through."""
        if self.read_only and not tool.annotations.read_only:
            return f"{tool.name} changes GitLab or broker state and {self.source} allows only read-only tools"
        if self.toolsets is None and self.tools is None:
            return None
        if self.toolsets is not None and tool.toolset in expand_toolsets(self.toolsets):
            return None
        if self.tools is not None and not self.tools.isdisjoint((tool.name, *tool.aliases)):
            return None
        enabled = []
        if self.toolsets is not None:
            enabled.append(f"toolsets: {', '.join(sorted(self.toolsets)) or 'none'}")
        if self.tools is not None:
            enabled.append(f"tools: {', '.join(sorted(self.tools)) or 'none'}")
        return (
            f"{tool.name} belongs to toolset {tool.toolset!r}, which {self.source} does not enable "
            f"({'; '.join(enabled)})"
        )


@dataclass(frozen=True)
class ToolAccess:
    """The narrowing layers of one caller, in order; no layer: whatever the deployment serves."""

    layers: tuple[Restriction, ...] = ()

    def narrowed(self, layer: Restriction | None) -> ToolAccess:
        """This access with ``layer`` below the others (None: unchanged)."""
        return self if layer is None else ToolAccess((*self.layers, layer))

    def why_hidden(self, tool: Tool) -> str | None:
        """Why the first layer that hides ``tool`` does, or None when every layer lets it through."""
        for layer in self.layers:
            why = layer.why_hidden(tool)
            if why is not None:
                return why
        return None


#: A caller without limits of its own: it sees what the deployment serves.
NO_LIMITS = ToolAccess()


def _names(value: str | None) -> frozenset[str] | None:
    if value is None or not value.strip():
        return None  # an empty header narrows nothing, as if it was not sent
    return frozenset(part.strip() for part in value.split(",") if part.strip())


def header_restriction(headers: Mapping[str, str], known_toolsets: Iterable[str]) -> Restriction | None:
    """The layer a request's ``X-MCP-*`` headers ask for, or None when it sent none of them.

    Names this gateway does not know are ignored, as GitHub's MCP server does, so an agent set up
    for a gateway with more tools keeps working; a header naming only unknown names still narrows
    (to nothing it names), since a restriction the caller asked for must never serve more.
    """
    toolsets = _names(headers.get(TOOLSETS_HEADER))
    tools = _names(headers.get(TOOLS_HEADER))
    read_only = (headers.get(READONLY_HEADER) or "").strip().lower() in _TRUE
    if toolsets is None and tools is None and not read_only:
        return None
    if toolsets is not None:
        toolsets = toolsets & frozenset(known_toolsets)
    if tools is not None:
        # What cannot be a tool name is no tool's: dropped, so errors never quote it back.
        tools = frozenset(name for name in tools if _TOOL_NAME.fullmatch(name))
    sent = [name for name, value in ((TOOLSETS_HEADER, toolsets), (TOOLS_HEADER, tools)) if value is not None]
    if read_only:
        sent.append(READONLY_HEADER)
    return Restriction(
        source=f"this request's {' and '.join(sent)} header{'s' if len(sent) > 1 else ''}",
        toolsets=toolsets,
        tools=tools,
        read_only=read_only,
    )
