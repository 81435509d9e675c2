"""History: ``get_message_history`` pages, newest first, within a byte budget per answer."""

from __future__ import annotations

import base64
import json
from typing import Any

from gateway.broker.errors import BrokerError
from gateway.broker.formats import message_json
from gateway.broker.store import Store


class History:
    """The message history of one broker.

    Args:
        store: the opened database.
        page_bytes: about the largest answer (``broker.history_page_bytes``).
        item_bytes: the longest body shown whole (``broker.history_item_bytes``).
    """

    def __init__(self, store: Store, *, page_bytes: int = 1_048_576, item_bytes: int = 65_536) -> None:
        self._store = store
        self._history_page_bytes = page_bytes
        self._history_item_bytes = item_bytes

    async def message_history(
        self, issue: str | None, limit: int, after: str | None = None, *, generation: int | None = None
    ) -> dict[str, Any]:
        """``get_message_history`` → ``{messages, page_info}``: newest first by page, oldest first in a page.

        A page holds up to ``limit`` messages, and its whole answer stays within about
        ``history_page_bytes``: a tool result carries its ``structuredContent`` twice, as the object
        and as its JSON text (the text block MCP asks for, for clients that read only text), so each
        message is counted as both. A body over ``history_item_bytes`` is cut (``bodyTruncated``,
        ``bodyPreview``). ``after`` is the previous page's ``page_info.end_cursor``: the next page
        holds older messages. A page always holds at least one message. ``generation``: the
        archived pipeline of that number instead of the live one (the operator's ``broker
        history --pipeline N``; agents see only the live pipeline).

        Raises:
            BrokerError: ``bad_request`` for a cursor this tool did not hand out.
        """
        before = _decode_cursor(after)
        out: list[dict[str, Any]] = []
        used, more, last_seq = _PAGE_OVERHEAD_BYTES, False, before
        while len(out) < limit and not more:
            # Small batches: rows are read only as far as the page's byte budget reaches.
            batch = min(_HISTORY_BATCH, limit - len(out))
            async with self._store.read() as q:
                rows = await q.history_page(issue, last_seq, batch + 1, self._history_item_bytes, generation)
            for row, head, length in rows[:batch]:
                item = message_json(row)
                encoded = head.encode("utf-8")
                if length > len(head) or len(encoded) > self._history_item_bytes:
                    preview = encoded[: self._history_item_bytes].decode("utf-8", errors="ignore")
                    item.update(body=None, bodyTruncated=True, bodyPreview=preview)
                else:
                    item.update(body=json.loads(head), bodyTruncated=False, bodyPreview=None)
                cost = _answer_bytes(item)
                if out and used + cost > self._history_page_bytes:
                    more = True
                    break
                used += cost
                out.append(item)
                last_seq = row.seq
            else:
                if len(rows) <= batch:
                    break
                if len(out) >= limit:
                    more = True
        out.reverse()
        end = _encode_cursor(last_seq) if more and last_seq is not None else None
        return {"messages": out, "page_info": {"has_next_page": end is not None, "end_cursor": end}}


def _answer_bytes(item: dict[str, Any]) -> int:
    """What ``item`` adds to a history answer: its compact JSON in ``structuredContent`` and again,
    escaped, in the JSON text block (the two quotes counted there stand for the two commas)."""
    dumped = json.dumps(item, ensure_ascii=False, separators=(",", ":"))
    escaped = json.dumps(dumped, ensure_ascii=False)
    return len(dumped.encode("utf-8")) + len(escaped.encode("utf-8"))


#: Rows read per statement while filling a history page.
_HISTORY_BATCH = 16
#: A history answer besides its messages (the JSON-RPC and result envelope, ``page_info``), twice.
_PAGE_OVERHEAD_BYTES = 1024
_CURSOR_PREFIX = "msg:"


def _encode_cursor(seq: int) -> str:
    return base64.urlsafe_b64encode(f"{_CURSOR_PREFIX}{seq}".encode()).decode("ascii")


def _decode_cursor(cursor: str | None) -> int | None:
    if cursor is None:
        return None
    try:
        text = base64.urlsafe_b64decode(cursor.encode("ascii")).decode("ascii")
        if text.startswith(_CURSOR_PREFIX):
            return int(text[len(_CURSOR_PREFIX) :])
    except (ValueError, UnicodeError):
        pass
    raise BrokerError(
        "bad_request",
        "`after`: not a cursor of get_message_history; pass `page_info.end_cursor` from the previous "
        "answer as is, or leave `after` out to start from the newest messages.",
        invalid_arguments=["after"],
    )
