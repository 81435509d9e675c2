"""One pipeline and at most one facet, read with one GraphQL request (``operations/ci/get_pipeline.graphql``;
the ``failures`` facet adds the reads :mod:`gateway.tools.ci.pipeline_failures` lists).

Shared by ``get_pipeline`` and the superseded pipeline tools. The answer is read into typed models
(:class:`GetPipelineAnswer`) and shaped into the tools' output models: ids are the integer tails
of GitLab's global IDs, statuses are lowercase, ``web_url`` is the GitLab URL joined with the
``path``/``webPath`` field. A bridge job's ``downstream_pipeline`` is null when the caller cannot
read it (GitLab's object-level ``read_pipeline`` check), and downstream pipelines the caller cannot
read (null nodes) are left out.
"""

from __future__ import annotations

from typing import Any, Generic, Literal, TypeVar, get_args

from pydantic import ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from gateway.errors import ToolError, not_found
from gateway.gitlab.client import GitLabSession
from gateway.gitlab.needs import Need
from gateway.gitlab.operation import ByPathOrId, GlobalIdNumber, GraphQLData, Operation
from gateway.gitlab.urls import global_id, is_numeric_id, project_address, project_full_path
from gateway.tools.arguments import schema_extra, shown
from gateway.tools.ci.pipeline_address import PIPELINE_BY_ID, iid_reader
from gateway.tools.ci.pipeline_failures import (
    MAX_FAILURES_PAGE,
    FailedTest,
    PipelineFailure,
    ReportSummary,
    ReportSummaryNode,
    fit_answer,
    read_failures,
)
from gateway.tools.pagination import DEFAULT_PAGE_SIZE, PageInfo, PageInfoAnswer, page_info
from gateway.tools.registry import ToolOutput
from gateway.tools.visibility import and_token_can, project_not_found_message

Facet = Literal["jobs", "downstream_pipelines", "bridge_jobs", "failures"]

#: ``CiJobStatus`` and ``PipelineStatusEnum`` (the same names), lowercased as GitLab's tools take them
#: (``Ci::HasStatus::AVAILABLE_STATUSES``).
Status = Literal[
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
STATUSES: tuple[str, ...] = get_args(Status)


def status_argument(value: Any, what: str) -> Any:
    """A status argument, case-insensitive (``FAILED`` is ``failed``); None passes.

    Raises:
        ValueError: not one of :data:`STATUSES` (the registry adds the accepted values).
    """
    if value is None:
        return None
    status = value.strip().lower() if isinstance(value, str) else value
    if status not in STATUSES:
        raise ValueError(f"unknown {what} {shown(value)}")
    return status


FACETS: tuple[Facet, ...] = ("jobs", "downstream_pipelines", "bridge_jobs", "failures")

# -- GitLab's answer --------------------------------------------------------------------------

NodeT = TypeVar("NodeT")


class PipelineFields(GraphQLData):
    """``fragment getPipelineFields on Pipeline``."""

    id: GlobalIdNumber
    status: str
    ref: str | None = None
    sha: str | None = None
    source: str | None = None
    path: str | None = None


class ProjectPath(GraphQLData):
    fullPath: str | None = None


class DownstreamNode(PipelineFields):
    project: ProjectPath | None = None


class Stage(GraphQLData):
    name: str | None = None


class JobNode(GraphQLData):
    id: GlobalIdNumber
    name: str | None = None
    status: str | None = None
    allowFailure: bool | None = None
    stage: Stage | None = None
    webPath: str | None = None
    failureMessage: str | None = None  # the failures facet only
    exitCode: int | None = None


class BridgeNode(GraphQLData):
    id: GlobalIdNumber
    name: str | None = None
    status: str | None = None
    downstreamPipeline: DownstreamNode | None = None


class Connection(GraphQLData, Generic[NodeT]):
    """A GraphQL connection; null nodes are those the caller may not read."""

    pageInfo: PageInfoAnswer | None = None
    nodes: list[NodeT | None] | None = None

    def readable(self) -> list[NodeT]:
        return [n for n in self.nodes or [] if n is not None]


class PipelineNode(PipelineFields):
    jobs: Connection[JobNode] | None = None
    downstream: Connection[DownstreamNode] | None = None
    bridgeJobs: Connection[BridgeNode] | None = None
    failedJobs: Connection[JobNode] | None = None
    testReportSummary: ReportSummaryNode | None = None


class ProjectNode(GraphQLData):
    pipeline: PipelineNode | None = None


class GetPipelineAnswer(ByPathOrId[ProjectNode]):
    """``data`` of ``getPipeline``."""


#: ``CiJob.exitCode`` arrived in GitLab 17.9: before, ``exit_code`` is null.
EXIT_CODE = Need("CiJob.exitCode", since=(17, 9), without="drop", note="`exit_code` is null")
GET_PIPELINE = Operation("get_pipeline", GetPipelineAnswer, needs=(PIPELINE_BY_ID, EXIT_CODE))

# -- the tools' results -----------------------------------------------------------------------


class _Out(ToolOutput):
    # The published outputSchema lists every key a result may carry, and nothing else.
    model_config = ConfigDict(extra="forbid")


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


class PipelineWait(_Out):
    """How a ``wait_seconds`` wait ended."""

    timed_out: bool = Field(
        description="True when wait_seconds passed before the pipeline reached a final status."
    )
    waited_seconds: float = Field(description="How long the gateway waited.")
    message: str = Field(description="What happened, and what to do next.")


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
    failures: list[PipelineFailure] | SkipJsonSchema[None] = Field(
        None,
        description="With include: [failures]: the failed jobs of this page, each with why it failed and "
        "the end of its failing log section.",
        json_schema_extra=schema_extra(),
    )
    failed_tests: list[FailedTest] | SkipJsonSchema[None] = Field(
        None,
        description="With include: [failures]: failed test cases from those jobs' test reports.",
        json_schema_extra=schema_extra(),
    )
    test_summary: ReportSummary | SkipJsonSchema[None] = Field(
        None,
        description="With include: [failures]: the pipeline's whole test report, counted.",
        json_schema_extra=schema_extra(),
    )
    more: str | SkipJsonSchema[None] = Field(
        None,
        description="With include: [failures]: how to read more (other failed jobs, whole logs).",
        json_schema_extra=schema_extra(),
    )
    page_info: PageInfo | SkipJsonSchema[None] = Field(
        None, description="Paging of the selected facet.", json_schema_extra=schema_extra()
    )
    wait: PipelineWait | SkipJsonSchema[None] = Field(
        None, description="With wait_seconds: how the wait ended.", json_schema_extra=schema_extra()
    )


# -- the read ---------------------------------------------------------------------------------


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
    """The variables of ``getPipeline`` for one call (see :func:`read_pipeline`).

    Statuses are upcased to ``CiJobStatus`` names; the project is addressed by path or by ID
    (:func:`~gateway.gitlab.urls.project_address`).

    Raises:
        InvalidReference: an impossible project path.
    """
    by_id = is_numeric_id(project)
    return {
        **project_address(None if by_id else project_full_path(project), int(project) if by_id else None),
        "pipelineId": global_id("Ci::Pipeline", pipeline_id),
        "includeJobs": facet == "jobs",
        "includeDownstreamPipelines": facet == "downstream_pipelines",
        "includeBridgeJobs": facet == "bridge_jobs",
        "includeFailures": facet == "failures",
        "jobStatuses": [s.upper() for s in job_statuses] if job_statuses and facet == "jobs" else None,
        "bridgeStatuses": [s.upper() for s in bridge_statuses]
        if bridge_statuses and facet == "bridge_jobs"
        else None,
        "first": (min(first, MAX_FAILURES_PAGE) if facet == "failures" else first) if facet else None,
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
) -> GetPipelineOutput:
    """Read one pipeline and at most one facet with one GraphQL request.

    Args:
        gitlab: the caller's GitLab session.
        project: a numeric project ID or a full path (plain or encoded once), already validated.
        pipeline_id: the global pipeline id.
        facet: ``jobs``, ``downstream_pipelines``, ``bridge_jobs`` or None.
        job_statuses: lowercase ``CiJobStatus`` values filtering the ``jobs`` facet.
        bridge_statuses: the same for the ``bridge_jobs`` facet (the superseded tools use it).
        first, after: the facet's page size and cursor.

    Raises:
        ToolError: ``not_found`` for a missing or unreadable project or pipeline.
        GitLabError: what the GitLab client raises; ``upstream_error`` for an answer of another shape.
    """
    variables = pipeline_variables(
        project,
        pipeline_id,
        facet,
        job_statuses=job_statuses,
        bridge_statuses=bridge_statuses,
        first=first,
        after=after,
    )

    def missing() -> ToolError:
        return not_found(
            f"Pipeline {pipeline_id} not found or inaccessible in project '{project}'. Check that "
            f"{pipeline_id} is the pipeline ID (the number in `/-/pipelines/<id>`, not the per-project IID)"
            + and_token_can(gitlab.credential, "read the project's pipelines")
        )

    iid_of = iid_reader(gitlab, project, pipeline_id, missing)
    node = (await GET_PIPELINE.run(gitlab, variables, iid_of=iid_of)).project_node()
    if node is None:
        raise not_found(project_not_found_message(project, gitlab.credential))
    pipeline = node.pipeline
    if pipeline is None:
        raise missing()
    out = GetPipelineOutput(**_pipeline_fields(gitlab, pipeline))
    if facet == "failures":
        failed = pipeline.failedJobs or Connection[JobNode]()
        out.failures, out.failed_tests, out.test_summary = await read_failures(
            gitlab, project, variables, failed.readable(), pipeline.testReportSummary, iid_of
        )
        out.page_info = page_info(failed.pageInfo)
        out.more = _more(out)
        fit_answer(out.failures, out.failed_tests, lambda: len(out.model_dump_json(exclude_unset=True)))
    elif facet == "jobs":
        jobs = pipeline.jobs or Connection[JobNode]()
        out.jobs = [_job(gitlab, n) for n in jobs.readable()]
        out.page_info = page_info(jobs.pageInfo)
    elif facet == "downstream_pipelines":
        downstream = pipeline.downstream or Connection[DownstreamNode]()
        out.downstream_pipelines = [_downstream(gitlab, n) for n in downstream.readable()]
        out.page_info = page_info(downstream.pageInfo)
    elif facet == "bridge_jobs":
        bridges = pipeline.bridgeJobs or Connection[BridgeNode]()
        out.bridge_jobs = [_bridge(gitlab, n) for n in bridges.readable()]
        out.page_info = page_info(bridges.pageInfo)
    return out


def _more(out: GetPipelineOutput) -> str:
    parts = []
    if out.page_info is not None and out.page_info.has_next_page:
        parts.append(
            f'More failed jobs: call again with the same include and after: "{out.page_info.end_cursor}".'
        )
    parts.append(
        'A job\'s whole log: get_job with project_id, job_id and include: ["log"] (byte_offset or '
        "tail_lines to page through it)."
    )
    if out.test_summary is not None and out.test_summary.failed_tests_not_shown:
        where = f" ({out.web_url}/test_report)" if out.web_url else ""
        parts.append(
            f"{out.test_summary.failed_tests_not_shown} more failed test cases are in the pipeline's "
            f"Tests tab{where}."
        )
    return " ".join(parts)


def _web_url(gitlab: GitLabSession, path: str | None) -> str | None:
    return gitlab.web_url(path) if path else None


def _lower(value: str | None) -> str | None:
    return value.lower() if value is not None else None


def _pipeline_fields(gitlab: GitLabSession, node: PipelineFields) -> dict[str, Any]:
    return {
        "id": node.id,
        "status": node.status.lower(),
        "ref": node.ref,
        "sha": node.sha,
        "source": node.source,
        "web_url": _web_url(gitlab, node.path),
    }


def _downstream(gitlab: GitLabSession, node: DownstreamNode) -> DownstreamPipeline:
    return DownstreamPipeline(
        **_pipeline_fields(gitlab, node), project_full_path=node.project.fullPath if node.project else None
    )


def _job(gitlab: GitLabSession, node: JobNode) -> PipelineJob:
    return PipelineJob(
        id=node.id,
        name=node.name,
        status=_lower(node.status),
        stage=node.stage.name if node.stage else None,
        allow_failure=bool(node.allowFailure),
        web_url=_web_url(gitlab, node.webPath),
    )


def _bridge(gitlab: GitLabSession, node: BridgeNode) -> BridgeJob:
    downstream = node.downstreamPipeline
    return BridgeJob(
        id=node.id,
        name=node.name,
        status=_lower(node.status),
        downstream_pipeline=_downstream(gitlab, downstream) if downstream else None,
    )
