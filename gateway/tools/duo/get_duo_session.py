"""``get_duo_session`` (alias ``get_duo_workflow_status``): poll a Duo Agent Platform session.

One GraphQL request, ``Query.duoWorkflowWorkflows(workflowId:)`` with
``gid://gitlab/Ai::DuoWorkflows::Workflow/<id>`` (https://docs.gitlab.com/api/graphql/reference/#queryduoworkflowworkflows),
answered as GitLab's MCP server answers ``get_duo_session``: a human text block (the agent's
answer, progress or guidance) and a metadata object (``structuredContent``):

=============================  ======================================================================
GitLab ``statusName``          result
=============================  ======================================================================
``running``, ``created``,      ``Status: <s>. Latest agent update: <≤500 chars>. Poll again in 30
anything else active           seconds.`` + ``poll_after_seconds: 30``
``finished``                   the last agent answer, or GitLab's fallback sentence
``input_required``             the last agent answer (or fallback) + ``turn_complete: true``; status
                               ``"input required"`` as GitLab's tool spells it
``tool_call_approval_``        ``Session is paused: <status>. Polling will NOT move it forward. ...
``required``,                  call approve_duo_agent_action with workflow_id=<id> ...`` (after the
``plan_approval_required``     latest agent message) + ``awaiting_approval: true``
``paused``                     ``paused: true`` and how to resume it
``failed``, ``stopped``        ``Session <status>. See <web_url> for details.``
=============================  ======================================================================

The agent's answer is the last message the agent wrote (``role: assistant`` in chat sessions,
``messageType: agent`` in flows): ``latestCheckpoint.lastDuoMessage`` when it is one, else
``duoMessages`` newest first; never a user or tool message.

Beyond GitLab's tool, ``wait_seconds`` (0 to 300) makes the gateway poll for the caller every
:data:`POLL_INTERVAL_SECONDS`, with progress notifications, and return as soon as the session
leaves the running state or the time is up; cancelling the call stops the polling at once.
Callers waiting on the same session with the same credential share each poll
(:mod:`gateway.tools.waiting`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from gateway.cache import credential_key
from gateway.errors import ToolError, not_found
from gateway.gitlab.errors import GitLabNotFound
from gateway.gitlab.instance import Edition
from gateway.gitlab.needs import Need
from gateway.gitlab.operation import GraphQLData, Operation
from gateway.gitlab.urls import MAX_ID, global_id, global_id_number_or_none
from gateway.tools.context import ToolContext
from gateway.tools.registry import READ_ONLY, Tool, ToolInput, ToolOutput, ToolResult
from gateway.tools.visibility import anonymous_note

#: GraphQL model name of a Duo workflow (``AiDuoWorkflowsWorkflowID``).
WORKFLOW_MODEL = "Ai::DuoWorkflows::Workflow"

#: GitLab's polling hint while a session runs.
POLL_AFTER_SECONDS = 30
#: How often the gateway itself polls GitLab during ``wait_seconds``. Tests shrink it.
POLL_INTERVAL_SECONDS = 5.0
#: Longest ``wait_seconds``: under the 300 s idle limits of common clients and proxies even if
#: progress were lost (MCP basic/utilities/progress).
MAX_WAIT_SECONDS = 300
#: Progress text is cut to this many characters, as GitLab's tool cuts it.
PROGRESS_CHARS = 500

NO_FINAL_ANSWER = "Session finished, but no final answer was produced."
NO_TURN_ANSWER = "The last turn completed, but no agent answer was found."
#: Appended to GitLab's approval guidance, which stays verbatim: the tool it names is
#: served by GitLab's own MCP server, and an agent connected only to this gateway must not hunt for it.
APPROVAL_TOOL_NOTE = (
    "(approve_duo_agent_action is a tool of GitLab's built-in MCP server; this gateway does not serve it.)"
)

APPROVAL_STATUSES = frozenset({"tool_call_approval_required", "plan_approval_required"})
#: Terminal statuses other than ``finished`` (``Ai::DuoWorkflows::Workflow`` states).
FAILED_STATUSES = frozenset({"failed", "stopped"})
#: Every ``statusName`` GitLab 19.4 knows (``DuoWorkflowStatus``); others are classified by
#: ``statusGroup`` so a status added later never makes a finished session look running.
KNOWN_STATUSES = frozenset(
    {"created", "running", "paused", "finished", "input_required", *APPROVAL_STATUSES, *FAILED_STATUSES}
)
#: ``DuoWorkflowStatusGroup`` → the branch an unknown status takes.
GROUP_BRANCH = {
    "COMPLETED": "finished",
    "FAILED": "failed",
    "CANCELED": "failed",
    "PAUSED": "paused",
    "AWAITING_INPUT": "waiting",
}


def _no_bool(value: Any) -> Any:
    # JSON true/false would otherwise pass as 1/0 (pydantic's lax int).
    if isinstance(value, bool):
        raise ValueError("must be an integer, not true/false")
    return value


class GetDuoSessionInput(ToolInput):
    """The GitLab Duo Agent Platform session to read, and how long to wait for it to stop running."""

    workflow_id: Annotated[int, Field(ge=1, le=MAX_ID), BeforeValidator(_no_bool)] = Field(
        description="The session's workflow ID, e.g. 42: the number ending its GitLab URL "
        "(/-/automate/agent-sessions/<id>), or the ID trigger_duo_flow or ask_duo_agent (tools of "
        "GitLab's built-in MCP server) returned."
    )
    wait_seconds: Annotated[int, Field(ge=0, le=MAX_WAIT_SECONDS), BeforeValidator(_no_bool)] = Field(
        0,
        description="0 (default): answer at once. 1-300: while the session is running, the gateway polls "
        "GitLab for you and answers as soon as it stops running (finished, waiting for input or approval, "
        "failed...) or when this many seconds have passed.",
    )


class DuoSessionOutput(ToolOutput):
    """The session's status and what to do next: poll again, answer it, or approve its pending action."""

    workflow_id: int = Field(description="The workflow (session) ID.")
    status: str = Field(
        description='GitLab\'s status name: running, finished, "input required", '
        "tool_call_approval_required, plan_approval_required, paused, failed, stopped, created."
    )
    web_url: str | None = Field(
        description="The session's page in GitLab; null when GitLab gives no project."
    )
    poll_after_seconds: int | None = Field(None, description="Running only: wait this long, then call again.")
    turn_complete: bool | None = Field(
        None, description='"input required" only: the agent finished its turn.'
    )
    awaiting_approval: bool | None = Field(
        None,
        description="Approval states only: polling will not move it; approve with approve_duo_agent_action "
        "(a tool of GitLab's built-in MCP server).",
    )
    paused: bool | None = Field(None, description="Paused only: polling will not move it forward.")
    answer: str | None = Field(
        None,
        description="The last message the agent wrote, whole (the text block cuts a running session's "
        "update to 500 characters); absent when it wrote none yet.",
    )


# -- reading a session -----------------------------------------------------------------------------


def _missing(ctx: ToolContext, workflow_id: int) -> ToolError:
    # GitLab answers "does not exist" and "may not read" alike, and so does the gateway.
    return not_found(
        f"Duo session {workflow_id} was not found, or you do not have access to it. Check the workflow_id: "
        "the number ending the session's URL in GitLab (/-/automate/agent-sessions/<id>), or the ID that "
        "trigger_duo_flow or ask_duo_agent (tools of GitLab's built-in MCP server) returned."
        + anonymous_note(ctx.call.caller.credential)
    )


class DuoMessage(GraphQLData):
    # Kept loose: only a non-empty string written by the agent counts (see _is_agent_message).
    content: Any = None
    role: Any = None
    messageType: Any = None


class Checkpoint(GraphQLData):
    lastDuoMessage: DuoMessage | None = None
    duoMessages: list[DuoMessage | None] | None = None


class WorkflowProject(GraphQLData):
    webUrl: str | None = None


class Workflow(GraphQLData):
    """A ``DuoWorkflow`` as ``get_duo_session.graphql`` selects it."""

    id: str | None = None
    status: str | None = None
    statusName: str | None = None
    statusGroup: str | None = None
    webUrl: str | None = None
    project: WorkflowProject | None = None
    latestCheckpoint: Checkpoint | None = None


class Workflows(GraphQLData):
    nodes: list[Workflow | None] | None = None


class GetDuoSessionAnswer(GraphQLData):
    duoWorkflowWorkflows: Workflows | None = None


#: Duo Agent Platform sessions are GitLab EE's; what this tool reads of them came in 18.4
#: (``statusGroup``, ``latestCheckpoint``). Newer fields have fallbacks (see session_web_url,
#: agent_answer), so older GitLabs are sent the document without them.
GET_DUO_SESSION = Operation(
    "get_duo_session",
    GetDuoSessionAnswer,
    needs=(
        Need("Query.duoWorkflowWorkflows(workflowId:)", since=(17, 5), edition=Edition.EE),
        Need("DuoWorkflow.latestCheckpoint", since=(18, 4), edition=Edition.EE),
        Need("DuoWorkflow.statusGroup", since=(18, 4), edition=Edition.EE),
        Need(
            "DuoWorkflow.webUrl",
            since=(19, 0),
            without="drop",
            note="`web_url` is built from the project's URL",
            differs=False,
        ),
        Need(
            "DuoWorkflowEvent.lastDuoMessage",
            since=(19, 3),
            without="drop",
            note="the answer is the newest agent message of the checkpoint",
            differs=False,
        ),
    ),
)


async def fetch_workflow(ctx: ToolContext, workflow_id: int) -> Workflow:
    """The workflow for ``workflow_id`` (one GraphQL request).

    Raises:
        ToolError: ``not_found`` when GitLab reports it missing or hidden, or returns no node.
        GitLabError: other failures (mapped by the registry).
    """
    try:
        answer = await GET_DUO_SESSION.run(ctx.gitlab, {"workflowId": global_id(WORKFLOW_MODEL, workflow_id)})
    except GitLabNotFound:
        raise _missing(ctx, workflow_id) from None
    nodes = answer.duoWorkflowWorkflows.nodes if answer.duoWorkflowWorkflows else None
    node = nodes[0] if nodes else None
    if node is None:
        raise _missing(ctx, workflow_id)
    return node


def _is_agent_message(message: DuoMessage | None) -> bool:
    if message is None:
        return False
    content = message.content
    if not isinstance(content, str) or not content.strip():
        return False
    return bool(message.role == "assistant" or message.messageType == "agent")


def agent_answer(workflow: Workflow) -> str | None:
    """The newest agent-written message content, or None.

    ``lastDuoMessage`` when the agent wrote it, else ``duoMessages`` newest first; user and tool
    messages are skipped (https://docs.gitlab.com/api/graphql/reference/#duoworkflowevent).
    """
    checkpoint = workflow.latestCheckpoint or Checkpoint()
    for message in [checkpoint.lastDuoMessage, *reversed(checkpoint.duoMessages or [])]:
        if message is not None and _is_agent_message(message):
            return str(message.content).strip()
    return None


def truncate(text: str, limit: int = PROGRESS_CHARS) -> str:
    """``text`` cut to ``limit`` characters, ``...`` included (Rails ``String#truncate``)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def session_web_url(workflow: Workflow, workflow_id: int) -> str | None:
    """The workflow's ``webUrl``, else the project's web URL + ``/-/automate/agent-sessions/<id>``."""
    if workflow.webUrl:
        return workflow.webUrl
    project_url = workflow.project.webUrl if workflow.project else None
    if project_url:
        return f"{str(project_url).rstrip('/')}/-/automate/agent-sessions/{workflow_id}"
    return None


def status_name(workflow: Workflow) -> str:
    """GitLab's ``statusName`` (lowercase, underscored), else the ``status`` enum lowercased."""
    name = workflow.statusName or workflow.status or "unknown"
    return str(name).strip().lower()


@dataclass(frozen=True)
class SessionState:
    """A workflow read once, classified."""

    result: ToolResult
    running: bool
    status: str
    update: str | None


def describe(workflow: Workflow, requested_id: int) -> SessionState:
    """The result for one workflow read (see the module table)."""
    workflow_id = global_id_number_or_none(workflow.id) or requested_id
    status = status_name(workflow)
    web_url = session_web_url(workflow, workflow_id)
    answer = agent_answer(workflow)
    meta: dict[str, Any] = {"workflow_id": workflow_id, "status": status, "web_url": web_url}
    if answer:  # in structuredContent too: a client that reads only that gets the answer
        meta["answer"] = answer

    def done(text: str, *, running: bool = False) -> SessionState:
        return SessionState(ToolResult(structured=meta, text=text), running, status, answer)

    branch = status
    if status not in KNOWN_STATUSES:
        branch = GROUP_BRANCH.get((workflow.statusGroup or "").upper(), "running")
    if branch == "finished":
        return done(answer or NO_FINAL_ANSWER)
    if branch == "input_required":
        meta.update(status="input required", turn_complete=True)
        return done(answer or NO_TURN_ANSWER)
    if branch in APPROVAL_STATUSES:
        meta["awaiting_approval"] = True
        guidance = (
            f"Session is paused: {status}. Polling will NOT move it forward. To proceed, call "
            f'approve_duo_agent_action with workflow_id={workflow_id} and decision="approve" (or "reject"). '
            f"{APPROVAL_TOOL_NOTE}"
        )
        return done(f"{answer}\n\n{guidance}" if answer else guidance)
    if branch == "paused":
        meta["paused"] = True
        where = f" from {web_url}" if web_url else " in GitLab"
        return done(
            f"Session is paused. Polling will NOT move it forward: resume it{where}, then poll again."
        )
    see = f"See {web_url} for details." if web_url else "See the session in GitLab for details."
    if branch in FAILED_STATUSES:
        return done(f"Session {status}. {see}")
    if branch == "waiting":
        return done(f"Session is waiting: {status}. Polling will NOT move it forward. {see}")
    meta["poll_after_seconds"] = POLL_AFTER_SECONDS
    update = f" Latest agent update: {truncate(answer)}." if answer else ""
    return done(f"Status: {status}.{update} Poll again in {POLL_AFTER_SECONDS} seconds.", running=True)


# -- the tool ------------------------------------------------------------------------------------------


async def get_duo_session(ctx: ToolContext, args: GetDuoSessionInput) -> ToolResult:
    """Read a Duo session once, or poll it for up to ``wait_seconds`` while it runs.

    Returns:
        The text block and metadata object for the session's (last read) state.

    Raises:
        ToolError: ``not_found`` for a missing or unreadable session (one message for both).
        GitLabError: other GitLab failures (mapped by the registry).
        asyncio.CancelledError: the call was cancelled; no further request is sent.
    """
    if args.wait_seconds == 0:
        return describe(await fetch_workflow(ctx, args.workflow_id), args.workflow_id).result
    gitlab = ctx.gitlab  # raises now, before any wait, when the caller sent no token
    last_progress = 0.0

    async def read() -> SessionState:
        return describe(await fetch_workflow(ctx, args.workflow_id), args.workflow_id)

    async def on_state(state: SessionState, elapsed: float) -> None:
        nonlocal last_progress
        # MCP progress values must increase strictly (2025-11-25 basic/utilities/progress).
        last_progress = max(elapsed, last_progress + 0.001)
        note = f" Latest agent update: {truncate(state.update, 200)}" if state.update else ""
        await ctx.progress(
            last_progress,
            float(args.wait_seconds),
            f"Session {args.workflow_id} is still {state.status} ({elapsed:.0f} s of {args.wait_seconds} s)."
            + note,
        )

    waited = await ctx.services.polls.wait(
        credential_key(gitlab.credential, "duo_session", args.workflow_id),
        read,
        lambda state: not state.running,
        wait_seconds=args.wait_seconds,
        interval=POLL_INTERVAL_SECONDS,
        backoff=1.0,
        on_state=on_state,
    )
    return waited.state.result


DESCRIPTION = """\
Check the status of a Duo agent session (started by trigger_duo_flow or ask_duo_agent, tools of GitLab's \
built-in MCP server). While running, returns compact progress and a poll_after_seconds hint - wait that \
long, then call again (or pass wait_seconds, up to 300, to have the gateway wait for you and answer as \
soon as the session stops running). "finished" or "input required" both mean the current turn is \
complete and include the agent's answer ("input required" is the normal resting state of chat-style \
sessions). Approval-required statuses will not progress by polling - use approve_duo_agent_action \
(GitLab's built-in MCP server) instead. Needs GitLab EE 18.4 or later; elsewhere it answers \
unsupported_by_gitlab."""

TOOLS: list[Tool] = [
    Tool(
        name="get_duo_session",
        description=DESCRIPTION,
        input_model=GetDuoSessionInput,
        output_model=DuoSessionOutput,
        handler=get_duo_session,
        annotations=READ_ONLY,
        toolset="duo_agent_platform",
        operations=(GET_DUO_SESSION,),
        aliases=("get_duo_workflow_status",),
        long_running=True,
        wait_argument="wait_seconds",
        title="Get a Duo agent session",
    )
]
