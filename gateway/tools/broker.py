"""The phase broker's 18 tools (contract: ``docs/broker.md``).

Each tool checks its arguments (pydantic models with broker.md's exact argument names, camelCase
included), identifies the caller (``ctx.agent_id``, set by the transport from ``X-Agent-Id`` on
loopback or from a client token; refused by ``BrokerService.roster`` when missing or not
configured, naming the ``X-Agent-Id`` value received) and calls one method of
:class:`gateway.broker.service.BrokerService` or of its ``messages`` or ``monitoring`` part.
Results use broker.md's (camelCase) field names.

``wait_for_message`` is ``long_running``: the transport answers it over SSE with keep-alive
comments, and the tool sends ``notifications/progress`` when the caller sent a progress token
(MCP basic/utilities/progress). Its message leaves the queue only when the transport has
written the answer (``ToolResult.on_delivered``).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import ConfigDict, Field, StringConstraints, field_validator

from gateway.errors import ToolError
from gateway.tools.registry import Annotations, Tool, ToolInput, ToolOutput, ToolResult

if TYPE_CHECKING:
    from gateway.broker.service import BrokerService
    from gateway.tools.context import ToolContext

TOOLSET = "broker"
#: The broker's documented default wait (3600 s), cut to ``broker.max_wait_seconds`` when that is lower.
DEFAULT_WAIT_SECONDS = 3600.0

_MONITOR = Annotations(read_only=True, destructive=False, idempotent=True, open_world=False)
_CHANGE = Annotations(read_only=False, destructive=False, idempotent=False, open_world=False)
_SETTING = Annotations(read_only=False, destructive=False, idempotent=True, open_world=False)

# No control characters (line breaks included): ids end up in log lines and messages.
IssueId = Annotated[str, StringConstraints(min_length=1, max_length=255, pattern=r"^[^\x00-\x1f\x7f]+$")]
Text = Annotated[str, StringConstraints(min_length=1, max_length=4000)]
Subject = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")]
Priority = Literal["high", "normal", "low"]


def _unique(issues: list[str]) -> list[str]:
    dupes = sorted(i for i, n in Counter(issues).items() if n > 1)
    if dupes:
        raise ValueError(f"lists {', '.join(dupes)} more than once; give each issue once")
    return issues


# ---- inputs ------------------------------------------------------------------------------------


class NoArguments(ToolInput):
    """No arguments."""


class StartPhaseInput(ToolInput):
    phase: int = Field(ge=0, le=1_000_000, description="Phase number, e.g. 2")
    issues: list[IssueId] = Field(
        min_length=1,
        max_length=500,
        description='Issue ids of the phase, in the order to build them, e.g. ["JOP-240"]',
    )

    @field_validator("issues")
    @classmethod
    def _distinct(cls, issues: list[str]) -> list[str]:
        return _unique(issues)


class ReportCompletionInput(ToolInput):
    issue: IssueId = Field(description="The issue in progress, e.g. JOP-240")
    result: Literal["pass", "fail"] = Field(description="pass: the issue is done; fail: it failed this time")


class ReportReviewInput(ToolInput):
    result: Literal["approved", "changes"] = Field(description="approved, or changes to send the phase back")
    prId: str | None = Field(None, max_length=200, description="The pull/merge request reviewed, e.g. PR #4")
    hasNextPhase: bool | None = Field(
        None,
        description="Whether a phase follows; omitted: true when the phase plan has a phase after this one",
    )


class PlanPhase(ToolInput):
    phase: int = Field(ge=0, le=1_000_000, description="Phase number")
    issues: list[IssueId] = Field(
        min_length=1, max_length=500, description="Issue ids of the phase, in order"
    )


class SetPhasePlanInput(ToolInput):
    planId: str = Field(
        min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$", description='Plan id, e.g. "jope-core"'
    )
    phases: list[PlanPhase] = Field(
        min_length=1, max_length=200, description="The phases in the order they run"
    )
    autoAdvance: bool = Field(False, description="Start the next phase by itself after an approved review")
    cooldownMinutes: float = Field(
        5.0, ge=0, le=1440, description="Minutes between an approval and the session reset"
    )

    @field_validator("phases")
    @classmethod
    def _distinct(cls, phases: list[PlanPhase]) -> list[PlanPhase]:
        numbers = [p.phase for p in phases]
        if len(set(numbers)) != len(numbers):
            raise ValueError("lists a phase number more than once; give each phase once")
        _unique([i for p in phases for i in p.issues])
        return phases


class SetAutoAdvanceInput(ToolInput):
    enabled: bool = Field(description="true: start the next planned phase by itself after an approval")


class ReasonInput(ToolInput):
    reason: Text = Field(description="Why, in a sentence a person will read")


class SendMessageInput(ToolInput):
    to: str = Field(max_length=64, description="Recipient agent id: pm, dev or reviewer")
    subject: Subject = Field(description='Message type, e.g. "develop"')
    body: dict[str, Any] = Field(description='A JSON object, e.g. {"issue": "JOP-240", "phase": 2}')
    priority: Priority = Field("normal", description="high, normal or low; higher is delivered first")


class ReplyMessageInput(ToolInput):
    replyTo: str = Field(min_length=1, max_length=64, description="messageId of the message answered")
    subject: Subject = Field(description='Reply type, e.g. "done"')
    body: dict[str, Any] = Field(description="A JSON object")
    priority: Priority = Field("normal", description="high, normal or low")


class WaitForMessageInput(ToolInput):
    timeout_sec: float | None = Field(
        None,
        ge=0,
        description="Seconds to wait at most (default 3600, or the gateway's broker.max_wait_seconds "
        "when lower); 0 looks without waiting",
    )


class GetMessageHistoryInput(ToolInput):
    issue: str | None = Field(
        None, max_length=255, description="Only messages whose body.issue is this issue id"
    )
    limit: int = Field(50, ge=1, le=1000, description="The newest this many messages (default 50)")


class LogActivityInput(ToolInput):
    message: Text = Field(description="One line for your activity log")


class GetActivityLogInput(ToolInput):
    agent: str | None = Field(
        None, max_length=64, description="An agent id, or pipeline for the broker's own log; default: yours"
    )
    tail_lines: int = Field(50, ge=1, le=5000, description="The last this many lines (default 50)")


# ---- outputs -----------------------------------------------------------------------------------


class _Out(ToolOutput):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class StartPhaseOutput(_Out):
    success: bool
    phase: int
    issueCount: int
    state: str


class StateOutput(_Out):
    success: bool
    state: str


class BeginDevelopingOutput(StateOutput):
    currentIssue: str | None = None


class ReportCompletionOutput(_Out):
    success: bool
    allDone: bool
    nextIssue: str | None = None
    failCount: int | None = None
    state: str


class ReportReviewOutput(StateOutput):
    fixCount: int | None = None
    autoAdvance: dict[str, Any] | None = None


class SetPhasePlanOutput(_Out):
    success: bool
    totalPhases: int
    totalIssues: int


class PlanPhaseOut(_Out):
    phase: int
    issues: list[str]


class GetPhasePlanOutput(_Out):
    planId: str | None
    phases: list[PlanPhaseOut]
    currentPhase: int | None
    completedPhases: list[int]
    autoAdvance: bool
    cooldownMinutes: float | None


class SetAutoAdvanceOutput(_Out):
    success: bool
    autoAdvance: bool
    cancelledStage: str | None = None


class CancelAutoAdvanceOutput(_Out):
    success: bool
    stage: str


class SendMessageOutput(_Out):
    messageId: str
    queued: bool
    to: str | None = None
    threadId: str | None = None


class Message(_Out):
    messageId: str
    from_: str = Field(alias="from")
    to: str
    subject: str
    body: dict[str, Any]
    priority: Priority
    replyTo: str | None
    threadId: str
    createdAt: str
    deliveryAttempt: int = Field(
        description="1 on the first hand-out; more means it may have reached you before"
    )
    delivered: bool


class WaitForMessageOutput(_Out):
    message: Message | None
    timedOut: bool
    stopped: bool | None = None
    shutdown: bool | None = None
    reason: str | None = None
    waitedSeconds: float | None = None


class GetMessageHistoryOutput(_Out):
    messages: list[Message]


class IssueStatus(_Out):
    status: Literal["todo", "in_progress", "done"]
    failCount: int


class AgentStatus(_Out):
    connected: bool
    lastSeen: str | None


class PhasePlanRef(_Out):
    planId: str | None
    autoAdvance: bool


class AutoAdvanceStatus(_Out):
    active: bool
    stage: Literal["cooldown", "session_reset"] | None = None
    deadline: str | None = None
    secondsLeft: float | None = None
    nextPhase: int | None = None


class GetPipelineStatusOutput(_Out):
    state: str
    phase: int | None
    issues: dict[str, IssueStatus]
    agents: dict[str, AgentStatus]
    queues: dict[str, int]
    phasePlan: PhasePlanRef
    autoAdvance: AutoAdvanceStatus
    fixCount: int
    uptime: str
    uptimeSeconds: float | None = None
    limits: dict[str, int] | None = None
    humanNeeded: dict[str, Any] | None = None
    stopped: dict[str, Any] | None = None


class SuccessOutput(_Out):
    success: bool


class GetActivityLogOutput(_Out):
    agent: str | None = None
    lines: list[str]


class RequestHumanOutput(_Out):
    success: bool
    previousState: str


# ---- handlers ----------------------------------------------------------------------------------


def _caller(ctx: ToolContext) -> tuple[BrokerService, str]:
    broker = ctx.services.broker
    if broker is None or not broker.store.is_open:
        raise ToolError(
            "upstream_error",
            "The phase broker is not available in this gateway right now (it is starting or shutting down). "
            "Reconnect in a moment and try again.",
        )
    return broker, broker.roster.authorize(ctx.agent_id, ctx.call.principal.claimed_agent_id)


async def start_phase(ctx: ToolContext, args: StartPhaseInput) -> dict[str, Any]:
    broker, agent = _caller(ctx)
    return await broker.start_phase(agent, args.phase, list(args.issues))


async def begin_developing(ctx: ToolContext, args: NoArguments) -> dict[str, Any]:
    broker, agent = _caller(ctx)
    return await broker.begin_developing(agent)


async def report_completion(ctx: ToolContext, args: ReportCompletionInput) -> dict[str, Any]:
    broker, agent = _caller(ctx)
    return await broker.report_completion(agent, args.issue, args.result)


async def report_review(ctx: ToolContext, args: ReportReviewInput) -> dict[str, Any]:
    broker, agent = _caller(ctx)
    return await broker.report_review(agent, args.result, args.prId, args.hasNextPhase)


async def set_phase_plan(ctx: ToolContext, args: SetPhasePlanInput) -> dict[str, Any]:
    broker, agent = _caller(ctx)
    phases = [{"phase": p.phase, "issues": list(p.issues)} for p in args.phases]
    return await broker.set_phase_plan(agent, args.planId, phases, args.autoAdvance, args.cooldownMinutes)


async def get_phase_plan(ctx: ToolContext, args: NoArguments) -> dict[str, Any]:
    broker, _ = _caller(ctx)
    return await broker.get_phase_plan()


async def set_auto_advance(ctx: ToolContext, args: SetAutoAdvanceInput) -> dict[str, Any]:
    broker, agent = _caller(ctx)
    return await broker.set_auto_advance(agent, args.enabled)


async def cancel_auto_advance(ctx: ToolContext, args: ReasonInput) -> dict[str, Any]:
    broker, agent = _caller(ctx)
    return await broker.cancel_auto_advance(agent, args.reason)


async def send_message(ctx: ToolContext, args: SendMessageInput) -> dict[str, Any]:
    broker, agent = _caller(ctx)
    return await broker.messages.send_message(agent, args.to, args.subject, args.body, args.priority)


async def reply_message(ctx: ToolContext, args: ReplyMessageInput) -> dict[str, Any]:
    broker, agent = _caller(ctx)
    return await broker.messages.send_message(
        agent, "", args.subject, args.body, args.priority, reply_to=args.replyTo
    )


async def wait_for_message(ctx: ToolContext, args: WaitForMessageInput) -> ToolResult:
    broker, agent = _caller(ctx)
    limit = broker.config.max_wait_seconds
    timeout = args.timeout_sec if args.timeout_sec is not None else min(DEFAULT_WAIT_SECONDS, limit)
    if timeout > limit:
        raise ToolError(
            "bad_request",
            f"`timeout_sec`: {timeout:g} s is longer than the longest wait this gateway allows ({limit:g} s, "
            f"broker.max_wait_seconds). Pass at most {limit:g} and call wait_for_message again when it "
            f"times out.",
            invalid_arguments=["timeout_sec"],
        )
    progress = ctx.progress if ctx.call.has_progress_token else None
    outcome = await broker.messages.wait_for_message(agent, timeout, progress)
    structured: dict[str, Any] = {
        "message": outcome.message,
        "timedOut": outcome.timed_out,
        "waitedSeconds": round(outcome.waited_seconds, 3),
    }
    text: str | None = None
    if outcome.shutdown:
        structured.update(shutdown=True, reason=outcome.reason)
        text = (
            f"The gateway is shutting down ({outcome.reason}). No message was taken from your queue: "
            "reconnect to the gateway and call wait_for_message again."
        )
    elif outcome.stopped:
        structured.update(stopped=True, reason=outcome.reason)
        text = (
            "The pipeline was stopped (stop_pipeline): no more work will come. Finish what you are doing and "
            "leave your wait loop; monitoring tools still work."
        )
    elif outcome.timed_out:
        text = f"No message in {timeout:g} s. Call wait_for_message again to keep waiting."
    return ToolResult(
        structured=structured, text=text, on_delivered=outcome.on_delivered, on_abandoned=outcome.on_abandoned
    )


async def get_message_history(ctx: ToolContext, args: GetMessageHistoryInput) -> dict[str, Any]:
    broker, _ = _caller(ctx)
    return await broker.messages.message_history(args.issue, args.limit)


async def get_pipeline_status(ctx: ToolContext, args: NoArguments) -> dict[str, Any]:
    broker, _ = _caller(ctx)
    return await broker.monitoring.status()


async def log_activity(ctx: ToolContext, args: LogActivityInput) -> dict[str, Any]:
    broker, agent = _caller(ctx)
    return await broker.monitoring.log_activity(agent, args.message)


async def get_activity_log(ctx: ToolContext, args: GetActivityLogInput) -> dict[str, Any]:
    broker, agent = _caller(ctx)
    return await broker.monitoring.activity_log(args.agent or agent, args.tail_lines)


async def request_human(ctx: ToolContext, args: ReasonInput) -> dict[str, Any]:
    broker, agent = _caller(ctx)
    return await broker.request_human(agent, args.reason)


async def resume(ctx: ToolContext, args: NoArguments) -> dict[str, Any]:
    broker, agent = _caller(ctx)
    return await broker.resume(agent)


async def stop_pipeline(ctx: ToolContext, args: NoArguments) -> dict[str, Any]:
    broker, agent = _caller(ctx)
    return await broker.stop_pipeline(agent)


def _tool(
    name: str,
    description: str,
    input_model: type[ToolInput],
    handler: Any,
    annotations: Annotations,
    output_model: type[ToolOutput],
    *,
    long_running: bool = False,
) -> Tool:
    return Tool(
        name=name,
        description=description,
        input_model=input_model,
        handler=handler,
        annotations=annotations,
        toolset=TOOLSET,
        output_model=output_model,
        long_running=long_running,
    )


TOOLS: list[Tool] = [
    _tool(
        "start_phase",
        "Start a phase of issues: IDLE → PHASE_PREPARING, every issue todo. Only in IDLE. Usually the PM.",
        StartPhaseInput,
        start_phase,
        _CHANGE,
        StartPhaseOutput,
    ),
    _tool(
        "begin_developing",
        "The phase is prepared: PHASE_PREPARING → PHASE_DEVELOPING; the first issue goes in progress.",
        NoArguments,
        begin_developing,
        _CHANGE,
        BeginDevelopingOutput,
    ),
    _tool(
        "report_completion",
        "Report the issue in progress as pass or fail (PHASE_DEVELOPING only). pass moves on to nextIssue, "
        "or "
        "to PHASE_REVIEWING after the last issue (allDone); fail raises the issue's failCount, and reaching "
        "the "
        "fail limit (3) sets HUMAN_NEEDED.",
        ReportCompletionInput,
        report_completion,
        _CHANGE,
        ReportCompletionOutput,
    ),
    _tool(
        "report_review",
        "Report the review of the phase (PHASE_REVIEWING only). approved: IDLE when a phase follows (and "
        "auto-advance starts if enabled), else COMPLETED. changes: fixCount goes up, every issue goes back "
        "to "
        "todo and development starts again, or HUMAN_NEEDED at the fix limit (2).",
        ReportReviewInput,
        report_review,
        _CHANGE,
        ReportReviewOutput,
    ),
    _tool(
        "set_phase_plan",
        "Store the plan of phases (planId, phases with their issues), whether the next phase starts by "
        "itself "
        "after an approval (autoAdvance, default false) and the cooldown before it (cooldownMinutes, "
        "default 5).",
        SetPhasePlanInput,
        set_phase_plan,
        _SETTING,
        SetPhasePlanOutput,
    ),
    _tool(
        "get_phase_plan",
        "The phase plan: planId, phases, currentPhase, completedPhases, autoAdvance, cooldownMinutes.",
        NoArguments,
        get_phase_plan,
        _MONITOR,
        GetPhasePlanOutput,
    ),
    _tool(
        "set_auto_advance",
        "Turn auto-advance on or off. Turning it off also drops an auto-advance under way.",
        SetAutoAdvanceInput,
        set_auto_advance,
        _SETTING,
        SetAutoAdvanceOutput,
    ),
    _tool(
        "cancel_auto_advance",
        "Cancel the auto-advance under way (its cooldown or session_reset stage); the pipeline goes to "
        "PAUSED "
        "until the PM calls resume.",
        ReasonInput,
        cancel_auto_advance,
        _CHANGE,
        CancelAutoAdvanceOutput,
    ),
    _tool(
        "send_message",
        "Queue a message for an agent (pm, dev, reviewer): subject is its type, body a JSON object. Higher "
        "priority is delivered first, then older first.",
        SendMessageInput,
        send_message,
        _CHANGE,
        SendMessageOutput,
    ),
    _tool(
        "wait_for_message",
        "Wait for the next message in your queue (priority, then time) for at most timeout_sec seconds "
        "(default 3600). Returns {message, timedOut}; on timedOut call it again. A message can reach you "
        "twice "
        "after a gateway crash: it then carries the same messageId (deliveryAttempt > 1), so skip ids you "
        "have handled.",
        WaitForMessageInput,
        wait_for_message,
        _CHANGE,
        WaitForMessageOutput,
        long_running=True,
    ),
    _tool(
        "reply_message",
        "Reply to a message by its messageId: the reply goes to that message's sender, in the same thread.",
        ReplyMessageInput,
        reply_message,
        _CHANGE,
        SendMessageOutput,
    ),
    _tool(
        "get_message_history",
        "Past and queued messages, newest `limit` (default 50) in time order; `issue` keeps those whose "
        "body.issue is that issue.",
        GetMessageHistoryInput,
        get_message_history,
        _MONITOR,
        GetMessageHistoryOutput,
    ),
    _tool(
        "get_pipeline_status",
        "The broker's phase pipeline snapshot (not a GitLab CI pipeline: see get_pipeline): state, phase, "
        "issues, agents (connected, lastSeen), queue depths, phase plan, auto-advance stage and deadline, "
        "fixCount, uptime. Works in every state.",
        NoArguments,
        get_pipeline_status,
        _MONITOR,
        GetPipelineStatusOutput,
    ),
    _tool(
        "log_activity",
        "Append one line to your activity log (.pipeline/logs/<your agent id>.log). Works in every state.",
        LogActivityInput,
        log_activity,
        Annotations(read_only=False, idempotent=False, open_world=False),
        SuccessOutput,
    ),
    _tool(
        "get_activity_log",
        "The last tail_lines (default 50) lines of an agent's activity log, or of `pipeline` (the broker's "
        "own log of every transition). Default: your own log.",
        GetActivityLogInput,
        get_activity_log,
        _MONITOR,
        GetActivityLogOutput,
    ),
    _tool(
        "request_human",
        "Stop for a person's decision: any state but STOPPED → HUMAN_NEEDED; every connected agent is told. "
        "The PM calls resume once the person has decided.",
        ReasonInput,
        request_human,
        _CHANGE,
        RequestHumanOutput,
    ),
    _tool(
        "resume",
        "PM only, on a person's word: HUMAN_NEEDED → PHASE_DEVELOPING (when it came from development or "
        "review) "
        "or IDLE; PAUSED → IDLE.",
        NoArguments,
        resume,
        _CHANGE,
        StateOutput,
    ),
    _tool(
        "stop_pipeline",
        "Stop the broker's phase pipeline for good (not a GitLab CI pipeline: cancel one with save_pipeline "
        "action cancel): any state → STOPPED, writes .stop-pipeline, wakes every waiting agent; later "
        "state-changing calls fail. Monitoring tools keep working.",
        NoArguments,
        stop_pipeline,
        Annotations(read_only=False, destructive=True, idempotent=True, open_world=False),
        StateOutput,
    ),
]
