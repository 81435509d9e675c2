"""``save_pipeline``: run a new CI/CD pipeline, or retry or cancel an existing one.

``save_`` here folds two lifecycle actions into one tool, as GitLab's own tool does and its MCP
guidelines allow as a documented exception (``docs/tools/save_pipeline.md``):

- no ``pipeline_id`` → create (``Mutation.pipelineCreate``; needs ``ref`` and the project);
- ``pipeline_id`` + ``action: retry`` → ``Mutation.pipelineRetry``;
- ``pipeline_id`` + ``action: cancel`` → ``Mutation.pipelineCancel``.

Inputs, outputs and errors follow GitLab's mutations (https://docs.gitlab.com/api/graphql/reference/#mutationpipelinecreate).
Choices where GitLab's tool is silent:

- ``update`` (GitLab's rename, which has no GraphQL mutation) is not offered: GitLab's tool scopes the
  tool to create, retry and cancel. Asking for it gets a message that says so.
- Pipeline global IDs are global, so retry and cancel need no project. When the caller names one
  anyway (``url`` / ``project_id``), the gateway first checks the pipeline belongs to it (one
  read) and refuses otherwise, so a mistyped ``pipeline_id`` never acts on another project.

Safety: a create and a retry are sent at most once.
The client retries a mutation only when it provably never reached GitLab (connect error, 429);
after any other failure the caller is told the outcome is unknown and exactly how to check.
Cancelling is idempotent (a cancelled pipeline stays cancelled), so a cancel whose outcome is
unknown is sent once more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

from pydantic import Field, field_validator

from gateway.errors import ToolError, bad_request, not_found
from gateway.gitlab.errors import GitLabMaybeSent, GitLabNotFound
from gateway.gitlab.urls import (
    global_id,
    global_id_number_or_none,
    is_numeric_id,
    parse_project_url,
    project_address,
    project_full_path,
    project_node,
)
from gateway.tools.arguments import OptionalPositiveId, OptionalProjectId
from gateway.tools.context import ToolContext
from gateway.tools.registry import Annotations, Tool, ToolInput, ToolOutput, ToolResult

#: Not read-only, destructive (a cancel stops running jobs; a retry re-runs jobs, deploys too),
#: not idempotent (each create is a new pipeline). MCP https://modelcontextprotocol.io/specification/2025-11-25/server/tools#tool-annotations.
SAVE_PIPELINE_ANNOTATIONS = Annotations(read_only=False, destructive=True, idempotent=False, open_world=True)


class PipelineVariable(ToolInput):
    """One CI/CD variable for the new pipeline (GitLab ``CiVariableInput``)."""

    key: str = Field(min_length=1, description="Variable name, e.g. DEPLOY_ENV.")
    value: str = Field(description="Variable value (a string).")
    variable_type: Literal["env_var", "file"] = Field(
        "env_var",
        description="env_var (default): an environment variable; file: the value is written to a "
        "temporary file whose path is the variable.",
    )


class SavePipelineInput(ToolInput):
    """Create a pipeline (url or project_id, and ref), or retry or cancel one (pipeline_id and action)."""

    url: str | None = Field(
        None,
        description="Project URL on this GitLab, e.g. https://gitlab.example.com/group/project (create; "
        "give url or project_id, not both).",
    )
    project_id: OptionalProjectId = Field(
        None,
        description="Project ID or full path, e.g. 42 or group/project (create; give url or project_id).",
    )
    pipeline_id: OptionalPositiveId = Field(
        None,
        description="ID of an existing pipeline to retry or cancel (with action). Omit it to create one.",
    )
    action: Literal["retry", "cancel"] | None = Field(
        None,
        description="retry (re-run failed and canceled jobs) or cancel (stop running jobs); requires "
        "pipeline_id. Omit it to create a pipeline.",
    )
    ref: str | None = Field(
        None, description="Branch or tag to run the new pipeline on, e.g. main. Required to create."
    )
    variables: list[PipelineVariable] | None = Field(
        None, description="CI/CD variables for the new pipeline (create only)."
    )
    inputs: dict[str, Any] | None = Field(
        None,
        description='CI/CD inputs for the new pipeline, name → value, e.g. {"environment": "staging"} '
        "(create only; the pipeline configuration must declare them in spec:inputs).",
    )

    @field_validator("action", mode="before")
    @classmethod
    def _explain_update(cls, value: Any) -> Any:
        if value == "update":
            raise ValueError(
                'save_pipeline does not rename pipelines ("update"): it creates, retries and cancels. '
                "Rename a pipeline in GitLab's UI or with REST "
                "PUT /projects/:id/pipelines/:pipeline_id/metadata"
            )
        return value


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


# -- preconditions (checked before any request) ---------------------------------------------------


def check_preconditions(args: SavePipelineInput) -> None:
    """Refuse argument combinations that cannot mean one thing, before anything is sent.

    Raises:
        ToolError: ``bad_request``, one message per rule.
    """
    if args.url is not None and args.project_id is not None:
        raise bad_request(
            "Provide exactly one of `url` or `project_id`, not both: they both name the project."
        )
    if args.action is not None and args.pipeline_id is None:
        raise bad_request(
            f'action "{args.action}" needs `pipeline_id`: the ID of the pipeline to {args.action}. '
            "To create a new pipeline, omit `action` and pass `ref` with `project_id` or `url`."
        )
    if args.pipeline_id is not None and args.action is None:
        raise bad_request(
            'Provide action: "retry" or "cancel" when `pipeline_id` is set. To create a new pipeline, omit '
            "`pipeline_id` and pass `ref` with `project_id` or `url`."
        )
    if args.pipeline_id is not None:
        extra = [name for name in ("variables", "inputs", "ref") if getattr(args, name) is not None]
        if extra:
            names = " and ".join(f"`{n}`" for n in extra)
            verb = "applies" if len(extra) == 1 else "apply"
            raise bad_request(
                f"{names} only {verb} when creating a pipeline; {args.action} reuses the pipeline's own ref, "
                f"variables and inputs. Remove {names}, or omit `pipeline_id` and `action` to create a new "
                "pipeline."
            )
        return
    if args.ref is None or not args.ref.strip():
        raise bad_request(
            '`ref` is required to create a pipeline: the branch or tag to run it on, e.g. "main".'
        )
    if args.url is None and args.project_id is None:
        raise bad_request(
            "Creating a pipeline needs its project: pass `project_id` (ID or full path, e.g. group/project) "
            "or `url` (the project's URL)."
        )
    if args.variables:
        seen: set[str] = set()
        for variable in args.variables:
            if variable.key in seen:
                raise bad_request(
                    f"Variable `{variable.key}` is given twice in `variables`; give each key once."
                )
            seen.add(variable.key)


# -- project identification ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Project:
    """A resolved project: its full path and web URL, and the pipeline checked in it (if any)."""

    full_path: str
    web_url: str | None
    pipeline: dict[str, Any] | None = None


def _numeric_project(project_id: int | str) -> int | None:
    return int(project_id) if is_numeric_id(project_id) else None


async def _lookup_project(
    ctx: ToolContext, named: str, *, full_path: str | None, numeric: int | None, pipeline_id: int | None
) -> _Project:
    """Read a project (and, with ``pipeline_id``, that pipeline inside it).

    Raises:
        ToolError: ``not_found`` when the project (or the pipeline in it) is missing or hidden.
    """
    variables = project_address(full_path, numeric)
    if pipeline_id is not None:
        variables |= {"pipelineId": global_id("Ci::Pipeline", pipeline_id), "withPipeline": True}
    missing = f"Project '{named}' not found or inaccessible. Check the ID or full path (e.g. group/project)."
    try:
        data = await ctx.gitlab.graphql("save_pipeline_project", variables)
    except GitLabNotFound:
        raise not_found(missing) from None
    project = project_node(data, by_id=numeric is not None)
    if project is None or not project.get("fullPath"):
        raise not_found(missing)
    resolved = _Project(project["fullPath"], project.get("webUrl"), project.get("pipeline"))
    if pipeline_id is not None and not resolved.pipeline:
        raise not_found(
            f"Pipeline {pipeline_id} not found in project '{named}', or inaccessible. Check `pipeline_id`; "
            "pipeline IDs are global, so you may also omit `url`/`project_id`."
        )
    return resolved


async def _resolve_project(
    ctx: ToolContext, args: SavePipelineInput, *, pipeline_id: int | None
) -> _Project | None:
    """The project the caller named, or None when it named none (retry/cancel only).

    A full path needs no request to create (``pipelineCreate`` takes it as is); a numeric ID is
    looked up, as is any project named together with a pipeline to retry or cancel.
    """
    numeric: int | None = None
    full_path: str | None = None
    if args.url is not None:
        full_path = parse_project_url(ctx.gitlab.base, args.url)
    elif args.project_id is not None:
        numeric = _numeric_project(args.project_id)
        if numeric is None:
            full_path = project_full_path(str(args.project_id))
    else:
        return None
    if full_path is not None and pipeline_id is None:
        return _Project(full_path, None)
    named = full_path if full_path is not None else str(numeric)
    return await _lookup_project(ctx, named, full_path=full_path, numeric=numeric, pipeline_id=pipeline_id)


# -- results ------------------------------------------------------------------------------------------


Action = Literal["create", "retry", "cancel"]


def _result(
    ctx: ToolContext,
    action: Action,
    pipeline: dict[str, Any] | None,
    *,
    pipeline_id: int | None,
    project: _Project | None,
) -> ToolResult:
    """``{action, id, status, ref, web_url}`` from a mutation's ``pipeline`` (or what is known)."""
    pipeline = pipeline or {}
    pid = global_id_number_or_none(pipeline.get("id")) or pipeline_id
    if pid is None:
        raise ToolError("upstream_error", "GitLab returned a pipeline without a usable ID.")
    status = pipeline.get("status")
    gl_project = pipeline.get("project") or {}
    project_web = gl_project.get("webUrl") or (project.web_url if project else None)
    if not project_web and project is not None:
        project_web = ctx.gitlab.web_url("/" + project.full_path)
    web_url: str | None = f"{project_web.rstrip('/')}/-/pipelines/{pid}" if project_web else None
    if web_url is None and pipeline.get("path"):
        web_url = ctx.gitlab.web_url(pipeline["path"])
    out = SavePipelineOutput(
        action=action,
        id=pid,
        status=status.lower() if isinstance(status, str) else None,
        ref=pipeline.get("ref"),
        web_url=web_url,
    )
    return ToolResult(structured=out.model_dump(mode="json"))


def _payload(data: dict[str, Any], field: str) -> tuple[dict[str, Any] | None, list[str]]:
    payload = data.get(field)
    if not isinstance(payload, dict):
        raise ToolError("upstream_error", f"GitLab answered {field} without a payload; try again later.")
    errors = [str(e) for e in payload.get("errors") or []]
    pipeline = payload.get("pipeline")
    return (pipeline if isinstance(pipeline, dict) else None), errors


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
        f"last few minutes; with its ID, get_pipeline (id='{full_path}', pipeline_id=<ID>) shows its status. "
        "Only if there is none, create it again.",
        outcome="unknown",
        **({"request_id": request_id} if request_id else {}),
    )


def _retry_unknown(
    pipeline_id: int, project: _Project | None, what: str, request_id: str | None
) -> ToolError:
    where = f"id='{project.full_path}', " if project else ""
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


# -- the tool ------------------------------------------------------------------------------------------


async def save_pipeline(ctx: ToolContext, args: SavePipelineInput) -> ToolResult:
    """Create a pipeline, or retry or cancel one.

    Returns:
        ``{action, id, status, ref, web_url}``.

    Raises:
        ToolError: ``bad_request`` for a precondition or GitLab's payload ``errors`` (its words);
            ``not_found`` for a missing or hidden project or pipeline; ``upstream_error`` with
            ``outcome: unknown`` when a create or retry may or may not have been applied.
        GitLabError: other GitLab failures (mapped once by the registry).
    """
    check_preconditions(args)
    if args.pipeline_id is None:
        return await _create(ctx, args)
    project = await _resolve_project(ctx, args, pipeline_id=args.pipeline_id)
    if args.action == "retry":
        return await _retry(ctx, args.pipeline_id, project)
    return await _cancel(ctx, args.pipeline_id, project)


async def _create(ctx: ToolContext, args: SavePipelineInput) -> ToolResult:
    assert args.ref is not None
    ref = args.ref.strip()
    project = await _resolve_project(ctx, args, pipeline_id=None)
    assert project is not None
    pipeline_input: dict[str, Any] = {"projectPath": project.full_path, "ref": ref}
    if args.variables:
        pipeline_input["variables"] = [
            {"key": v.key, "value": v.value, "variableType": v.variable_type.upper()} for v in args.variables
        ]
    if args.inputs:
        pipeline_input["inputs"] = [{"name": name, "value": value} for name, value in args.inputs.items()]
    try:
        data = await ctx.gitlab.graphql("pipeline_create", {"input": pipeline_input}, mutation=True)
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
        raise not_found(
            f"Project '{project.full_path}' not found, or this token may not run pipelines in it "
            "(GitLab does not say which). Check the project and the token's access (Developer role or "
            "higher)."
        ) from None
    if not isinstance(data.get("pipelineCreate"), dict):
        raise _create_unknown(
            ctx,
            project.full_path,
            ref,
            "GitLab answered pipelineCreate without a payload",
            ctx.call.request_id,
        )
    pipeline, errors = _payload(data, "pipelineCreate")
    if errors:
        raise bad_request(f"GitLab did not create the pipeline: {'; '.join(errors)}", gitlab_errors=errors)
    if pipeline is None:
        raise _create_unknown(
            ctx,
            project.full_path,
            ref,
            "GitLab answered pipelineCreate with neither a pipeline nor an error",
            ctx.call.request_id,
        )
    return _result(ctx, "create", pipeline, pipeline_id=None, project=project)


def _hidden_pipeline(pipeline_id: int, verb: str) -> ToolError:
    return not_found(
        f"Pipeline {pipeline_id} not found, or this token may not {verb} it (GitLab does not say which). "
        "Check `pipeline_id` (the ID shown in the pipeline's URL, not its IID)."
    )


async def _retry(ctx: ToolContext, pipeline_id: int, project: _Project | None) -> ToolResult:
    variables = {"id": global_id("Ci::Pipeline", pipeline_id)}
    try:
        data = await ctx.gitlab.graphql("pipeline_retry", variables, mutation=True)
    except GitLabMaybeSent as err:
        raise _retry_unknown(
            pipeline_id,
            project,
            "GitLab did not confirm the retry (the request failed after it may have reached GitLab)",
            err.request_id,
        ) from None
    except GitLabNotFound:
        raise _hidden_pipeline(pipeline_id, "retry") from None
    if not isinstance(data.get("pipelineRetry"), dict):
        raise _retry_unknown(
            pipeline_id, project, "GitLab answered pipelineRetry without a payload", ctx.call.request_id
        )
    pipeline, errors = _payload(data, "pipelineRetry")
    if errors:
        raise bad_request(
            f"GitLab did not retry pipeline {pipeline_id}: {'; '.join(errors)}", gitlab_errors=errors
        )
    return _result(ctx, "retry", pipeline, pipeline_id=pipeline_id, project=project)


async def _cancel(ctx: ToolContext, pipeline_id: int, project: _Project | None) -> ToolResult:
    variables = {"id": global_id("Ci::Pipeline", pipeline_id)}
    resent = False
    try:
        try:
            data = await ctx.gitlab.graphql("pipeline_cancel", variables, mutation=True)
        except GitLabMaybeSent:
            # Cancelling twice changes nothing more than cancelling once, so unlike create and
            # retry it is safe to send again; this attempt may itself be retried like a read.
            resent = True
            data = await ctx.gitlab.graphql("pipeline_cancel", variables, mutation=False)
    except GitLabNotFound:
        raise _hidden_pipeline(pipeline_id, "cancel") from None
    pipeline, errors = _payload(data, "pipelineCancel")
    if errors:
        words = "; ".join(errors)
        if resent:
            where = f"id='{project.full_path}', " if project else ""
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
        reread = await _lookup_project(
            ctx, project.full_path, full_path=project.full_path, numeric=None, pipeline_id=pipeline_id
        )
        pipeline = reread.pipeline
    return _result(ctx, "cancel", pipeline, pipeline_id=pipeline_id, project=project)


DESCRIPTION = """\
Run, retry, or cancel a CI/CD pipeline.
- Create: omit pipeline_id; pass ref (branch or tag) and the project as project_id (ID or full path) \
or url, plus optional variables ([{key, value, variable_type: env_var|file}]) and inputs ({name: value}).
- Retry or cancel: pass pipeline_id and action ("retry" re-runs failed and canceled jobs; "cancel" \
stops it). Pipeline IDs are global; if you also pass project_id or url, the pipeline must belong to it.
Returns {action, id, status, ref, web_url}. A create or retry is never sent twice: if GitLab does not \
confirm it, the error says how to check whether it happened before you call again."""

TOOLS: list[Tool] = [
    Tool(
        name="save_pipeline",
        description=DESCRIPTION,
        input_model=SavePipelineInput,
        output_model=SavePipelineOutput,
        handler=save_pipeline,
        annotations=SAVE_PIPELINE_ANNOTATIONS,
        toolset="ci",
        title="Run, retry or cancel a pipeline",
        reference_hint="Or pass `project_id` (ID or full path) instead of `url`.",
    )
]
