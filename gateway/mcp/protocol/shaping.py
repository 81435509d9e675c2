"""Results shaped by the result type of the request's revision (``mcp_types.methods``), so a
2026-07-28 result carries ``resultType`` and a 2025-11-25 one does not."""

from __future__ import annotations

import base64
from typing import Any

from gateway.mcp.protocol.eras import HANDSHAKE_VERSIONS
from gateway.tools.registry import ToolResult


def encode_cursor(offset: int) -> str:
    """An opaque, stable ``nextCursor`` for the ``tools/list`` page starting at ``offset``."""
    return base64.urlsafe_b64encode(f"tools:{offset}".encode()).decode().rstrip("=")


def paginate(tools: list[dict[str, Any]], size: int) -> dict[str | None, dict[str, Any]]:
    """Every ``tools/list`` page: cursor (None: first page) → result."""
    pages: dict[str | None, dict[str, Any]] = {}
    cursor: str | None = None
    for offset in range(0, max(len(tools), 1), size):
        page: dict[str, Any] = {"tools": tools[offset : offset + size]}
        if offset + size < len(tools):
            page["nextCursor"] = encode_cursor(offset + size)
        pages[cursor] = page
        cursor = page.get("nextCursor")
    return pages


def shaped(method: str, version: str, result: dict[str, Any]) -> dict[str, Any]:
    """``result`` validated and dumped as ``method``'s result type of revision ``version``."""
    import mcp_types.methods  # loaded at the first request (server._parse says why so)

    if version not in HANDSHAKE_VERSIONS:
        result = {**result, "resultType": "complete"}
    return mcp_types.methods.serialize_server_result(method, version, result)


def shaped_tool_result(version: str, result: ToolResult, *, summary_text: bool = False) -> dict[str, Any]:
    """A tool result as revision ``version``'s ``CallToolResult``, shaped as :func:`shaped` does.

    ``structuredContent`` is left out of the shaping and put back as it is: it is already JSON
    (a handler's dict, or its model dumped in JSON mode) and its only declared type is an object,
    so validating and copying it again (10 KB for a pipeline with 20 jobs) would change nothing.
    ``summary_text``: see :meth:`ToolResult.to_mcp` (the caller's ``structured_text``).
    """
    answer = result.to_mcp(summary_text=summary_text)
    structured = answer.pop("structuredContent", None)
    if structured is None:
        return shaped("tools/call", version, answer)
    out = shaped("tools/call", version, {**answer, "structuredContent": {}})
    if "structuredContent" in out:  # where the revision's result type keeps it
        out["structuredContent"] = structured
    return out
