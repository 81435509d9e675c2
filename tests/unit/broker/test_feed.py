"""The change feed: watchers wake on the next change, or go on after their time is up."""

from __future__ import annotations

import asyncio

from gateway.broker.feed import ChangeFeed


async def test_a_watcher_wakes_on_a_change_and_times_out_without_one() -> None:
    feed = ChangeFeed()
    assert await feed.wait(0, 0.01) == 0  # nothing changed: the same version after the time
    waiter = asyncio.create_task(feed.wait(0, 5))
    await asyncio.sleep(0)
    feed.changed()
    feed.changed()
    assert await asyncio.wait_for(waiter, 1) == 2
    assert await feed.wait(1, 5) == 2  # behind already: at once
