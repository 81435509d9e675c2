"""``list_pipelines``: one page of a project's CI/CD pipelines, newest first, as GitLab's built-in MCP
server offers it: filter by ``ref``, ``status`` and ``source``, page with ``first``/``after``.

One GraphQL request per call (``operations/ci/list_pipelines.graphql``, ``Project.pipelines``).
Each pipeline has ``get_pipeline``'s fields plus ``created_at``; pass its ``id`` to
``get_pipeline`` as ``pipeline_id`` for its jobs.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationInfo, field_validator
from pydantic.json_schema import SkipJsonSchema

from gateway.errors import not_found
from gateway.gitlab.operation import ByPathOrId, GlobalIdNumber, GraphQLData, Operation
from gateway.gitlab.urls import is_numeric_id, project_address, project_full_path
from gateway.tools.arguments import PROJECT_ALIASES, ProjectId, schema_extra, shown
from gateway.tools.ci.pipeline_read import PipelineBase, Status, status_argument
from gateway.tools.context import ToolContext
from gateway.tools.pagination import (
    PAGING,
    Cursor,
    PageInfo,
    PageInfoAnswer,
    PageSize,
    after_field,
    first_field,
    page_info,
)
from gateway.tools.ref_hints import check_ref
from gateway.tools.registry import READ_ONLY, Tool, ToolInput, ToolOutput
from gateway.tools.visibility import project_not_found_message

#: The longest ``ref`` and ``source`` filters taken.
_LENGTHS = {"ref": 1024, "source": 64}


class ListPipelinesInput(ToolInput):
    """The project, optional filters, and the page."""

    argument_aliases = PROJECT_ALIASES

    project_id: ProjectId
    ref: str | SkipJsonSchema[None] = Field(
        None,
        description="Only pipelines for this branch or tag, e.g. `main`.",
        json_schema_extra=schema_extra(minLength=1, maxLength=_LENGTHS["ref"]),
    )
    status: Status | SkipJsonSchema[None] = Field(
        None, description="Only pipelines with this status, e.g. `failed`.", json_schema_extra=schema_extra()
    )
    source: str | SkipJsonSchema[None] = Field(
        None,
        description="Only pipelines started this way, e.g. `push`, `schedule`, `merge_request_event`, `web`.",
        json_schema_extra=schema_extra(minLength=1, maxLength=_LENGTHS["source"]),
    )
    first: PageSize = first_field("the pipelines")
    after: Cursor = after_field("the pipelines")

    @field_validator("status", mode="before")
    @classmethod
    def _known_status(cls, value: Any) -> Any:
        return status_argument(value, "pipeline status")

    @field_validator("ref", "source", mode="before")
    @classmethod
    def _filter_text(cls, value: Any, info: ValidationInfo) -> Any:
        # Checked here, not with Field(min_length=...): on a type that also admits null, pydantic
        # checks the lengths as "items" ("at least 1 item after validation" for "") and fails on a
        # null with a TypeError (null reaches here only when the model is used directly: tool
        # calls drop a null optional argument first, in registry.parse_arguments).
        limit = _LENGTHS[str(info.field_name)]
        if value is not None and (not isinstance(value, str) or not 1 <= len(value) <= limit):
            raise ValueError(f"must be a non-empty string of at most {limit} characters, not {shown(value)}")
        return value


class ListedPipeline(PipelineBase):
    """One pipeline of the page."""

    created_at: str = Field(description="When GitLab created it (ISO 8601).")


class ListPipelinesOutput(ToolOutput):
    """One page of pipelines, newest first."""

    pipelines: list[ListedPipeline]
    page_info: PageInfo
    nearest_refs: list[str] | None = Field(
        None,
        description="With an empty first page for a `ref` that is no branch or tag: the project's "
        "nearest branch and tag names.",
    )
    system_instruction: str | None = Field(None, description="What to do next, for the model.")


# -- GitLab's answer --------------------------------------------------------------------------


class PipelineNode(GraphQLData):
    id: GlobalIdNumber
    status: str
    ref: str | None = None
    sha: str | None = None
    source: str | None = None
    path: str | None = None
    createdAt: str


class Pipelines(GraphQLData):
    pageInfo: PageInfoAnswer | None = None
    nodes: list[PipelineNode | None] | None = None


class ProjectNode(GraphQLData):
    pipelines: Pipelines | None = None


class ListPipelinesAnswer(ByPathOrId[ProjectNode]):
    """``data`` of ``listPipelines``."""


LIST_PIPELINES = Operation("list_pipelines", ListPipelinesAnswer)


async def list_pipelines(ctx: ToolContext, args: ListPipelinesInput) -> ListPipelinesOutput:
    """One page of the project's pipelines.

    Raises:
        ToolError: ``not_found`` for a missing or unreadable project.
        GitLabError: what the GitLab client raises.
    """
    by_id = is_numeric_id(args.project_id)
    address = project_address(
        None if by_id else project_full_path(args.project_id), int(args.project_id) if by_id else None
    )
    variables = {
        **address,
        "ref": args.ref,
        "status": args.status.upper() if args.status else None,
        "source": args.source,
        "first": args.first,
        "after": args.after,
    }
    answer = await LIST_PIPELINES.run(ctx.gitlab, variables)
    project = answer.project_node()
    if project is None:
        raise not_found(project_not_found_message(args.project_id, ctx.call.caller.credential))
    pipelines = project.pipelines or Pipelines()
    out = ListPipelinesOutput(
        pipelines=[
            ListedPipeline(
                id=p.id,
                status=p.status.lower(),
                ref=p.ref,
                sha=p.sha,
                source=p.source,
                web_url=ctx.gitlab.web_url(p.path) if p.path else None,
                created_at=p.createdAt,
            )
            for p in pipelines.nodes or []
            if p is not None
        ],
        page_info=page_info(pipelines.pageInfo),
    )
    if args.ref is not None and args.after is None and not out.pipelines:
        # An empty first page for a ref: a misspelt ref looks the same as a quiet branch.
        check = await check_ref(ctx, args.project_id, args.ref)
        if check.exists is False:
            out.nearest_refs = list(check.nearest)
            out.system_instruction = (
                f"No pipelines: {check.hint(args.ref)} Call again with the right `ref`, or without "
                "`ref` for every branch's pipelines."
            )
    return out


TOOLS: list[Tool] = [
    Tool(
        name="list_pipelines",
        title="List pipelines",
        description=(
            "List a project's CI/CD pipelines, newest first: id, status, ref, sha, source, web_url and "
            "created_at. Narrow them with `ref` (branch or tag; an unknown one is told with the "
            "nearest names), `status` (e.g. `failed`) and `source` (e.g. `schedule`). The newest "
            "pipeline of a ref is the first with `ref` and `first: 1`. To see why one failed, pass its id "
            f'to get_pipeline as `pipeline_id` with include: ["failures"]. {PAGING}'
        ),
        input_model=ListPipelinesInput,
        output_model=ListPipelinesOutput,
        handler=list_pipelines,
        annotations=READ_ONLY,
        toolset="ci",
        operations=(LIST_PIPELINES,),
    )
]
