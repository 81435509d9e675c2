"""Record the pauses ``gateway.tools.waiting``'s poller asks for, so that tests check a wait's
schedule rather than the wall clock (a busy machine runs the event loop late)."""

from __future__ import annotations

import asyncio
from typing import Any


class PollPauses:
    """``asyncio`` as ``gateway.tools.waiting`` sees it, noting the pauses its poller asks for.

    The schedule is read from what the poller asks for, not from the gaps between reads: those
    are the pauses plus however late the event loop runs, which a busy machine stretched past any
    tolerance (a gap of 0.09 s asserted within 0.03 s failed under load)."""

    def __init__(self) -> None:
        self.pauses: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    def timeout(self, delay: float | None) -> asyncio.Timeout:
        task = asyncio.current_task()
        if task is not None and task.get_coro().__qualname__ == "SharedPolls._poll":  # type: ignore[union-attr]
            assert delay is not None
            self.pauses.append(delay)
        return asyncio.timeout(delay)
