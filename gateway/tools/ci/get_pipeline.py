"""``get_pipeline``: one pipeline and, optionally, one facet (its jobs, downstream pipelines or
bridge jobs), exactly as GitLab's built-in MCP server ships it
(https://docs.gitlab.com/api/graphql/reference/#pipeline).

- Arguments: ``id`` (numeric project ID or full path, plain or URL-encoded once), ``pipeline_id``
  (the global pipeline id, as in ``/-/pipelines/<id>``), ``include`` (at most one of ``jobs``,
  ``downstream_pipelines``, ``bridge_jobs``), ``job_status`` (lowercase ``CiJobStatus``; filters
  the ``jobs`` facet only), ``first`` (1..100, default 20) and ``after`` (the previous
  ``page_info.end_cursor``). Bad input is refused before any request.
- One GraphQL request per call (``operations/get_pipeline.graphql``): facets sit behind
  ``@include``; a numeric project ID goes through ``projects(ids:)`` and a path through
  ``project(fullPath:)`` in the same document.
- Result: ``{id, status, ref, sha, source, web_url}`` plus, only when requested, the facet's
  key and ``page_info {has_next_page, end_cursor}``. Ids are the integer tails of GitLab's global
  IDs, statuses are lowercase, ``web_url`` is the GitLab URL joined with the ``path``/``webPath``
  field. Downstream pipelines add ``project_full_path``; a bridge job's ``downstream_pipeline`` is
  null when the caller cannot read it (GitLab's object-level ``read_pipeline`` check), and
  downstream pipelines the caller cannot read are left out.
- A missing project and a missing pipeline are two distinct ``not_found`` errors
  ("Project ... not found or inaccessible" / "Pipeline ... not found or inaccessible").

:func:`read_pipeline` is shared with the superseded tools in ``gateway.tools.ci.superseded``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator
from pydantic.json_schema import SkipJsonSchema

from gateway.errors import not_found
from gateway.gitlab.client import GitLabSession
from gateway.gitlab.errors import GitLabUpstreamError
from gateway.gitlab.urls import (
    global_id,
    global_id_number,
    is_numeric_id,
    project_address,
    project_full_path,
    project_node,
)
from gateway.tools.arguments import (
    OptionalPositiveId,
    PositiveId,
    ProjectId,
    optional,
    schema_extra,
)
from gateway.tools.context import ToolContext
from gateway.tools.registry import READ_ONLY, Tool, ToolInput, ToolOutput

Facet = Literal["jobs", "downstream_pipelines", "bridge_jobs"]
FACETS: tuple[Facet, ...] = ("jobs", "downstream_pipelines", "bridge_jobs")

#: ``CiJobStatus`` (GitLab GraphQL), lowercased as GitLab's tool takes it
#: (``Ci::HasStatus::AVAILABLE_STATUSES``).
JobStatus = Literal[
    "canceled",
    "canceling",
    "created",
    "failed",
    "manual",
    "pending",
    "preparing",
    "running",
    "scheduled",
    "skipped",
    "success",
    "waiting_for_callback",
    "waiting_for_resource",
]

JOB_STATUSES: tuple[str, ...] = get_args(JobStatus)

DEFAULT_PAGE_SIZE = 20
MAX_PAGE_SIZE = 100
#: GitLab cursors are short base64 strings; anything much longer is not one.
MAX_CURSOR_LENGTH = 1024


# -- arguments -------------------------------------------------------------------------------


def _cursor(value: Any) -> Any:
    """``after``: a non-empty cursor string as GitLab hands them out."""
    if not isinstance(value, str) or not value or len(value) > MAX_CURSOR_LENGTH:
        raise ValueError(
            "must be the `page_info.end_cursor` string of the previous response (a short non-empty string)"
        )
    return value


_PIPELINE_ID_DOC = "ID of the pipeline: the number in `/-/pipelines/<id>` (not the per-project IID)."

PipelineId = Annotated[PositiveId, Field(description=_PIPELINE_ID_DOC)]
OptionalPipelineId = Annotated[OptionalPositiveId, Field(description=_PIPELINE_ID_DOC)]
PageSize = Annotated[
    int,
    Field(
        description=(
            f"Page size for the selected include facet, 1..{MAX_PAGE_SIZE} (default {DEFAULT_PAGE_SIZE})."
        ),
        ge=1,
        le=MAX_PAGE_SIZE,
    ),
]
Cursor = Annotated[
    str | SkipJsonSchema[None],
    BeforeValidator(optional(_cursor)),
    Field(
        description=(
            "Cursor for the selected include facet: `page_info.end_cursor` from the previous response "
            "(only while `page_info.has_next_page` is true)."
        ),
        json_schema_extra=schema_extra(minLength=1, maxLength=MAX_CURSOR_LENGTH),
    ),
]


class GetPipelineInput(ToolInput):
    """One pipeline of one project, by ID, and at most one facet (jobs, downstream pipelines or bridge
    jobs) to page through with first and after."""

    id: ProjectId
    pipeline_id: PipelineId
    include: list[Facet] = Field(
        default_factory=list,
        max_length=1,
        description=(
            "At most one facet to add: `jobs` (build jobs), `downstream_pipelines` (child and "
            "multi-project pipelines) or `bridge_jobs` (trigger jobs with their downstream pipeline). "
            "Omit for the pipeline alone."
        ),
    )
    job_status: JobStatus | SkipJsonSchema[None] = Field(
        None,
        description="Only jobs with this status, e.g. `failed`. Filters the `jobs` facet only.",
        json_schema_extra=schema_extra(),
    )
    first: PageSize = DEFAULT_PAGE_SIZE
    after: Cursor = None

    @field_validator("include", mode="before")
    @classmethod
    def _one_facet(cls, value: Any) -> Any:
        if isinstance(value, str):  # a lone facet name: the intent is plain
            value = [value]
        if value is None:
            return []
        if isinstance(value, list):
            unknown = [v for v in value if v not in FACETS]
            if unknown:
                raise ValueError(
                    f"unknown facet {', '.join(map(repr, unknown))}; accepts one of: {', '.join(FACETS)}"
                )
            if len(value) > 1:
                raise ValueError(
                    f"at most one facet per call, got {len(value)} ({', '.join(map(str, value))}); call "
                    "get_pipeline once per facet"
                )
        return value

    @field_validator("job_status", mode="before")
    @classmethod
    def _known_status(cls, value: Any) -> Any:
        # Checked here rather than by the Literal so the error names the argument plainly.
        if value is None:
            return None
        status = value.strip().lower() if isinstance(value, str) else value
        if status not in JOB_STATUSES:
            raise ValueError(f"unknown job status {value!r}")  # the registry adds the accepted values
        return status

    @field_validator("job_status")
    @classmethod
    def _status_needs_jobs(cls, value: str | None, info: ValidationInfo) -> str | None:
        # `include` is validated first (field order); when it failed, its own error is reported.
        if value is not None and "include" in info.data and info.data["include"] != ["jobs"]:
            raise ValueError('filters the jobs facet only: add include: ["jobs"], or drop job_status')
        return value

    @field_validator("after")
    @classmethod
    def _after_needs_facet(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and "include" in info.data and not info.data["include"]:
            raise ValueError(
                "is a cursor of an include facet: give the same include as the call that returned it"
            )
        return value


# -- result ----------------------------------------------------------------------------------


class _Out(ToolOutput):
    # The published outputSchema lists every key a result may carry, and nothing else.
    model_config = ConfigDict(extra="forbid")


class PageInfo(_Out):
    """Where the selected facet's page ends."""

    has_next_page: bool = Field(description="True when another page follows: call again with `after`.")
    end_cursor: str | None = Field(description="Pass as `after` for the next page (null when empty).")


class PipelineJob(_Out):
    """An entry of the jobs facet."""

    id: int
    name: str | None
    status: str | None = Field(description="Lowercase CiJobStatus, e.g. `failed`.")
    stage: str | None
    allow_failure: bool
    web_url: str | None


class DownstreamPipeline(_Out):
    """A downstream (child or multi-project) pipeline."""

    id: int
    status: str = Field(description="Lowercase pipeline status, e.g. `success`.")
    ref: str | None
    sha: str | None
    source: str | None
    web_url: str | None
    project_full_path: str | None = Field(description="Full path of the pipeline's project.")


class BridgeJob(_Out):
    """An entry of the bridge_jobs facet: a trigger job and the pipeline it started."""

    id: int
    name: str | None
    status: str | None = Field(description="Lowercase CiJobStatus.")
    downstream_pipeline: DownstreamPipeline | None = Field(
        description="The pipeline this bridge triggered; null when none was created or you cannot read it."
    )


class PipelineBase(_Out):
    """The pipeline itself (always present)."""

    id: int = Field(description="The pipeline ID (the number in `/-/pipelines/<id>`).")
    status: str = Field(description="Lowercase pipeline status, e.g. `failed`.")
    ref: str | None
    sha: str | None
    source: str | None = Field(description="What started it, e.g. `push`, `schedule`, `parent_pipeline`.")
    web_url: str | None


class GetPipelineOutput(PipelineBase):
    """The pipeline, and only the requested facet's key with its page_info."""

    jobs: list[PipelineJob] | SkipJsonSchema[None] = Field(
        None, description="With include: [jobs].", json_schema_extra=schema_extra()
    )
    downstream_pipelines: list[DownstreamPipeline] | SkipJsonSchema[None] = Field(
        None, description="With include: [downstream_pipelines].", json_schema_extra=schema_extra()
    )
    bridge_jobs: list[BridgeJob] | SkipJsonSchema[None] = Field(
        None, description="With include: [bridge_jobs].", json_schema_extra=schema_extra()
    )
    page_info: PageInfo | SkipJsonSchema[None] = Field(
        None, description="Paging of the selected facet.", json_schema_extra=schema_extra()
    )


# -- the read --------------------------------------------------------------------------------


def pipeline_variables(
    project: str,
    pipeline_id: int,
    facet: Facet | None = None,
    *,
    job_statuses: list[str] | None = None,
    bridge_statuses: list[str] | None = None,
    first: int = DEFAULT_PAGE_SIZE,
    after: str | None = None,
) -> dict[str, Any]:
    """The variables of ``operations/get_pipeline.graphql`` for one call (see :func:`read_pipeline`).

    A numeric project goes through ``projects(ids:)`` (``byId``), a path through
    ``project(fullPath:)``; the skipped one gets an inert value because both are declared
    non-null. Statuses are upcased to ``CiJobStatus`` names, as GitLab's tool does.

    Raises:
        ToolError: ``bad_request`` for an impossible project path.
    """
    by_id = is_numeric_id(project)
    return {
        **project_address(None if by_id else project_full_path(project), int(project) if by_id else None),
        "pipelineId": global_id("Ci::Pipeline", pipeline_id),
        "includeJobs": facet == "jobs",
        "includeDownstreamPipelines": facet == "downstream_pipelines",
        "includeBridgeJobs": facet == "bridge_jobs",
        "jobStatuses": [s.upper() for s in job_statuses] if job_statuses and facet == "jobs" else None,
        "bridgeStatuses": [s.upper() for s in bridge_statuses]
        if bridge_statuses and facet == "bridge_jobs"
        else None,
        "first": first if facet else None,
        "after": after if facet else None,
    }


async def read_pipeline(
    gitlab: GitLabSession,
    project: str,
    pipeline_id: int,
    facet: Facet | None = None,
    *,
    job_statuses: list[str] | None = None,
    bridge_statuses: list[str] | None = None,
    first: int = DEFAULT_PAGE_SIZE,
    after: str | None = None,
) -> dict[str, Any]:
    """Read one pipeline and at most one facet with one GraphQL request.

    Args:
        gitlab: the caller's GitLab session.
        project: a numeric project ID or a full path (plain or encoded once), already validated.
        pipeline_id: the global pipeline id.
        facet: ``jobs``, ``downstream_pipelines``, ``bridge_jobs`` or None.
        job_statuses: lowercase ``CiJobStatus`` values filtering the ``jobs`` facet.
        bridge_statuses: the same for the ``bridge_jobs`` facet (the superseded tools use it).
        first, after: the facet's page size and cursor.

    Returns:
        the ``structuredContent`` described by :class:`GetPipelineOutput`.

    Raises:
        ToolError: ``not_found`` for a missing or unreadable project or pipeline.
        GitLabError: whatever the GitLab client raises (mapped by the registry).
    """
    by_id = is_numeric_id(project)
    variables = pipeline_variables(
        project,
        pipeline_id,
        facet,
        job_statuses=job_statuses,
        bridge_statuses=bridge_statuses,
        first=first,
        after=after,
    )
    data = await gitlab.graphql("get_pipeline", variables)
    node = project_node(data, by_id=by_id)
    if node is None:
        raise not_found(
            f"Project '{project}' not found or inaccessible. Check the project ID or full path (for example "
            "`group/subgroup/project`) and that your GitLab token can read the project."
        )
    pipeline = node.get("pipeline")
    if pipeline is None:
        raise not_found(
            f"Pipeline {pipeline_id} not found or inaccessible in project '{project}'. Check that "
            f"{pipeline_id} is the pipeline ID (the number in `/-/pipelines/<id>`, not the per-project IID) "
            "and that your GitLab token can read the project's pipelines."
        )
    try:
        return _shape(gitlab, pipeline, facet)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        # GitLab's answer lacks a non-null field (``status: null``), or carries a malformed id or
        # a value of another type: not the caller's fault.
        raise GitLabUpstreamError(
            f"GitLab answered get_pipeline in an unexpected shape ({exc}); try again, and report it if it "
            "persists.",
            request_id=gitlab.request_id,
        ) from None


def _shape(gitlab: GitLabSession, pipeline: dict[str, Any], facet: Facet | None) -> dict[str, Any]:
    out = _pipeline(gitlab, pipeline)
    if facet is None:
        return out
    connection = pipeline.get(
        {"jobs": "jobs", "downstream_pipelines": "downstream", "bridge_jobs": "bridgeJobs"}[facet]
    )
    nodes = [n for n in ((connection or {}).get("nodes") or []) if n]  # null: not readable by the caller
    if facet == "jobs":
        out["jobs"] = [_job(gitlab, n) for n in nodes]
    elif facet == "downstream_pipelines":
        out["downstream_pipelines"] = [_pipeline(gitlab, n, with_project=True) for n in nodes]
    else:
        out["bridge_jobs"] = [_bridge(gitlab, n) for n in nodes]
    page = (connection or {}).get("pageInfo") or {}
    out["page_info"] = {"has_next_page": bool(page.get("hasNextPage")), "end_cursor": page.get("endCursor")}
    return out


def _lower(value: Any) -> str | None:
    return value.lower() if isinstance(value, str) else None


def _web_url(gitlab: GitLabSession, path: Any) -> str | None:
    return gitlab.web_url(path) if isinstance(path, str) and path else None


def _pipeline(gitlab: GitLabSession, node: dict[str, Any], *, with_project: bool = False) -> dict[str, Any]:
    out = {
        "id": global_id_number(node["id"]),
        "status": node["status"].lower(),
        "ref": node.get("ref"),
        "sha": node.get("sha"),
        "source": node.get("source"),
        "web_url": _web_url(gitlab, node.get("path")),
    }
    if with_project:
        out["project_full_path"] = (node.get("project") or {}).get("fullPath")
    return out


def _job(gitlab: GitLabSession, node: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": global_id_number(node["id"]),
        "name": node.get("name"),
        "status": _lower(node.get("status")),
        "stage": (node.get("stage") or {}).get("name"),
        "allow_failure": bool(node.get("allowFailure")),
        "web_url": _web_url(gitlab, node.get("webPath")),
    }


def _bridge(gitlab: GitLabSession, node: dict[str, Any]) -> dict[str, Any]:
    downstream = node.get("downstreamPipeline")
    return {
        "id": global_id_number(node["id"]),
        "name": node.get("name"),
        "status": _lower(node.get("status")),
        "downstream_pipeline": _pipeline(gitlab, downstream, with_project=True) if downstream else None,
    }


# -- the tool --------------------------------------------------------------------------------


async def get_pipeline(ctx: ToolContext, args: GetPipelineInput) -> dict[str, Any]:
    """The ``get_pipeline`` handler (see the module docstring)."""
    return await read_pipeline(
        ctx.gitlab,
        args.id,
        args.pipeline_id,
        args.include[0] if args.include else None,
        job_statuses=[args.job_status] if args.job_status else None,
        first=args.first,
        after=args.after,
    )


DESCRIPTION = """\
Get a pipeline and optionally its jobs, downstream pipelines, or bridge jobs.

Returns the pipeline's id, status, ref, sha, source and web_url. Add one facet with `include`:
`jobs` (build jobs: id, name, status, stage, allow_failure, web_url; narrow them with
`job_status`, e.g. `failed`), `downstream_pipelines` (child and multi-project pipelines, each
with project_full_path) or `bridge_jobs` (trigger jobs, each with the downstream_pipeline it
started, or null when you cannot read it). A facet comes in pages of `first` (default 20, max
100) with `page_info`; while `page_info.has_next_page` is true, call again with
`after: page_info.end_cursor`. To find why a pipeline failed, read `jobs` with
`job_status: failed`, then `bridge_jobs` and each failed downstream pipeline.
"""

TOOLS: list[Tool] = [
    Tool(
        name="get_pipeline",
        title="Get pipeline",
        description=DESCRIPTION,
        input_model=GetPipelineInput,
        output_model=GetPipelineOutput,
        handler=get_pipeline,
        annotations=READ_ONLY,
        toolset="ci",
    )
]
