"""``get_pipeline``: one pipeline and, optionally, one facet (its jobs, downstream pipelines or
bridge jobs), exactly as GitLab's built-in MCP server ships it
(https://docs.gitlab.com/api/graphql/reference/#pipeline); beyond GitLab's tool, the ``failures``
facet (what failed and why: :mod:`gateway.tools.ci.pipeline_failures`) and ``wait_seconds``
(wait for the pipeline to finish: :mod:`gateway.tools.ci.pipeline_wait`).

- Arguments: ``url`` (the pipeline's web URL, on the configured GitLab only), or ``project_id``
  (numeric project ID or full path, plain or URL-encoded once; ``id``, GitLab's name in this tool,
  is accepted too) and ``pipeline_id`` (the global pipeline id, as in ``/-/pipelines/<id>``),
  ``include`` (at most one of ``jobs``, ``downstream_pipelines``, ``bridge_jobs``, ``failures``),
  ``job_status`` (lowercase ``CiJobStatus``; filters the ``jobs`` facet only), ``first`` (1..100,
  default 20), ``after`` (the previous ``page_info.end_cursor``) and ``wait_seconds`` (0..300).
  Bad input is refused before any request.
- One GraphQL request per call (``operations/ci/get_pipeline.graphql``) but for ``failures`` and
  waits (see their modules): facets sit behind ``@include``; a numeric project ID goes through
  ``projects(ids:)`` and a path through ``project(fullPath:)`` in the same document.
- Result: ``{id, status, ref, sha, source, web_url}`` plus, only when requested, the facet's
  key and ``page_info {has_next_page, end_cursor}``. Ids are the integer tails of GitLab's global
  IDs, statuses are lowercase, ``web_url`` is the GitLab URL joined with the ``path``/``webPath``
  field. Downstream pipelines add ``project_full_path``; a bridge job's ``downstream_pipeline`` is
  null when the caller cannot read it (GitLab's object-level ``read_pipeline`` check), and
  downstream pipelines the caller cannot read are left out.
- A missing project and a missing pipeline are two distinct ``not_found`` errors
  ("Project ... not found or inaccessible" / "Pipeline ... not found or inaccessible").

:func:`~gateway.tools.ci.pipeline_read.read_pipeline` is shared with the superseded tools in
``gateway.tools.ci.superseded``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator
from pydantic.json_schema import SkipJsonSchema

from gateway.errors import bad_request
from gateway.gitlab.urls import parse_pipeline_url
from gateway.tools.arguments import (
    PROJECT_ALIASES,
    OptionalPositiveId,
    OptionalProjectId,
    PositiveId,
    schema_extra,
    shown,
)
from gateway.tools.ci.pipeline_failures import GET_PIPELINE_TEST_CASES, MAX_FAILURES_PAGE
from gateway.tools.ci.pipeline_read import (
    FACETS,
    GET_PIPELINE,
    Facet,
    GetPipelineOutput,
    Status,
    read_pipeline,
    status_argument,
)
from gateway.tools.ci.pipeline_wait import MAX_WAIT_SECONDS, wait_for_pipeline
from gateway.tools.context import ToolContext
from gateway.tools.pagination import Cursor, PageSize, after_field, first_field
from gateway.tools.registry import READ_ONLY, Tool, ToolInput

# -- arguments -------------------------------------------------------------------------------


_PIPELINE_ID_DOC = "ID of the pipeline: the number in `/-/pipelines/<id>` (not the per-project IID)."

PipelineId = Annotated[PositiveId, Field(description=_PIPELINE_ID_DOC)]
OptionalPipelineId = Annotated[OptionalPositiveId, Field(description=_PIPELINE_ID_DOC)]


def _no_bool(value: Any) -> Any:
    # JSON true/false would otherwise pass as 1/0 (pydantic's lax int).
    if isinstance(value, bool):
        raise ValueError("must be an integer, not true/false")
    return value


PipelineUrl = Annotated[
    str | SkipJsonSchema[None],
    Field(
        description=(
            "The pipeline's URL on this GitLab, e.g. "
            "https://gitlab.example.com/group/project/-/pipelines/42 (or project_id and pipeline_id)."
        ),
        json_schema_extra=schema_extra(minLength=1, maxLength=4096),
    ),
]


def pipeline_target(
    ctx: ToolContext, tool: str, url: str | None, project: str | None, pipeline_id: int | None
) -> tuple[str, int]:
    """``(project, pipeline_id)`` from ``url`` or ``project_id`` + ``pipeline_id``; no request is made.

    Raises:
        ToolError: ``bad_request`` when both or neither are given.
        InvalidReference: the URL is not a pipeline URL of the configured GitLab.
    """
    if url is not None:
        if project is not None or pipeline_id is not None:
            raise bad_request(f"{tool}: give either `url`, or `project_id` and `pipeline_id`, not both.")
        ref = parse_pipeline_url(ctx.services.gitlab.base, url)
        return ref.project, ref.pipeline_id
    if project is None or pipeline_id is None:
        missing = "`project_id`" if project is None else "`pipeline_id`"
        latest = ""
        if project is not None:
            # Pointed to, not served: a "latest" read would answer whichever pipeline started last,
            # so a diagnosis could silently move to another pipeline between two calls.
            latest = (
                f" For the latest pipeline of a branch or tag, call list_pipelines with project_id "
                f"'{project}', ref '<branch or tag>' and first 1 (newest first), then pass its `id` here "
                "as `pipeline_id`."
            )
        raise bad_request(
            f"{tool}: {missing} is missing; name the pipeline by `url` (its web URL, "
            "https://<gitlab>/<group>/<project>/-/pipelines/<id>) or by `project_id` and `pipeline_id`."
            + latest,
            invalid_arguments=["pipeline_id" if project is not None else "project_id"],
        )
    return project, pipeline_id


class GetPipelineInput(ToolInput):
    """One pipeline, by `url` or by `project_id` and `pipeline_id`, and at most one facet (`jobs`,
    `downstream_pipelines`, `bridge_jobs` or `failures`) to page through with first and after."""

    argument_aliases = PROJECT_ALIASES

    url: PipelineUrl = None
    project_id: OptionalProjectId = None
    pipeline_id: OptionalPipelineId = None
    include: list[Facet] = Field(
        default_factory=list,
        max_length=1,
        description=(
            "At most one facet: `jobs`, `downstream_pipelines` (child and multi-project), "
            "`bridge_jobs` (trigger jobs) or `failures` (failed jobs: why, log end, failed tests). "
            "Omit for the pipeline alone."
        ),
    )
    job_status: Status | SkipJsonSchema[None] = Field(
        None,
        description="Only jobs with this status (the `jobs` facet).",
        json_schema_extra=schema_extra(),
    )
    first: PageSize = first_field(f"the selected include facet (`failures`: at most {MAX_FAILURES_PAGE})")
    after: Cursor = after_field("the selected include facet")
    wait_seconds: Annotated[int, Field(ge=0, le=MAX_WAIT_SECONDS), BeforeValidator(_no_bool)] = Field(
        0,
        description="0 (default): answer at once. 1-300: the gateway polls GitLab and answers once the "
        "pipeline is success, failed, canceled, skipped or manual, or when this many seconds have passed.",
    )

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
                    f"unknown facet {', '.join(map(shown, unknown))}; accepts one of: {', '.join(FACETS)}"
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
        return status_argument(value, "job status")

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


# -- the tool --------------------------------------------------------------------------------


async def get_pipeline(ctx: ToolContext, args: GetPipelineInput) -> GetPipelineOutput:
    """The ``get_pipeline`` handler (see the module docstring)."""
    project, pipeline_id = pipeline_target(ctx, "get_pipeline", args.url, args.project_id, args.pipeline_id)
    facet = args.include[0] if args.include else None
    wait = None
    if args.wait_seconds:
        wait = await wait_for_pipeline(ctx, project, pipeline_id, args.wait_seconds)
        if facet is None:
            return wait.answer(None)
    out = await read_pipeline(
        ctx.gitlab,
        project,
        pipeline_id,
        facet,
        job_statuses=[args.job_status] if args.job_status else None,
        first=args.first,
        after=args.after,
    )
    return wait.answer(out) if wait is not None else out


def _waits(arguments: Mapping[str, Any]) -> bool:
    wait = arguments.get("wait_seconds")
    return isinstance(wait, int | str) and not isinstance(wait, bool) and str(wait).strip() not in ("", "0")


DESCRIPTION = """\
Get a pipeline (by `url`, or `project_id` and `pipeline_id`): id, status, ref, sha, source,
web_url; and with `include`, one facet: `jobs` (id, name, status, stage, allow_failure,
web_url), `downstream_pipelines` (each with project_full_path), `bridge_jobs` (each with the
downstream_pipeline it started, null when you cannot read it) or `failures`: each failed job
(allow_failure ones marked) with GitLab's failure message, the last lines of the log section
where it failed, and its failed test cases with stack traces; `more` says how to read further
(get_job for a whole log). A facet comes in pages: while `page_info.has_next_page` is true, call
again with `after: page_info.end_cursor`. To find why a pipeline failed, read `failures`, then
`bridge_jobs` and each failed downstream pipeline. `wait_seconds` waits for a running pipeline
to finish.
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
        operations=(GET_PIPELINE, GET_PIPELINE_TEST_CASES),
        long_running_when=_waits,
        wait_argument="wait_seconds",
        reference_hint="Or name the pipeline by `project_id` and `pipeline_id`.",
    )
]
