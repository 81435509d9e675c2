"""Settling a tool result once the transport knows whether its answer reached the client: the
one place that decides between ``on_delivered`` and ``on_abandoned``.

- A result whose response was written in full to the open connection is delivered; one that was
  not written (client gone, write timeout, cancelled call, ended session) is abandoned. Exactly
  one of the two callbacks runs per result.
- A result with ``read_check_seconds`` is settled in the background that long after the write:
  ``on_abandoned`` when the client reset the connection meanwhile (it never read the answer,
  ``gateway.mcp.http.receipts``), else ``on_delivered``; the request handler does not wait for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gateway.mcp.http.receipts import Receipt
from gateway.mcp.protocol.calls import finish_result
from gateway.tools.registry import ToolResult

log = logging.getLogger("gateway.mcp")

#: Results waiting for their read check (asyncio keeps only weak references to tasks).
_CHECKING: set[asyncio.Task[None]] = set()


async def settle(
    result: ToolResult | None,
    delivered: bool,
    request_id: str,
    receipt: Callable[[], Receipt | None] | None = None,
) -> None:
    """Await ``on_delivered`` (the response was written) or ``on_abandoned``; log their failures.

    ``receipt`` takes a :class:`Receipt` of the connection the response was written to; it is
    called at once (before this coroutine yields, so nothing else touched the connection since
    the write) when the written result asks for a read check, which then settles it later.
    """
    if result is None:
        return
    if delivered and receipt is not None and result.read_check_seconds is not None:
        taken = receipt()
        if taken is not None:
            checking = asyncio.ensure_future(_settle_after_check(result, taken, request_id))
            _CHECKING.add(checking)
            checking.add_done_callback(_CHECKING.discard)
            return
    await finish_result(result, delivered, request_id)


async def _settle_after_check(result: ToolResult, receipt: Receipt, request_id: str) -> None:
    assert result.read_check_seconds is not None
    reset = await receipt.reset_within(result.read_check_seconds)
    if reset:
        log.debug("client reset the connection before reading its answer", extra={"request_id": request_id})
    await finish_result(result, not reset, request_id)


async def finish_read_checks() -> None:
    """Wait for the read checks under way (each takes its ``read_check_seconds``): at shutdown,
    before the broker that settles them closes."""
    while pending := {task for task in _CHECKING if not task.done()}:
        await asyncio.wait(pending)
