"""``save_pipeline``: run a new CI/CD pipeline, or retry or cancel an existing one.

``save_`` here folds two lifecycle actions into one tool, as GitLab's own tool does and its MCP
guidelines allow as a documented exception (``docs/tools/save_pipeline.md``):

- no ``pipeline_id`` (and no ``action``, or ``action: create``, the spelling the result uses) →
  create (``Mutation.pipelineCreate``; needs ``ref`` and the project);
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

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, field_validator

from gateway.errors import bad_request
from gateway.tools.arguments import PROJECT_ALIASES, OptionalPositiveId, OptionalProjectId, OptionalText
from gateway.tools.ci.pipeline_actions import (
    PIPELINE_CANCEL,
    PIPELINE_CREATE,
    PIPELINE_RETRY,
    SavePipelineOutput,
    cancel,
    create,
    retry,
)
from gateway.tools.ci.pipeline_project import SAVE_PIPELINE_PROJECT, resolve_project
from gateway.tools.confirmations import confirmation
from gateway.tools.context import ToolContext
from gateway.tools.registry import Annotations, Tool, ToolInput

#: Not read-only, destructive (a cancel stops running jobs; a retry re-runs jobs, deploys too),
#: not idempotent (each create is a new pipeline). MCP https://modelcontextprotocol.io/specification/2025-11-25/server/tools#tool-annotations.
SAVE_PIPELINE_ANNOTATIONS = Annotations(read_only=False, destructive=True, idempotent=False, open_world=True)


class PipelineVariable(ToolInput):
    # One CI/CD variable (GitLab's CiVariableInput). A comment, not a docstring: a docstring would
    # be sent in every tools/list, and the fields' descriptions say it all.

    key: str = Field(min_length=1, description="Variable name, e.g. DEPLOY_ENV.")
    value: str = Field(description="Variable value (a string).")
    variable_type: Literal["env_var", "file"] = Field(
        "env_var",
        description="env_var (default): an environment variable; file: the value is written to a "
        "temporary file whose path is the variable.",
    )


class SavePipelineInput(ToolInput):
    """Create a pipeline (url or project_id, and ref), or retry or cancel one (pipeline_id and action)."""

    argument_aliases = PROJECT_ALIASES

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
    action: Literal["create", "retry", "cancel"] | None = Field(
        None,
        description="create (the default without pipeline_id: a new pipeline from ref), retry (re-run "
        "failed and canceled jobs) or cancel (stop running jobs); retry and cancel require pipeline_id.",
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
        "(create only; the pipeline configuration must declare them in spec:inputs; GitLab 17.10 or later).",
    )
    reason: OptionalText = Field(
        None,
        description="Why you cancel it, in a sentence a person will read: shown to whoever is asked to "
        "confirm a cancel (ignored otherwise).",
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
    if args.action == "create" and args.pipeline_id is not None:
        raise bad_request(
            'action "create" starts a new pipeline and takes no `pipeline_id`. Omit `pipeline_id` to '
            'create one (with `ref` and `project_id` or `url`), or pass action "retry" or "cancel" to act '
            f"on pipeline {args.pipeline_id}."
        )
    if args.action in ("retry", "cancel") and args.pipeline_id is None:
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


# -- the tool ------------------------------------------------------------------------------------------


async def save_pipeline(ctx: ToolContext, args: SavePipelineInput) -> SavePipelineOutput:
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
        assert args.ref is not None
        project = await resolve_project(ctx, args.url, args.project_id, pipeline_id=None)
        assert project is not None
        pipeline_input: dict[str, Any] = {}
        if args.variables:
            pipeline_input["variables"] = [
                {"key": v.key, "value": v.value, "variableType": v.variable_type.upper()}
                for v in args.variables
            ]
        if args.inputs:
            pipeline_input["inputs"] = [{"name": name, "value": value} for name, value in args.inputs.items()]
        return await create(ctx, project, args.ref.strip(), pipeline_input)
    project = await resolve_project(ctx, args.url, args.project_id, pipeline_id=args.pipeline_id)
    if args.action == "retry":
        return await retry(ctx, args.pipeline_id, project)
    where = f" in project {project.full_path}" if project else ""
    async with confirmation(
        ctx,
        tool="save_pipeline",
        question=(
            f"An agent asks to cancel GitLab pipeline {args.pipeline_id}{where}: its running and pending "
            "jobs stop. Cancel it?"
        ),
        declined=f"pipeline {args.pipeline_id} was not cancelled.",
        why=args.reason,
    ):
        return await cancel(ctx, args.pipeline_id, project)


def _cancels(arguments: Mapping[str, Any]) -> bool:
    return arguments.get("action") == "cancel"


DESCRIPTION = """\
Run, retry, or cancel a CI/CD pipeline.
- Create: omit pipeline_id (action "create", or no action); pass ref (branch or tag) and the project \
as project_id (ID or full path) or url, plus optional variables ([{key, value, variable_type: \
env_var|file}]) and inputs ({name: value}).
- Retry or cancel: pass pipeline_id and action ("retry" re-runs failed and canceled jobs; "cancel" \
stops it). Pipeline IDs are global; if you also pass project_id or url, the pipeline must belong to it.
A create or retry is never sent twice: if GitLab does not \
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
        operations=(PIPELINE_CREATE, PIPELINE_RETRY, PIPELINE_CANCEL, SAVE_PIPELINE_PROJECT),
        confirms_when=_cancels,
    )
]
