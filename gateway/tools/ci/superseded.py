"""The superseded pipeline tools, kept callable during the migration to ``get_pipeline``.

GitLab's MCP server folds GitLab Duo's separate pipeline reads into
``get_pipeline``'s facets and asks to keep the old tools available meanwhile, with the mapping
documented (``docs/tools/get_pipeline.md``). Their call shapes differ from ``get_pipeline``'s, so
aliases cannot reproduce them; each is a thin tool over the same GraphQL read
(:func:`gateway.tools.ci.get_pipeline.read_pipeline`, one request per call):

==========================  ===========================================================
superseded tool             ``get_pipeline`` call it maps to
==========================  ===========================================================
get_pipeline_jobs           include: [jobs]
get_pipeline_failing_jobs   include: [jobs], job_status: failed
get_downstream_pipelines    include: [downstream_pipelines]
get_failing_bridge_jobs     include: [bridge_jobs], bridges filtered to status failed
==========================  ===========================================================

Names are those of GitLab Duo Workflow Service's tools (``duo_workflow_service/tools/pipeline.py``)
and the MCP server's REST-backed ``get_pipeline_jobs`` (https://docs.gitlab.com/api/jobs/). The
pipeline is named as those tools named it, by its web ``url``
(``https://gitlab.example.com/group/project/-/pipelines/42``, on the configured GitLab only), or
as ``get_pipeline`` names it, by ``project_id`` (or ``id``) and ``pipeline_id``. Paging is ``get_pipeline``'s
(``first``/``after``). Not carried over: locating a pipeline through a merge request
(``merge_request_iid`` or a merge request URL) and ``exclude_allow_failure`` (GitLab's tool dropped it).
The failing-bridge filter is applied by GitLab (``jobs(jobKind: BRIDGE, statuses: [FAILED])``),
so pages stay full.
"""

from __future__ import annotations

from typing import Any

from gateway.tools.arguments import PROJECT_ALIASES, OptionalProjectId
from gateway.tools.ci.get_pipeline import OptionalPipelineId, PipelineUrl, pipeline_target
from gateway.tools.ci.pipeline_read import (
    GET_PIPELINE,
    BridgeJob,
    DownstreamPipeline,
    Facet,
    GetPipelineOutput,
    PipelineBase,
    PipelineJob,
    read_pipeline,
)
from gateway.tools.context import ToolContext
from gateway.tools.pagination import PAGING, Cursor, PageInfo, PageSize, after_field, first_field
from gateway.tools.registry import READ_ONLY, Tool, ToolInput

#: These tools share one docs page.
DOC_PAGE = "superseded_pipeline_tools"
#: Their own toolset, not served by default: a deployment whose agents still call them adds it
#: (``--toolsets default,superseded``), and every other keeps them out of ``tools/list``.
TOOLSET = "superseded"


class LegacyPipelineInput(ToolInput):
    """A pipeline named by its web URL, or by project and pipeline id; and the facet's paging."""

    argument_aliases = PROJECT_ALIASES

    url: PipelineUrl = None
    project_id: OptionalProjectId = None
    pipeline_id: OptionalPipelineId = None
    first: PageSize = first_field("the selected include facet")
    after: Cursor = after_field("the selected include facet")


class PipelineJobsOutput(PipelineBase):
    """The pipeline and one page of its jobs."""

    jobs: list[PipelineJob]
    page_info: PageInfo


class DownstreamPipelinesOutput(PipelineBase):
    """The pipeline and one page of its downstream pipelines."""

    downstream_pipelines: list[DownstreamPipeline]
    page_info: PageInfo


class BridgeJobsOutput(PipelineBase):
    """The pipeline and one page of its bridge jobs."""

    bridge_jobs: list[BridgeJob]
    page_info: PageInfo


def _handler(
    tool: str,
    facet: Facet,
    *,
    job_statuses: list[str] | None = None,
    bridge_statuses: list[str] | None = None,
) -> Any:
    async def handle(ctx: ToolContext, args: LegacyPipelineInput) -> GetPipelineOutput:
        project, pipeline_id = pipeline_target(ctx, tool, args.url, args.project_id, args.pipeline_id)
        return await read_pipeline(
            ctx.gitlab,
            project,
            pipeline_id,
            facet,
            job_statuses=job_statuses,
            bridge_statuses=bridge_statuses,
            first=args.first,
            after=args.after,
        )

    handle.__name__ = handle.__qualname__ = tool
    return handle


def _legacy(
    name: str,
    title: str,
    replacement: str,
    what: str,
    facet: Facet,
    output: type[PipelineBase],
    **kw: Any,
) -> Tool:
    return Tool(
        name=name,
        title=title,
        description=(
            f"Superseded by get_pipeline with {replacement}; kept during the migration, prefer get_pipeline. "
            f"{what} Name the pipeline by `url` (its web URL) or by `project_id` and `pipeline_id`. {PAGING}"
        ),
        input_model=LegacyPipelineInput,
        output_model=output,
        handler=_handler(name, facet, **kw),
        annotations=READ_ONLY,
        toolset=TOOLSET,
        reference_hint="Or name the pipeline by `project_id` and `pipeline_id`.",
        operations=(GET_PIPELINE,),
    )


TOOLS: list[Tool] = [
    _legacy(
        "get_pipeline_jobs",
        "Get pipeline jobs (superseded)",
        'include: ["jobs"]',
        "Lists a pipeline's build jobs (id, name, status, stage, allow_failure, web_url).",
        "jobs",
        PipelineJobsOutput,
    ),
    _legacy(
        "get_pipeline_failing_jobs",
        "Get failing pipeline jobs (superseded)",
        'include: ["jobs"], job_status: "failed"',
        "Lists a pipeline's failed jobs. When there are none, check get_failing_bridge_jobs and each "
        "downstream pipeline before concluding nothing failed.",
        "jobs",
        PipelineJobsOutput,
        job_statuses=["failed"],
    ),
    _legacy(
        "get_downstream_pipelines",
        "Get downstream pipelines (superseded)",
        'include: ["downstream_pipelines"]',
        "Lists the pipelines a pipeline triggered (child and multi-project), with status, web_url and "
        "project_full_path; ones you cannot read are left out.",
        "downstream_pipelines",
        DownstreamPipelinesOutput,
    ),
    _legacy(
        "get_failing_bridge_jobs",
        "Get failing bridge jobs (superseded)",
        'include: ["bridge_jobs"]',
        "Lists a pipeline's failed bridge (trigger) jobs, each with the downstream pipeline it started "
        "(null when none was created or you cannot read it).",
        "bridge_jobs",
        BridgeJobsOutput,
        bridge_statuses=["failed"],
    ),
]
