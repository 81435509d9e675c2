"""What a tool call answers: :class:`ToolResult`, encoded as an MCP ``CallToolResult``."""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from gateway.errors import ToolError


@dataclass
class ToolResult:
    """What a handler returns on success (or what an error becomes).

    Attributes:
        structured: ``structuredContent``: flat, snake_case, integer ids.
        text: the human text block; None means the JSON dump of ``structured`` is the only block.
            When set, the JSON dump follows it as a second block.
        is_error: True for failures (use :class:`ToolError` instead of setting this by hand).
        on_delivered: awaited by the transport after the response frame was written; a message
            broker uses it to remove a delivered message from its queue.
        on_abandoned: awaited instead when the response could not be handed to the transport
            (cancelled, client gone).
        read_check_seconds: when set, ``on_delivered`` waits this long after the write and the
            transport runs ``on_abandoned`` instead if the client reset the connection meanwhile
            (it closed without reading the answer; ``gateway.mcp.http.receipts``).
        content: the content blocks as they are (images, audio, embedded resources), for a tool
            whose answer is not structured data; None: the text blocks come from ``structured``
            and ``text``. ``structuredContent`` is then sent only when ``structured`` is not empty.
    """

    structured: dict[str, Any]
    text: str | None = None
    is_error: bool = False
    on_delivered: Callable[[], Awaitable[None]] | None = None
    on_abandoned: Callable[[], Awaitable[None]] | None = None
    read_check_seconds: float | None = None
    content: list[dict[str, Any]] | None = None
    #: The gateway refused the call by its own policy (:attr:`ToolError.by_gateway`).
    by_gateway: bool = False

    @functools.cached_property
    def structured_json(self) -> str:
        """``structured`` as compact JSON: the text block, and what the result redaction scans.
        Encoded once; ``structured`` is not changed after a handler returned it."""
        return _compact_json(self.structured)

    def to_mcp(self, *, summary_text: bool = False) -> dict[str, Any]:
        """The ``CallToolResult`` JSON object.

        Args:
            summary_text: instead of the JSON copy of ``structured`` (which MCP advises for clients
                that do not read ``structuredContent``), one short text block: ``text``, else a
                line naming the top-level keys. Error results keep their blocks.
        """
        if self.content is not None:
            given: dict[str, Any] = {"content": self.content}
            if self.structured:
                given["structuredContent"] = self.structured
            if self.is_error:
                given["isError"] = True
            return given
        if summary_text and not self.is_error:
            text = self.text if self.text is not None else _summary_line(self.structured)
            return {"content": [{"type": "text", "text": text}], "structuredContent": self.structured}
        content = [{"type": "text", "text": self.structured_json}]
        if self.text is not None:
            content.insert(0, {"type": "text", "text": self.text})
        out: dict[str, Any] = {"content": content, "structuredContent": self.structured}
        if self.is_error:
            out["isError"] = True
        return out

    @classmethod
    def from_error(cls, error: ToolError) -> ToolResult:
        """The ``isError: true`` result for ``error``; its message is the first text block."""
        return cls(
            structured=error.to_structured(), text=error.message, is_error=True, by_gateway=error.by_gateway
        )


def _summary_line(structured: dict[str, Any]) -> str:
    """The text block of a summarised result that has no text of its own."""
    if not structured:
        return "Done; structuredContent is empty."
    return "The answer is in structuredContent; its top-level keys: " + ", ".join(map(str, structured)) + "."


def _compact_json(value: Any) -> str:
    """JSON without spaces, non-ASCII kept as is (the encoding of every MCP message we send).

    orjson writes exactly that, an order of magnitude faster than ``json`` on a 10 KB result;
    ``json`` remains for what orjson refuses (integers past 64 bits)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
