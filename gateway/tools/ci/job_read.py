"""One CI job over REST (``GET /projects/:id/jobs/:job_id``, https://docs.gitlab.com/api/jobs/#get-a-single-job),
shared by ``get_job`` and ``get_artifact_file``: the job's own fields, its artifacts, and the two
ways to name it (``url``, or a project and a job id).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gateway.errors import ToolError, bad_request, not_found
from gateway.gitlab.credentials import Credential
from gateway.gitlab.errors import GitLabNotFound
from gateway.gitlab.urls import JobRef, encode_project, parse_job_url
from gateway.tools.arguments import PROJECT_ALIASES, OptionalPositiveId, OptionalProjectId, OptionalText
from gateway.tools.context import ToolContext
from gateway.tools.registry import ToolInput
from gateway.tools.visibility import anonymous_note, project_not_found_message

#: Statuses of a job that may still write to its log.
UNFINISHED = frozenset(
    {"created", "waiting_for_resource", "preparing", "pending", "running", "scheduled", "manual"}
)

JOB_ROUTE = "/projects/{id}/jobs/{job_id}"


class _Pipeline(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: int | None = None


class _Artifact(BaseModel):
    model_config = ConfigDict(extra="ignore")
    file_type: str | None = None
    size: int | None = None
    filename: str | None = None
    file_format: str | None = None


class JobAnswer(BaseModel):
    """The fields of GitLab's job entity the tools read."""

    model_config = ConfigDict(extra="ignore")
    id: int
    name: str
    status: str
    stage: str | None = None
    ref: str | None = None
    allow_failure: bool = False
    failure_reason: str | None = None
    duration: float | None = None
    queued_duration: float | None = None
    created_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    web_url: str | None = None
    pipeline: _Pipeline | None = None
    artifacts: list[_Artifact] = Field(default_factory=list)
    artifacts_expire_at: str | None = None

    @property
    def running(self) -> bool:
        return self.status in UNFINISHED

    @property
    def has_archive(self) -> bool:
        """The job kept an artifacts archive (what the single-file endpoint reads from)."""
        return any(a.file_type == "archive" for a in self.artifacts)

    @property
    def artifacts_expired(self) -> bool:
        return expired(self.artifacts_expire_at)


def expired(when: str | None) -> bool:
    """``when`` (GitLab's ISO 8601 time) has passed."""
    if not when:
        return False
    try:
        moment = datetime.fromisoformat(when.replace("Z", "+00:00"))
    except ValueError:
        return False
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment <= datetime.now(UTC)


# -- the result's job fields ---------------------------------------------------------------------


class JobArtifact(BaseModel):
    """One file the job kept (the archive, its metadata, the log, reports such as ``junit``)."""

    name: str | None = Field(description="File name, e.g. `artifacts.zip` or `job.log`.")
    file_type: str | None = Field(
        description="GitLab's artifact type: `archive`, `metadata`, `trace`, `junit`, `cobertura`, ..."
    )
    file_format: str | None = Field(description="`zip`, `gzip` or `raw`.")
    size: int | None = Field(description="Size in bytes.")
    expire_at: str | None = Field(description="When the job's artifacts expire (null: kept).")
    expired: bool = Field(description="True when expire_at has passed.")


class JobFields(BaseModel):
    """The job itself."""

    model_config = ConfigDict(extra="allow")

    id: int = Field(description="The job's ID, as in `/-/jobs/<id>`.")
    name: str
    status: str = Field(description="Lowercase: `failed`, `success`, `running`, `canceled`, ...")
    stage: str | None
    ref: str | None = Field(description="The branch or tag the job ran for.")
    allow_failure: bool = Field(description="True when the job's failure does not fail the pipeline.")
    failure_reason: str | None = Field(
        description="GitLab's reason when the job failed, e.g. `script_failure`, "
        "`stuck_or_timeout_failure`, `runner_system_failure`; null otherwise."
    )
    duration: float | None = Field(description="Seconds the job ran.")
    queued_duration: float | None = Field(description="Seconds the job waited for a runner.")
    created_at: str | None
    started_at: str | None
    finished_at: str | None
    pipeline_id: int | None = Field(description="The pipeline the job belongs to.")
    web_url: str | None = Field(description="The job's page on GitLab.")


def job_fields(job: JobAnswer) -> dict[str, Any]:
    return {
        "id": job.id,
        "name": job.name,
        "status": job.status,
        "stage": job.stage,
        "ref": job.ref,
        "allow_failure": job.allow_failure,
        "failure_reason": job.failure_reason if job.status == "failed" else None,
        "duration": job.duration,
        "queued_duration": job.queued_duration,
        "created_at": job.created_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "pipeline_id": job.pipeline.id if job.pipeline else None,
        "web_url": job.web_url,
    }


def artifacts(job: JobAnswer) -> list[dict[str, Any]]:
    stale = job.artifacts_expired
    return [
        {
            "name": a.filename,
            "file_type": a.file_type,
            "file_format": a.file_format,
            "size": a.size,
            "expire_at": job.artifacts_expire_at,
            "expired": stale,
        }
        for a in job.artifacts
    ]


# -- naming a job and reading it -----------------------------------------------------------------


class JobInput(ToolInput):
    """The arguments that name one job: ``project_id`` and ``job_id``, or ``url``."""

    argument_aliases = PROJECT_ALIASES

    project_id: OptionalProjectId = Field(
        None,
        description="ID or full path of the project, e.g. `42` or `group/subgroup/project`. Required if "
        "url is not provided.",
    )
    job_id: OptionalPositiveId = Field(
        None, description="ID of the job: the number in `/-/jobs/<id>`. Required without url."
    )
    url: OptionalText = Field(
        None,
        description="The job's URL on this GitLab, e.g. https://gitlab.example.com/group/project/-/jobs/123. "
        "Give this, or project_id and job_id.",
    )


def job_target(
    ctx: ToolContext, url: str | None, project: str | None, job_id: int | None, *, project_arg: str
) -> JobRef:
    """The job named by ``url``, or by ``project`` and ``job_id`` (exactly one of the two ways).

    Raises:
        ToolError: ``bad_request`` for both ways, neither, or half of the second.
        InvalidReference: a url that is not a job URL on this gateway's GitLab.
    """
    if url is not None:
        if project is not None or job_id is not None:
            raise bad_request(f"Provide either url, or {project_arg} and job_id, not both.")
        return parse_job_url(ctx.services.gitlab.base, url)
    if project is None or job_id is None:
        missing = " and ".join(n for n, v in ((project_arg, project), ("job_id", job_id)) if v is None)
        raise bad_request(
            "Provide either url (a job URL such as "
            f"{ctx.services.gitlab.base.url}/group/project/-/jobs/123), or {project_arg} and job_id: "
            f"{missing} missing."
        )
    return JobRef(project, job_id)


async def read_job(ctx: ToolContext, target: JobRef) -> JobAnswer:
    """The job, or ``not_found`` naming what is missing (the project, or the job in it)."""
    try:
        data = await ctx.gitlab.rest(
            "GET", JOB_ROUTE, path_params={"id": encode_project(target.project), "job_id": target.job_id}
        )
    except GitLabNotFound as err:
        raise job_not_found(target, err, ctx.gitlab.credential) from None
    return JobAnswer.model_validate(data)


def job_not_found(target: JobRef, err: GitLabNotFound, credential: Credential | None) -> ToolError:
    """GitLab's wording (it does not say whether the project is missing or hidden), what to check,
    and, for an anonymous gateway, that it sees public projects only."""
    if "project" in err.message.lower():
        return not_found(
            project_not_found_message(target.project, credential),
            project=target.project,
        )
    return not_found(
        f"Job {target.job_id} not found in project '{target.project}' or inaccessible. Job IDs are "
        'global (the number in `/-/jobs/<id>`); get_pipeline with include: ["jobs"] lists a '
        "pipeline's jobs." + anonymous_note(credential),
        project=target.project,
        job_id=target.job_id,
    )
