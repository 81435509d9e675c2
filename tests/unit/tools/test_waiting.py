"""Shared server-side waits (``gateway.tools.waiting``): one poll per resource and credential,
backing off, honouring rate limits, stopping when the last waiter goes."""

from __future__ import annotations

import asyncio

import pytest

from gateway.gitlab.errors import GitLabRateLimited, GitLabUpstreamError
from gateway.tools import waiting
from gateway.tools.waiting import SharedPolls
from tests.unit.tools.poll_pauses import PollPauses


class Source:
    """A resource whose reads are counted; ``states`` are answered in turn, the last one repeated."""

    def __init__(self, *states: object) -> None:
        self.states = list(states)
        self.reads = 0
        self.read_times: list[float] = []

    async def read(self) -> object:
        self.reads += 1
        self.read_times.append(asyncio.get_running_loop().time())
        item = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        if isinstance(item, BaseException):
            raise item
        return item


def done(state: object) -> bool:
    return state == "failed"


async def test_two_callers_on_one_key_share_every_read() -> None:
    polls = SharedPolls()
    source = Source("running", "running", "running", "failed")
    seen: list[object] = []

    async def on_state(state: object, elapsed: float) -> None:
        seen.append(state)

    async with asyncio.timeout(5):
        first, second = await asyncio.gather(
            polls.wait(
                ("cred", "pipeline", 1), source.read, done, wait_seconds=30, interval=0.02, on_state=on_state
            ),
            polls.wait(("cred", "pipeline", 1), source.read, done, wait_seconds=30, interval=0.02),
        )
    assert first.settled and second.settled and first.state == second.state == "failed"
    assert source.reads == 4
    assert seen == ["running"] * 3
    assert len(polls) == 0


async def test_another_credential_gets_its_own_reads() -> None:
    polls = SharedPolls()
    alice, bob = Source("running", "failed"), Source("running", "failed")
    async with asyncio.timeout(5):
        await asyncio.gather(
            polls.wait(("alice", "pipeline", 1), alice.read, done, wait_seconds=30, interval=0.02),
            polls.wait(("bob", "pipeline", 1), bob.read, done, wait_seconds=30, interval=0.02),
        )
    assert alice.reads == 2 and bob.reads == 2


async def test_reads_back_off_up_to_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    recorded = PollPauses()
    monkeypatch.setattr(waiting, "asyncio", recorded)
    polls = SharedPolls()
    source = Source("running", "running", "running", "running", "running", "failed")
    waited = await polls.wait(
        "k", source.read, done, wait_seconds=30, interval=0.04, max_interval=0.09, backoff=2.0
    )
    assert waited.settled and source.reads == 6
    assert recorded.pauses == pytest.approx([0.04, 0.08, 0.09, 0.09, 0.09])
    # and the reads waited them out (a loop may run late, never early)
    gaps = [b - a for a, b in zip(source.read_times, source.read_times[1:], strict=False)]
    assert all(gap >= pause - 0.001 for gap, pause in zip(gaps, recorded.pauses, strict=True)), gaps


async def test_a_rate_limit_is_waited_out_then_polling_goes_on() -> None:
    polls = SharedPolls()
    limited = GitLabRateLimited("Rate limited by GitLab. Retry after 1 seconds.", retry_after_seconds=1)
    source = Source("running", limited, "failed")
    loop = asyncio.get_running_loop()
    started = loop.time()
    waited = await polls.wait("k", source.read, done, wait_seconds=10, interval=0.02)
    assert waited.settled and source.reads == 3
    assert loop.time() - started >= 1.0  # Retry-After honoured, not the 0.02 s interval


async def test_another_failure_reaches_every_waiter() -> None:
    polls = SharedPolls()
    source = Source("running", GitLabUpstreamError("GitLab answered 500"))
    results = await asyncio.gather(
        polls.wait("k", source.read, done, wait_seconds=10, interval=0.02),
        polls.wait("k", source.read, done, wait_seconds=10, interval=0.02),
        return_exceptions=True,
    )
    assert all(isinstance(r, GitLabUpstreamError) for r in results)
    assert source.reads == 2 and len(polls) == 0


async def test_polling_stops_when_the_last_waiter_is_cancelled() -> None:
    polls = SharedPolls()
    source = Source("running")
    one = asyncio.create_task(polls.wait("k", source.read, done, wait_seconds=300, interval=0.02))
    two = asyncio.create_task(polls.wait("k", source.read, done, wait_seconds=300, interval=0.02))
    await asyncio.sleep(0.1)
    one.cancel()
    await asyncio.sleep(0.1)
    assert not two.done() and len(polls) == 1
    two.cancel()
    with pytest.raises(asyncio.CancelledError):
        await two
    reads = source.reads
    await asyncio.sleep(0.1)
    assert source.reads == reads and len(polls) == 0


async def test_a_late_caller_wakes_a_backed_off_watch() -> None:
    polls = SharedPolls()
    source = Source("running")
    first = asyncio.create_task(
        polls.wait("k", source.read, done, wait_seconds=5, interval=0.05, max_interval=10, backoff=100)
    )
    await asyncio.sleep(0.2)  # read at 0 and 0.05; the next is due in 10 s
    assert source.reads == 2
    source.states = ["failed"]
    waited = await asyncio.wait_for(polls.wait("k", source.read, done, wait_seconds=5, interval=0.05), 1)
    assert waited.settled and source.reads == 3
    assert (await asyncio.wait_for(first, 1)).settled


async def test_a_late_caller_does_not_cut_a_retry_after_short() -> None:
    polls = SharedPolls()
    limited = GitLabRateLimited("Rate limited by GitLab. Retry after 1 seconds.", retry_after_seconds=1)
    source = Source(limited, "failed")
    first = asyncio.create_task(polls.wait("k", source.read, done, wait_seconds=10, interval=0.02))
    await asyncio.sleep(0.2)
    second = asyncio.create_task(polls.wait("k", source.read, done, wait_seconds=10, interval=0.02))
    await asyncio.sleep(0.3)
    assert source.reads == 1  # still honouring GitLab's Retry-After
    assert (await asyncio.wait_for(first, 2)).settled and (await asyncio.wait_for(second, 2)).settled
    assert source.reads == 2
