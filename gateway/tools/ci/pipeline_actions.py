r"""What ``save_pipeline`` sends: ``pipelineCreate``, ``pipelineRetry`` and ``pipelineCancel``
(declared :class:`~gateway.gitlab.operation.Operation`\ s whose payloads share the ``SavedPipeline``
fragment, :mod:`gateway.tools.ci.pipeline_project`), and the result. The project they act in is
resolved by :mod:`gateway.tools.ci.pipeline_project`.

A create and a retry are sent at most once: the client retries a mutation only when it provably
never reached GitLab (connect error, 429); after any other failure, or an answer that cannot be
read, the caller is told the outcome is unknown and exactly how to check. Cancelling is
idempotent (a cancelled pipeline stays cancelled), so a cancel whose outcome is unknown is sent
once more.
"""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import quote

from pydantic import Field

from gateway.errors import ToolError, bad_request, not_found
from gateway.gitlab.errors import GitLabBadRequest, GitLabMaybeSent, GitLabNotFound, GitLabUnsupported
from gateway.gitlab.needs import Need
from gateway.gitlab.operation import GraphQLData, Operation
from gateway.gitlab.urls import encode_project, global_id, global_id_number_or_none
from gateway.tools.ci.pipeline_project import ResolvedProject, SavedPipeline, SavedProject, lookup_project
from gateway.tools.context import ToolContext
from gateway.tools.registry import ToolOutput
from gateway.tools.visibility import ANONYMOUS_READS, is_anonymous

# -- GitLab's answers ---------------------------------------------------------------------------------


class PipelinePayload(GraphQLData):
    """``PipelineCreatePayload``, ``PipelineRetryPayload``, ``PipelineCancelPayload``."""

    pipeline: SavedPipeline | None = None
    errors: list[Any] | None = None

    def error_texts(self) -> list[str]:
        return [str(e) for e in self.errors or []]


class PipelineCreateAnswer(GraphQLData):
    pipelineCreate: PipelinePayload | None = None


class PipelineRetryAnswer(GraphQLData):
    pipelineRetry: PipelinePayload | None = None


class PipelineCancelAnswer(GraphQLData):
    pipelineCancel: PipelinePayload | None = None


#: Before GitLab 17.8 there is no ``pipelineCreate``: the tool creates with REST (:func:`create`).
PIPELINE_CREATE = Operation(
    "pipeline_create",
    PipelineCreateAnswer,
    mutation=True,
    needs=(
        Need(
            "Mutation.pipelineCreate",
            since=(17, 8),
            without="elsewhere",
            note="created with REST `POST /projects/:id/pipeline`",
            differs=False,
        ),
        Need("PipelineCreateInput.inputs", since=(17, 10), option="inputs", note="`inputs` is refused"),
    ),
)
PIPELINE_RETRY = Operation("pipeline_retry", PipelineRetryAnswer, mutation=True)
#: Before GitLab 18.6 ``pipelineCancel`` answers without the pipeline: it is read back.
PIPELINE_CANCEL = Operation(
    "pipeline_cancel",
    PipelineCancelAnswer,
    mutation=True,
    needs=(
        Need(
            "PipelineCancelPayload.pipeline",
            since=(18, 6),
            without="drop",
            note="a cancel without `project_id` or `url` answers `status`, `ref` and `web_url` null "
            "(with them, the pipeline is read back)",
        ),
    ),
)

Action = Literal["create", "retry", "cancel"]


class SavePipelineOutput(ToolOutput):
    """The pipeline that was created, retried or canceled, as GitLab returned it."""

    action: Literal["create", "retry", "cancel"] = Field(
        description="What was done: create, retry or cancel."
    )
    id: int = Field(description="The pipeline ID (the same ID REST and the web UI use).")
    status: str | None = Field(
        description="Pipeline status after the action, lowercase (created, pending, running, canceling, "
        "canceled, ...); null when GitLab did not return the pipeline."
    )
    ref: str | None = Field(description="Branch or tag the pipeline runs on; null when GitLab did not say.")
    web_url: str | None = Field(description="The pipeline's page; null when the project is unknown.")


# -- results ------------------------------------------------------------------------------------------


def _result(
    ctx: ToolContext,
    action: Action,
    pipeline: SavedPipeline | None,
    *,
    pipeline_id: int | None,
    project: ResolvedProject | None,
) -> SavePipelineOutput:
    """``{action, id, status, ref, web_url}`` from a mutation's ``pipeline`` (or what is known)."""
    pipeline = pipeline or SavedPipeline()
    pid = global_id_number_or_none(pipeline.id) or pipeline_id
    if pid is None:
        raise ToolError("upstream_error", "GitLab returned a pipeline without a usable ID.")
    status = pipeline.status
    gl_project = pipeline.project or SavedProject()
    project_web = gl_project.webUrl or (project.web_url if project else None)
    if not project_web and project is not None:
        project_web = ctx.gitlab.web_url("/" + project.full_path)
    web_url: str | None = f"{project_web.rstrip('/')}/-/pipelines/{pid}" if project_web else None
    if web_url is None and pipeline.path:
        web_url = ctx.gitlab.web_url(pipeline.path)
    return SavePipelineOutput(
        action=action,
        id=pid,
        status=status.lower() if status is not None else None,
        ref=pipeline.ref,
        web_url=web_url,
    )


def _pipelines_page(ctx: ToolContext, full_path: str, ref: str) -> str:
    return ctx.gitlab.web_url("/" + full_path) + f"/-/pipelines?ref={quote(ref, safe='')}"


def _create_unknown(
    ctx: ToolContext, full_path: str, ref: str, what: str, request_id: str | None
) -> ToolError:
    """The error for a create whose outcome is unknown: it says so and how to check."""
    api = (
        f"GET /api/v4/projects/{quote(full_path, safe='')}/pipelines"
        f"?ref={quote(ref, safe='')}&order_by=id&sort=desc"
    )
    return ToolError(
        "upstream_error",
        f"{what}, so the gateway did not send it again: a pipeline for ref '{ref}' in project '{full_path}' "
        "may or may not have been created. Check before calling save_pipeline again: open "
        f"{_pipelines_page(ctx, full_path, ref)} (or call REST {api}) and look for a pipeline created in the "
        f"last few minutes; with its ID, get_pipeline (project_id='{full_path}', pipeline_id=<ID>) shows its "
        "status. "
        "Only if there is none, create it again.",
        outcome="unknown",
        **({"request_id": request_id} if request_id else {}),
    )


def _not_created(full_path: str, ref: str, errors: list[str]) -> ToolError:
    """GitLab's reasons in its words, and for a ref it does not know, what to do next."""
    message = f"GitLab did not create the pipeline: {'; '.join(errors)}"
    if any(e.strip().lower().rstrip(".") == "reference not found" for e in errors):
        return bad_request(
            f"{message}. `ref` {ref!r} is no branch or tag of {full_path}: refs are case-sensitive, and a "
            "pipeline runs on a branch or tag name (not a commit SHA or a merge request). Check the name "
            f"(list_pipelines with project_id '{full_path}' shows the refs its recent pipelines ran on), "
            "then call save_pipeline again with it.",
            gitlab_errors=errors,
            invalid_arguments=["ref"],
        )
    return bad_request(message, gitlab_errors=errors)


def _retry_unknown(
    pipeline_id: int, project: ResolvedProject | None, what: str, request_id: str | None
) -> ToolError:
    where = f"project_id='{project.full_path}', " if project else ""
    return ToolError(
        "upstream_error",
        f"{what}, so the gateway did not send it again: retrying runs the pipeline's failed and canceled "
        f"jobs anew, and sending it twice could run them twice. The retry of pipeline {pipeline_id} may or "
        "may not "
        f"have been applied. Check before calling save_pipeline again: get_pipeline ({where}"
        f"pipeline_id={pipeline_id}, include=['jobs']) shows whether its failed jobs have new pending or "
        "running runs (status running or pending means the retry was applied).",
        outcome="unknown",
        **({"request_id": request_id} if request_id else {}),
    )


async def create(
    ctx: ToolContext, project: ResolvedProject, ref: str, pipeline_input: dict[str, Any]
) -> SavePipelineOutput:
    """Send ``pipelineCreate`` once (REST's create on a GitLab without it); ``pipeline_input`` is
    the rest of ``PipelineCreateInput``."""
    if pipeline_input.get("inputs"):
        await PIPELINE_CREATE.check_option(ctx.gitlab, "inputs")
    if await PIPELINE_CREATE.available(ctx.gitlab) is not None:
        return await create_with_rest(ctx, project, ref, pipeline_input.get("variables") or [])
    variables = {"input": {"projectPath": project.full_path, "ref": ref, **pipeline_input}}
    try:
        payload = (await PIPELINE_CREATE.run(ctx.gitlab, variables)).pipelineCreate
    except GitLabUnsupported:
        # GitLab refused the document as invalid (so nothing ran) and turned out to be older
        # than pipelineCreate: create with REST, as on any GitLab known to be that old.
        if await PIPELINE_CREATE.available(ctx.gitlab) is None:
            raise
        return await create_with_rest(ctx, project, ref, pipeline_input.get("variables") or [])
    except GitLabMaybeSent as err:
        raise _create_unknown(
            ctx,
            project.full_path,
            ref,
            "GitLab did not confirm the pipeline creation (the request failed "
            "after it may have reached GitLab)",
            err.request_id,
        ) from None
    except GitLabNotFound:
        raise _no_project_to_run(ctx, project) from None
    if payload is None:
        raise _create_unknown(
            ctx,
            project.full_path,
            ref,
            "GitLab answered pipelineCreate without a payload",
            ctx.call.request_id,
        )
    pipeline, errors = payload.pipeline, payload.error_texts()
    if errors:
        raise _not_created(project.full_path, ref, errors)
    if pipeline is None:
        raise _create_unknown(
            ctx,
            project.full_path,
            ref,
            "GitLab answered pipelineCreate with neither a pipeline nor an error",
            ctx.call.request_id,
        )
    return _result(ctx, "create", pipeline, pipeline_id=None, project=project)


def _no_project_to_run(ctx: ToolContext, project: ResolvedProject) -> ToolError:
    if is_anonymous(ctx.call.caller.credential):
        return not_found(
            f"Project '{project.full_path}' not found, or GitLab does not let a caller without a token "
            f"run pipelines in it. {ANONYMOUS_READS}"
        )
    return not_found(
        f"Project '{project.full_path}' not found, or this token may not run pipelines in it "
        "(GitLab does not say which). Check the project and the token's access (Developer role or "
        "higher)."
    )


class RestPipeline(GraphQLData):
    """REST's pipeline (https://docs.gitlab.com/api/pipelines/#create-a-new-pipeline)."""

    id: int | None = None
    status: str | None = None
    ref: str | None = None
    web_url: str | None = None


async def create_with_rest(
    ctx: ToolContext, project: ResolvedProject, ref: str, variables: list[dict[str, str]]
) -> SavePipelineOutput:
    """Create with REST ``POST /projects/:id/pipeline`` (GitLab before 17.8): sent once, as the
    mutation is (the client resends it only when it provably never reached GitLab), and the same
    result and errors."""
    body: dict[str, Any] = {"ref": ref}
    if variables:
        body["variables"] = [
            {"key": v["key"], "value": v["value"], "variable_type": v["variableType"].lower()}
            for v in variables
        ]
    try:
        answer = await ctx.gitlab.rest(
            "POST",
            "/projects/{id}/pipeline",
            path_params={"id": encode_project(project.full_path)},
            json=body,
        )
    except GitLabMaybeSent as err:
        raise _create_unknown(
            ctx,
            project.full_path,
            ref,
            "GitLab did not confirm the pipeline creation (the request failed after it may have "
            "reached GitLab)",
            err.request_id,
        ) from None
    except GitLabNotFound:
        raise _no_project_to_run(ctx, project) from None
    except GitLabBadRequest as err:
        # "GitLab rejected the request (400): base Reference not found." → GitLab's own reason.
        said = err.message.partition("): ")[2].rstrip(".").removeprefix("base ") or err.message
        raise _not_created(project.full_path, ref, [said]) from None
    pipeline = RestPipeline.model_validate(answer) if isinstance(answer, dict) else RestPipeline()
    if pipeline.id is None:
        raise _create_unknown(
            ctx, project.full_path, ref, "GitLab answered the create without a pipeline", ctx.call.request_id
        )
    return SavePipelineOutput(
        action="create",
        id=pipeline.id,
        status=pipeline.status.lower() if pipeline.status else None,
        ref=pipeline.ref,
        web_url=pipeline.web_url or ctx.gitlab.web_url(f"/{project.full_path}/-/pipelines/{pipeline.id}"),
    )


def _hidden_pipeline(ctx: ToolContext, pipeline_id: int, verb: str) -> ToolError:
    check = "Check `pipeline_id` (the ID shown in the pipeline's URL, not its IID)."
    if is_anonymous(ctx.call.caller.credential):
        return not_found(
            f"Pipeline {pipeline_id} not found, or GitLab does not let a caller without a token {verb} it. "
            f"{check} {ANONYMOUS_READS}"
        )
    return not_found(
        f"Pipeline {pipeline_id} not found, or this token may not {verb} it (GitLab does not say which). "
        + check
    )


async def retry(ctx: ToolContext, pipeline_id: int, project: ResolvedProject | None) -> SavePipelineOutput:
    """Send ``pipelineRetry`` once."""
    variables = {"id": global_id("Ci::Pipeline", pipeline_id)}
    try:
        payload = (await PIPELINE_RETRY.run(ctx.gitlab, variables)).pipelineRetry
    except GitLabMaybeSent as err:
        raise _retry_unknown(
            pipeline_id,
            project,
            "GitLab did not confirm the retry (the request failed after it may have reached GitLab)",
            err.request_id,
        ) from None
    except GitLabNotFound:
        raise _hidden_pipeline(ctx, pipeline_id, "retry") from None
    if payload is None:
        raise _retry_unknown(
            pipeline_id, project, "GitLab answered pipelineRetry without a payload", ctx.call.request_id
        )
    pipeline, errors = payload.pipeline, payload.error_texts()
    if errors:
        raise bad_request(
            f"GitLab did not retry pipeline {pipeline_id}: {'; '.join(errors)}", gitlab_errors=errors
        )
    return _result(ctx, "retry", pipeline, pipeline_id=pipeline_id, project=project)


async def cancel(ctx: ToolContext, pipeline_id: int, project: ResolvedProject | None) -> SavePipelineOutput:
    """Send ``pipelineCancel``; once more when the first attempt's outcome is unknown."""
    variables = {"id": global_id("Ci::Pipeline", pipeline_id)}
    resent = False
    try:
        try:
            answer = await PIPELINE_CANCEL.run(ctx.gitlab, variables)
        except GitLabMaybeSent:
            # Cancelling twice changes nothing more than cancelling once, so unlike create and
            # retry it is safe to send again; this attempt may itself be retried like a read.
            resent = True
            answer = await PIPELINE_CANCEL.run(ctx.gitlab, variables, mutation=False)
    except GitLabNotFound:
        raise _hidden_pipeline(ctx, pipeline_id, "cancel") from None
    if answer.pipelineCancel is None:
        raise ToolError(
            "upstream_error", "GitLab answered pipelineCancel without a payload; try again later."
        )
    pipeline, errors = answer.pipelineCancel.pipeline, answer.pipelineCancel.error_texts()
    if errors:
        words = "; ".join(errors)
        if resent:
            where = f"project_id='{project.full_path}', " if project else ""
            raise bad_request(
                f"GitLab did not confirm the first cancel request for pipeline {pipeline_id}, so the "
                f"gateway sent it again, and GitLab answered: {words}. If the first request was applied "
                "the pipeline is already canceling or canceled: check with get_pipeline "
                f"({where}pipeline_id={pipeline_id}).",
                gitlab_errors=errors,
            )
        raise bad_request(f"GitLab did not cancel pipeline {pipeline_id}: {words}", gitlab_errors=errors)
    if pipeline is None and project is not None:
        # Some GitLab versions answer pipelineCancel without the pipeline; read it back.
        reread = await lookup_project(
            ctx, project.full_path, full_path=project.full_path, numeric=None, pipeline_id=pipeline_id
        )
        pipeline = reread.pipeline
    return _result(ctx, "cancel", pipeline, pipeline_id=pipeline_id, project=project)
