"""What an agent is sent before its first call: the bytes of ``tools/list``.

    .venv/bin/python -m bench --tools-list     # this table only (also printed before every bench run)
    .venv/bin/python -m bench.tools_list       # the same; --markdown: the README's table

Rows: the default deployment (every toolset but ``superseded``), every toolset served (``all``),
and each toolset alone. Columns: tools, bytes of the ``tools/list`` result as the gateway sends it
(compact JSON, all pages of a 2025-11-25 session, without the JSON-RPC envelope), and the part of
them that is descriptions, input schemas and output schemas. It takes no network and no server:
the result is built from the declarations the way the gateway builds it.

The last line compares the default with the 83,474 bytes (88.6 KB as Python's ``json.dumps``
spaces it) that every toolset's 29 tools took in 0.1.0, before the superseded tools got a toolset
of their own and the schemas were trimmed: a figure to compare with, no longer a target (tools
were added since). :func:`markdown` is the README's table ("What an agent is sent before its
first call"); tests/unit/test_readme_commands.py holds the README to it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.config import TOOLSETS
from gateway.mcp.protocol.shaping import paginate, shaped
from gateway.tools import all_tools
from gateway.tools.access import NO_LIMITS
from gateway.tools.registry import Registry

#: The default tools/list before this measure existed (29 tools, every toolset served).
BASELINE_BYTES = 83_474
VERSION = "2025-11-25"
PAGE_SIZE = 50  # the gateway's default tools_page_size


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def measure(toolsets: tuple[str, ...] = ()) -> dict[str, Any]:
    """The ``tools/list`` of a gateway serving ``toolsets`` (empty: its default), in bytes."""
    tools = Registry(all_tools(), toolsets=toolsets).listed_for(NO_LIMITS)
    pages = paginate(tools, PAGE_SIZE).values()
    return {
        "tools": len(tools),
        "bytes": sum(_size(shaped("tools/list", VERSION, page)) for page in pages),
        "descriptions": sum(_size(t["description"]) for t in tools),
        "input_schemas": sum(_size(t["inputSchema"]) for t in tools),
        "output_schemas": sum(_size(t.get("outputSchema", {})) for t in tools if "outputSchema" in t),
    }


def rows() -> list[tuple[str, dict[str, Any]]]:
    """(label, figures) for the default, ``all`` and each toolset."""
    out = [("default", measure()), ("all", measure(("all",)))]
    out += [(f"{name} alone", measure((name,))) for name in TOOLSETS]
    return out


def table() -> str:
    """The figures as a text table, with the default against its target."""
    head = f"{'tools/list':<28}{'tools':>6}{'bytes':>9}{'descr.':>9}{'input':>9}{'output':>9}"
    lines = [head, "-" * len(head)]
    measured = rows()
    for label, r in measured:
        lines.append(
            f"{label:<28}{r['tools']:>6}{r['bytes']:>9,}{r['descriptions']:>9,}"
            f"{r['input_schemas']:>9,}{r['output_schemas']:>9,}"
        )
    default = measured[0][1]
    lines.append(
        f"default: {default['tools']} tools in {default['bytes']:,} bytes, "
        f"{default['bytes'] / BASELINE_BYTES:.1%} of the {BASELINE_BYTES:,} bytes that all 29 tools "
        "took in 0.1.0 (before the superseded toolset and the trimmed schemas)"
    )
    return "\n".join(lines)


def markdown() -> str:
    """The README's table: tools and bytes of the default, ``all`` and each toolset alone."""
    lines = ["| toolsets | tools | bytes |", "| --- | --- | --- |"]
    for label, r in rows():
        name = label.removesuffix(" alone")
        shown = name if name in ("default", "all") else f"`{name}`"
        lines.append(f"| {shown} | {r['tools']} | {r['bytes']:,} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown() if "--markdown" in sys.argv else table())
