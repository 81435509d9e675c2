"""The request loop's footprint: a call that succeeds leaves nothing for the cyclic garbage
collector (the gateway collects its young generation rarely, counting on that)."""

from __future__ import annotations

import gc

from gateway.config import GitLabSettings
from gateway.gitlab.call import GitLabCall
from gateway.gitlab.credentials import ANONYMOUS
from gateway.gitlab.retries import with_retries


async def test_a_successful_call_leaves_no_reference_cycles() -> None:
    settings = GitLabSettings()

    async def attempt(deadline: float) -> dict[str, int]:
        return {"ok": 1}

    async def call_once() -> None:
        call = GitLabCall(
            method="POST",
            url="https://gitlab.example.com/api/graphql",
            operation="get_pipeline",
            idempotent=True,
            credential=ANONYMOUS,
            request_id="r1",
        )
        assert await with_retries(call, attempt, settings) == {"ok": 1}

    await call_once()  # first-use caches
    was_enabled = gc.isenabled()
    gc.disable()
    # What exists now is left out of the collection below (in a pytest worker that is millions of
    # objects, seconds of CPU per full collection): it counts what the calls made alone.
    gc.freeze()
    try:
        for _ in range(20):
            await call_once()
        assert gc.collect() == 0
    finally:
        gc.unfreeze()
        if was_enabled:
            gc.enable()
