"""``retry_job``: run one finished CI/CD job again (``POST /projects/:id/jobs/:job_id/retry``,
https://docs.gitlab.com/api/jobs/#retry-a-job).

A tool of its own rather than an action of ``save_pipeline``: that tool acts on a whole pipeline
(its ``retry`` re-runs every failed and canceled job, its ``cancel`` stops every running one, so it
is annotated destructive and a cancel asks a person first), while this one re-runs exactly the job
named, as GitLab's job page's "Retry" button does. Retrying is not destructive (the job's earlier
run, its log and artifacts stay) but it changes something, and it is not idempotent: each retry is
a new run (a deploy job deploys again). So it is sent at most once, as every mutation is: the
client resends it only when it provably never reached GitLab (a connect error, a 429); after any
other failure the caller is told the outcome is unknown and how to check.

The job is read first (``GET /projects/:id/jobs/:job_id``), so a job that is missing is told apart
from one GitLab will not retry, and the unknown-outcome message can name the job and its pipeline.
REST rather than GraphQL's ``jobRetry``: the job is named by its project and its id, as in
``get_job`` (the REST path checks it belongs to the project), and the answer is the new job.

When GitLab will not retry a finished job, the usual cause is that it was retried already: only a
job's newest run can be. The pipeline's jobs without their retried runs
(``GET /projects/:id/pipelines/:pipeline_id/jobs``, https://docs.gitlab.com/api/jobs/#list-pipeline-jobs)
then name the newest run, one read on that error only.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from gateway.errors import ToolError, bad_request
from gateway.gitlab.errors import GitLabError, GitLabMaybeSent, GitLabNotFound, GitLabUnauthorized
from gateway.gitlab.urls import JobRef, encode_project
from gateway.tools.ci.job_read import (
    JobAnswer,
    JobFields,
    JobInput,
    job_fields,
    job_not_found,
    job_target,
    read_job,
)
from gateway.tools.context import ToolContext
from gateway.tools.registry import Annotations, Tool

RETRY_ROUTE = "/projects/{id}/jobs/{job_id}/retry"
PIPELINE_JOBS_ROUTE = "/projects/{id}/pipelines/{pipeline_id}/jobs"

#: Changes something (a new run of the job), not destructive (the earlier run stays), not
#: idempotent (each call is a new run). MCP
#: https://modelcontextprotocol.io/specification/2025-11-25/server/tools#tool-annotations.
RETRY_JOB_ANNOTATIONS = Annotations(read_only=False, destructive=False, idempotent=False, open_world=True)


class RetryJobInput(JobInput):
    """Give url, or project_id and job_id: the job to run again."""


class RetryJobOutput(JobFields):
    """The new run of the job (its own ID), as GitLab created it."""

    retried_job_id: int = Field(description="The job that was retried (its run stays, marked retried).")


def _unknown(target: JobRef, job: JobAnswer, what: str, request_id: str | None) -> ToolError:
    pipeline = job.pipeline.id if job.pipeline and job.pipeline.id else None
    check = (
        f"get_pipeline (project_id='{target.project}', pipeline_id={pipeline}, include=['jobs']) lists the "
        f"pipeline's jobs: a job named '{job.name}' with an ID above {job.id} (pending or running) means "
        "the retry was applied"
        if pipeline is not None
        else f"the pipeline page of job {job.id} ({job.web_url}) shows whether '{job.name}' runs again"
    )
    return ToolError(
        "upstream_error",
        f"{what}, so the gateway did not send it again: job {job.id} ('{job.name}') may or may not have been "
        f"retried, and sending it twice could run it twice. Check before calling retry_job again: {check}.",
        outcome="unknown",
        job_id=job.id,
        **({"request_id": request_id} if request_id else {}),
    )


async def _newest_run(ctx: ToolContext, target: JobRef, job: JobAnswer) -> JobAnswer | None:
    """The newest run of ``job``'s name in its pipeline (None: not known, or GitLab failed: the
    refusal is told without it)."""
    if job.running or job.pipeline is None or job.pipeline.id is None:
        return None
    try:
        answer = await ctx.gitlab.rest(
            "GET",
            PIPELINE_JOBS_ROUTE,
            path_params={"id": encode_project(target.project), "pipeline_id": job.pipeline.id},
            params={"per_page": 100},  # without include_retried: each job's newest run only
        )
    except GitLabError:
        return None
    for item in answer if isinstance(answer, list) else []:
        if isinstance(item, dict) and item.get("name") == job.name and isinstance(item.get("id"), int):
            return JobAnswer.model_validate(item)
    return None


async def _not_retryable(ctx: ToolContext, target: JobRef, job: JobAnswer) -> ToolError:
    refused = f"GitLab will not retry job {job.id} ('{job.name}', status {job.status})"
    newest = await _newest_run(ctx, target, job)
    if newest is not None and newest.id != job.id:
        return bad_request(
            f"{refused}: it was retried already, so it is not the newest run of '{job.name}'; job "
            f"{newest.id} (status {newest.status}) is. Retry that one (job_id {newest.id}) if it is "
            "finished.",
            kind="already_retried",
            job_id=job.id,
            status=job.status,
            newest_job_id=newest.id,
        )
    return bad_request(
        f"{refused}: it retries the latest run of a finished job (failed, canceled or success), not one "
        "still going, one already retried (retry its newest run: get_pipeline with include ['jobs'] "
        "lists it), or one of an archived pipeline.",
        kind="not_retryable",
        job_id=job.id,
        status=job.status,
    )


async def retry_job(ctx: ToolContext, args: RetryJobInput) -> dict[str, Any]:
    target = job_target(ctx, args.url, args.project_id, args.job_id, project_arg="project_id")
    job = await read_job(ctx, target)
    try:
        answer = await ctx.gitlab.rest(
            "POST", RETRY_ROUTE, path_params={"id": encode_project(target.project), "job_id": job.id}
        )
    except GitLabMaybeSent as err:
        raise _unknown(
            target,
            job,
            "GitLab did not confirm the retry (the request failed after it may have reached it)",
            err.request_id,
        ) from None
    except GitLabNotFound as err:
        raise job_not_found(target, err, ctx.gitlab.credential) from None
    except GitLabUnauthorized as err:
        if err.status != 403:
            raise
        if "retryable" in err.message.lower():
            raise await _not_retryable(ctx, target, job) from None
        raise ToolError(
            "unauthorized",
            f"This token may read job {job.id} but not retry it (GitLab answered 403): retrying needs "
            "the Developer role or higher in the project (and, on a protected branch, leave to run "
            "pipelines for it).",
            job_id=job.id,
        ) from None
    if not isinstance(answer, dict):
        raise _unknown(
            target, job, "GitLab answered the retry with something other than a job", ctx.call.request_id
        )
    return {**job_fields(JobAnswer.model_validate(answer)), "retried_job_id": job.id}


DESCRIPTION = """\
Retry one CI/CD job: GitLab runs it again as a new job in the same pipeline (as the job page's \
Retry button), and the answer is that new job (its ID, status `pending`). Name the job with `url` \
or `project_id` + `job_id`. GitLab retries the latest run of a finished job (failed, canceled or \
success). To re-run every failed job of a pipeline, use save_pipeline with action "retry". A \
retry is never sent twice: if GitLab does not confirm it, the error says how to check whether it \
happened before you call again."""

TOOLS: list[Tool] = [
    Tool(
        name="retry_job",
        title="Retry a job",
        description=DESCRIPTION,
        input_model=RetryJobInput,
        output_model=RetryJobOutput,
        handler=retry_job,
        annotations=RETRY_JOB_ANNOTATIONS,
        toolset="ci",
        reference_hint="Or pass `project_id` and `job_id`.",
    )
]
