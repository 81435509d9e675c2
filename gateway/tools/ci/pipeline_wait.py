"""``get_pipeline``'s ``wait_seconds``: the gateway polls a pipeline for the caller until it
reaches a final status, or the time is up.

Final for a wait (https://docs.gitlab.com/ci/pipelines/#pipeline-statuses is GitLab's list):

- ``success``, ``failed``, ``canceled``, ``skipped``: GitLab's completed statuses; the pipeline
  will not change again unless someone retries it.
- ``manual``: the pipeline is blocked on a manual job (``when: manual`` without
  ``allow_failure``); it waits for a person, so polling would not move it.
- A status this gateway does not know: answered at once, so a status GitLab adds later never
  makes a caller wait for nothing.

Not final: ``created``, ``waiting_for_resource``, ``preparing``, ``waiting_for_callback``,
``pending``, ``running``, ``canceling`` and ``scheduled`` (a delayed job's timer runs by itself).

Polls are :func:`~gateway.tools.ci.pipeline_read.read_pipeline` without a facet (one small GraphQL
request), shared by every caller waiting on the same pipeline with the same credential
(:mod:`gateway.tools.waiting`): every :data:`POLL_INTERVAL_SECONDS` at first, then less often
(x1.5 each poll, up to :data:`MAX_POLL_INTERVAL_SECONDS`). The caller's facet, if any, is read
once the wait is over.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.cache import credential_key
from gateway.tools.ci.pipeline_read import STATUSES, GetPipelineOutput, PipelineWait, read_pipeline
from gateway.tools.context import ToolContext

#: Longest ``wait_seconds``: under the 300 s idle limits of common clients and proxies.
MAX_WAIT_SECONDS = 300
#: First interval between two polls; tests shrink it.
POLL_INTERVAL_SECONDS = 5.0
#: The interval grows to this at most.
MAX_POLL_INTERVAL_SECONDS = 30.0

#: Statuses that end a wait (see the module docstring).
FINAL_STATUSES = frozenset({"success", "failed", "canceled", "skipped", "manual"})


def is_final(status: str) -> bool:
    """True when a pipeline in ``status`` ends a wait: final, blocked, or unknown to the gateway."""
    return status in FINAL_STATUSES or status not in STATUSES


@dataclass(frozen=True)
class PipelineWaited:
    """A finished wait: the pipeline as last read, and how the wait ended."""

    pipeline: GetPipelineOutput
    wait: PipelineWait

    def answer(self, out: GetPipelineOutput | None) -> GetPipelineOutput:
        """``out`` (the caller's facet read after the wait), or the pipeline as last polled, with
        :attr:`wait`."""
        result = out if out is not None else self.pipeline
        result.wait = self.wait
        return result


async def wait_for_pipeline(
    ctx: ToolContext, project: str, pipeline_id: int, wait_seconds: int
) -> PipelineWaited:
    """Poll until the pipeline's status is final or ``wait_seconds`` have passed.

    Sends ``notifications/progress`` after each poll that found it still going (when the caller
    asked for progress). Cancelling the call stops the polling at once (when no other caller
    waits on the same pipeline with the same credential).

    Raises:
        ToolError / GitLabError: as :func:`read_pipeline` (a missing pipeline, GitLab failing);
            a rate limit past the retries is waited out, and raised only when no read succeeded.
    """
    gitlab = ctx.gitlab
    last_progress = 0.0

    async def read() -> GetPipelineOutput:
        return await read_pipeline(gitlab, project, pipeline_id)

    async def on_state(state: GetPipelineOutput, elapsed: float) -> None:
        nonlocal last_progress
        # MCP progress values must increase strictly (2025-11-25 basic/utilities/progress).
        last_progress = max(elapsed, last_progress + 0.001)
        await ctx.progress(
            last_progress,
            float(wait_seconds),
            f"Pipeline {pipeline_id} is {state.status} ({elapsed:.0f} s of {wait_seconds} s).",
        )

    waited = await ctx.services.polls.wait(
        credential_key(gitlab.credential, "pipeline", project, pipeline_id),
        read,
        lambda state: is_final(state.status),
        wait_seconds=wait_seconds,
        interval=POLL_INTERVAL_SECONDS,
        max_interval=MAX_POLL_INTERVAL_SECONDS,
        on_state=on_state,
    )
    pipeline = waited.state.model_copy()
    seconds = round(waited.elapsed, 1)
    if waited.settled:
        message = f"Pipeline {pipeline_id} is {pipeline.status} (waited {seconds:g} s)."
        if pipeline.status == "manual":
            message += " It waits for someone to run a manual job: waiting longer will not change it."
    else:
        message = (
            f"Timed out after {seconds:g} s: pipeline {pipeline_id} is still {pipeline.status}. Call again "
            "with wait_seconds to keep waiting."
        )
    return PipelineWaited(
        pipeline, PipelineWait(timed_out=not waited.settled, waited_seconds=seconds, message=message)
    )
