"""Which GitLab each tool works on, derived from what its operations declare they need
(:class:`~gateway.gitlab.needs.Need`): the README's compatibility table and the start-up line's
account of an older GitLab.

A tool is unavailable on a GitLab where one of its operations lacks an ``unsupported`` need (it
answers ``unsupported_by_gitlab``); every other missing need is a difference the caller may notice
(a field null, one more request, an option refused), listed as a note.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gateway.gitlab.instance import InstanceInfo
from gateway.gitlab.needs import Need, strongest
from gateway.tools.registry import Tool

#: The GitLab releases the table shows: the oldest supported, the required upgrade stops
#: (https://docs.gitlab.com/update/upgrade_paths/) and the newest the documents are written for.
BANDS: tuple[str, ...] = ("16.11", "17.0", "17.5", "17.8", "17.11", "18.2", "18.5", "18.8", "19.4")
BEGIN, END = "<!-- compatibility:begin -->", "<!-- compatibility:end -->"


@dataclass(frozen=True)
class ToolOn:
    """One tool on one GitLab.

    Attributes:
        refused: the need that makes it answer ``unsupported_by_gitlab``, if any.
        notes: the other missing needs (what differs there).
    """

    refused: Need | None
    notes: tuple[Need, ...]


def tool_on(tool: Tool, info: InstanceInfo) -> ToolOn:
    """What ``tool`` can do on ``info``'s GitLab."""
    missing: dict[str, Need] = {}
    for operation in tool.operations:
        for need in operation.choice(info).missing:
            missing.setdefault(need.coordinate, need)
    refused = strongest(n for n in missing.values() if n.without == "unsupported" and not n.option)
    notes = tuple(n for n in missing.values() if n is not refused and (refused is None or n.option))
    return ToolOn(refused, notes if refused is None else ())


def limits_line(tools: Iterable[Tool], info: InstanceInfo) -> str:
    """What differs on ``info``'s GitLab from the newest, in one sentence for the start-up line
    (empty when nothing does, or the version is not known)."""
    if not info.known:
        return ""
    parts: list[str] = []
    for tool in tools:
        if tool.toolset in ("broker", "superseded"):
            continue
        found = tool_on(tool, info)
        shown = [n.note for n in found.notes if n.differs]
        if found.refused is not None:
            parts.append(f"{tool.name} answers unsupported_by_gitlab (it needs {found.refused.needed})")
        elif shown:
            parts.append(f"{tool.name}: {', '.join(shown)}")
    return "on this version " + "; ".join(parts) if parts else ""


def render_table(tools: Iterable[Tool]) -> str:
    """The README's table: a row per GitLab tool, a column per release; ``✓`` works, ``✓ n`` works
    with note n, ``—`` answers ``unsupported_by_gitlab``; ``EE …; CE …`` where the editions differ."""
    notes: dict[str, int] = {}

    def cell(tool: Tool, info: InstanceInfo) -> str:
        found = tool_on(tool, info)
        if found.refused is not None:
            return "—"
        marks = []
        for need in found.notes:
            key = f"{need.note}: without {need.needed} (`{need.coordinate}`)"
            marks.append(str(notes.setdefault(key, len(notes) + 1)))
        return "✓ " + ",".join(sorted(marks, key=int)) if marks else "✓"

    lines = [BEGIN, "| tool | " + " | ".join(BANDS) + " |", "| --- |" + " --- |" * len(BANDS)]
    for tool in tools:
        if tool.toolset == "broker":
            continue
        cells = [f"`{tool.name}`"]
        for band in BANDS:
            ee, ce = (cell(tool, InstanceInfo.of(f"{band}.0", enterprise)) for enterprise in (True, False))
            cells.append(ee if ee == ce else f"EE {ee}; CE {ce}")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines += [f"{number}. {note}" for note, number in notes.items()]
    lines.append(END)
    return "\n".join(lines)
