"""The project ``save_pipeline`` acts in: the caller's ``url`` or ``project_id`` resolved to a full
path, and, for a retry or a cancel, the check that the pipeline belongs to that project (one read,
``SavePipelineProject``). Also the ``SavedPipeline`` fragment the lookup and every
``save_pipeline`` mutation read (:mod:`gateway.tools.ci.pipeline_actions`).
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.errors import ToolError, not_found
from gateway.gitlab.errors import GitLabNotFound
from gateway.gitlab.operation import ByPathOrId, GraphQLData, Operation
from gateway.gitlab.urls import (
    global_id,
    is_numeric_id,
    parse_project_url,
    project_address,
    project_full_path,
)
from gateway.tools.ci.pipeline_address import PIPELINE_BY_ID, iid_reader
from gateway.tools.context import ToolContext
from gateway.tools.visibility import anonymous_note

# -- GitLab's answers ---------------------------------------------------------------------------------


class SavedProject(GraphQLData):
    fullPath: str | None = None
    webUrl: str | None = None


class SavedPipeline(GraphQLData):
    """``fragment SavedPipeline on Pipeline``, in each of ``operations/ci/pipeline_create.graphql``,
    ``pipeline_retry.graphql`` and ``pipeline_cancel.graphql``."""

    id: str | None = None
    status: str | None = None
    ref: str | None = None
    path: str | None = None
    project: SavedProject | None = None


class ProjectWithPipeline(SavedProject):
    pipeline: SavedPipeline | None = None


class SavePipelineProjectAnswer(ByPathOrId[ProjectWithPipeline]):
    """``data`` of ``SavePipelineProject``."""


SAVE_PIPELINE_PROJECT = Operation("save_pipeline_project", SavePipelineProjectAnswer, needs=(PIPELINE_BY_ID,))


@dataclass(frozen=True)
class ResolvedProject:
    """A resolved project: its full path and web URL, and the pipeline checked in it (if any)."""

    full_path: str
    web_url: str | None
    pipeline: SavedPipeline | None = None


def _numeric_project(project_id: int | str) -> int | None:
    return int(project_id) if is_numeric_id(project_id) else None


async def lookup_project(
    ctx: ToolContext, named: str, *, full_path: str | None, numeric: int | None, pipeline_id: int | None
) -> ResolvedProject:
    """Read a project (and, with ``pipeline_id``, that pipeline inside it).

    Raises:
        ToolError: ``not_found`` when the project (or the pipeline in it) is missing or hidden.
    """
    variables = project_address(full_path, numeric)
    if pipeline_id is not None:
        variables |= {"pipelineId": global_id("Ci::Pipeline", pipeline_id), "withPipeline": True}
    missing = (
        f"Project '{named}' not found or inaccessible. Check the ID or full path (e.g. group/project)."
        + anonymous_note(ctx.call.caller.credential)
    )

    def no_pipeline() -> ToolError:
        return not_found(
            f"Pipeline {pipeline_id} not found in project '{named}', or inaccessible. Check `pipeline_id`; "
            "pipeline IDs are global, so you may also omit `url`/`project_id`."
        )

    iid_of = iid_reader(
        ctx.gitlab, full_path if full_path is not None else str(numeric), pipeline_id or 0, no_pipeline
    )
    try:
        project = (await SAVE_PIPELINE_PROJECT.run(ctx.gitlab, variables, iid_of=iid_of)).project_node()
    except GitLabNotFound:
        raise not_found(missing) from None
    if project is None or not project.fullPath:
        raise not_found(missing)
    resolved = ResolvedProject(project.fullPath, project.webUrl, project.pipeline)
    if pipeline_id is not None and not resolved.pipeline:
        raise no_pipeline()
    return resolved


async def resolve_project(
    ctx: ToolContext, url: str | None, project_id: str | None, *, pipeline_id: int | None
) -> ResolvedProject | None:
    """The project the caller named, or None when it named none (retry/cancel only).

    A full path needs no request to create (``pipelineCreate`` takes it as is); a numeric ID is
    looked up, as is any project named together with a pipeline to retry or cancel.
    """
    numeric: int | None = None
    full_path: str | None = None
    if url is not None:
        full_path = parse_project_url(ctx.gitlab.base, url)
    elif project_id is not None:
        numeric = _numeric_project(project_id)
        if numeric is None:
            full_path = project_full_path(str(project_id))
    else:
        return None
    if full_path is not None and pipeline_id is None:
        return ResolvedProject(full_path, None)
    named = full_path if full_path is not None else str(numeric)
    return await lookup_project(ctx, named, full_path=full_path, numeric=numeric, pipeline_id=pipeline_id)
