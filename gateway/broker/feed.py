"""The change feed: a counter that moves each time the broker's visible state may have changed.

Fed by the broker's own change notifications: every committed change of this process
(``Changes.after_commit``), every activity line written here, and on PostgreSQL every signal the
LISTEN connection receives from another replica (``gateway.broker.wakeups``). Watchers (the live
console's server-sent events, ``gateway.console``) wait on it and then read the store again: the
feed says *that* something changed, never *what*, so a burst of changes costs one re-read.
"""

from __future__ import annotations

import asyncio
import contextlib


class ChangeFeed:
    """A version number and a way to wait for the next one."""

    def __init__(self) -> None:
        self.version = 0
        self._event = asyncio.Event()

    def changed(self) -> None:
        """Something may have changed: wake every watcher."""
        self.version += 1
        event, self._event = self._event, asyncio.Event()
        event.set()

    async def wait(self, seen: int, within: float) -> int:
        """The version once it differs from ``seen``, or after ``within`` seconds (the same then)."""
        if self.version != seen:
            return self.version
        event = self._event
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                await event.wait()
        return self.version
