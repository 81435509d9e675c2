"""The phase broker's 18 tools as one table: each row names the tool, its argument and result
models (``gateway.tools.broker.models``), its annotations and a thin handler.

A handler identifies the caller (``ctx.agent_id``, set by the transport from ``X-Agent-Id`` on
loopback or from a client token; refused by ``BrokerService.roster`` when missing or not
configured) and calls one method of :class:`gateway.broker.service.BrokerService` or of its
``messages`` or ``monitoring`` part, passing its answer through: the registry checks it against
the row's output model. Broker failures are the broker's own errors, turned into tool results at
the tool edge (``gateway.tools.registry``).

``wait_for_message`` is ``long_running``: the transport answers it over SSE with keep-alive
comments, and the tool sends ``notifications/progress`` when the caller sent a progress token.
Its message leaves the queue only when the transport has written the answer
(``ToolResult.on_delivered``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.errors import ToolError
from gateway.tools.broker.models import (
    BeginDevelopingOutput,
    CancelAutoAdvanceOutput,
    GetActivityLogInput,
    GetActivityLogOutput,
    GetMessageHistoryInput,
    GetMessageHistoryOutput,
    GetPhasePlanOutput,
    GetPipelineStatusOutput,
    LogActivityInput,
    NoArguments,
    ReasonInput,
    ReplyMessageInput,
    ReportCompletionInput,
    ReportCompletionOutput,
    ReportReviewInput,
    ReportReviewOutput,
    RequestHumanOutput,
    SendMessageInput,
    SendMessageOutput,
    SetAutoAdvanceInput,
    SetAutoAdvanceOutput,
    SetPhasePlanInput,
    SetPhasePlanOutput,
    StartPhaseInput,
    StartPhaseOutput,
    StateOutput,
    SuccessOutput,
    WaitForMessageInput,
    WaitForMessageOutput,
)
from gateway.tools.registry import Annotations, Tool, ToolResult

if TYPE_CHECKING:
    from gateway.broker.service import BrokerService
    from gateway.tools.context import ToolContext

TOOLSET = "broker"
#: The 18 tools share one docs page.
DOC_PAGE = "broker"
#: The default wait (3600 s), cut to ``broker.max_wait_seconds`` when that is lower.
DEFAULT_WAIT_SECONDS = 3600.0

_MONITOR = Annotations(read_only=True, destructive=False, idempotent=True, open_world=False)
_CHANGE = Annotations(read_only=False, destructive=False, idempotent=False, open_world=False)
_SETTING = Annotations(read_only=False, destructive=False, idempotent=True, open_world=False)


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
    return broker.monitoring.log_activity(agent, args.message)


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


#: The table: one row per tool, in tools/list order.
TOOLS: list[Tool] = [
    Tool(
        name="start_phase",
        description=(
            "Start a phase of issues: IDLE → PHASE_PREPARING, every issue todo. Only in IDLE. Usually the PM."
        ),
        input_model=StartPhaseInput,
        output_model=StartPhaseOutput,
        handler=start_phase,
        annotations=_CHANGE,
        toolset=TOOLSET,
    ),
    Tool(
        name="begin_developing",
        description=(
            "The phase is prepared: PHASE_PREPARING → PHASE_DEVELOPING; the first issue goes in progress."
        ),
        input_model=NoArguments,
        output_model=BeginDevelopingOutput,
        handler=begin_developing,
        annotations=_CHANGE,
        toolset=TOOLSET,
    ),
    Tool(
        name="report_completion",
        description=(
            "Report the issue in progress as pass or fail (PHASE_DEVELOPING only). pass moves on to "
            "nextIssue, or to PHASE_REVIEWING after the last issue (allDone); fail raises the issue's "
            "failCount, and reaching the fail limit (3) sets HUMAN_NEEDED."
        ),
        input_model=ReportCompletionInput,
        output_model=ReportCompletionOutput,
        handler=report_completion,
        annotations=_CHANGE,
        toolset=TOOLSET,
    ),
    Tool(
        name="report_review",
        description=(
            "Report the review of the phase (PHASE_REVIEWING only). approved: IDLE when a phase follows "
            "(and auto-advance starts if enabled), else COMPLETED. changes: fixCount goes up, every "
            "issue goes back to todo and development starts again, or HUMAN_NEEDED at the fix limit (2)."
        ),
        input_model=ReportReviewInput,
        output_model=ReportReviewOutput,
        handler=report_review,
        annotations=_CHANGE,
        toolset=TOOLSET,
    ),
    Tool(
        name="set_phase_plan",
        description=(
            "Store the plan of phases (planId, phases with their issues), whether the next phase starts "
            "by itself after an approval (autoAdvance, default false) and the cooldown before it "
            "(cooldownMinutes, default 5)."
        ),
        input_model=SetPhasePlanInput,
        output_model=SetPhasePlanOutput,
        handler=set_phase_plan,
        annotations=_SETTING,
        toolset=TOOLSET,
    ),
    Tool(
        name="get_phase_plan",
        description=(
            "The phase plan: planId, phases, currentPhase, completedPhases, autoAdvance, cooldownMinutes."
        ),
        input_model=NoArguments,
        output_model=GetPhasePlanOutput,
        handler=get_phase_plan,
        annotations=_MONITOR,
        toolset=TOOLSET,
    ),
    Tool(
        name="set_auto_advance",
        description="Turn auto-advance on or off. Turning it off also drops an auto-advance under way.",
        input_model=SetAutoAdvanceInput,
        output_model=SetAutoAdvanceOutput,
        handler=set_auto_advance,
        annotations=_SETTING,
        toolset=TOOLSET,
    ),
    Tool(
        name="cancel_auto_advance",
        description=(
            "Cancel the auto-advance under way (its cooldown or session_reset stage); the pipeline goes "
            "to PAUSED until the PM calls resume."
        ),
        input_model=ReasonInput,
        output_model=CancelAutoAdvanceOutput,
        handler=cancel_auto_advance,
        annotations=_CHANGE,
        toolset=TOOLSET,
    ),
    Tool(
        name="send_message",
        description=(
            "Queue a message for an agent (pm, dev, reviewer): subject is its type, body a JSON object. "
            "Higher priority is delivered first, then older first."
        ),
        input_model=SendMessageInput,
        output_model=SendMessageOutput,
        handler=send_message,
        annotations=_CHANGE,
        toolset=TOOLSET,
    ),
    Tool(
        name="wait_for_message",
        description=(
            "Wait for the next message in your queue (priority, then time) for at most timeout_sec "
            "seconds (default 3600). Returns {message, timedOut}; on timedOut call it again. A message "
            "can reach you twice after a gateway crash: it then carries the same messageId "
            "(deliveryAttempt > 1), so skip ids you have handled."
        ),
        input_model=WaitForMessageInput,
        output_model=WaitForMessageOutput,
        handler=wait_for_message,
        annotations=_CHANGE,
        toolset=TOOLSET,
        long_running=True,
    ),
    Tool(
        name="reply_message",
        description=(
            "Reply to a message by its messageId: the reply goes to that message's sender, in the same "
            "thread."
        ),
        input_model=ReplyMessageInput,
        output_model=SendMessageOutput,
        handler=reply_message,
        annotations=_CHANGE,
        toolset=TOOLSET,
    ),
    Tool(
        name="get_message_history",
        description=(
            "Past and queued messages, newest `limit` (default 50) in time order; `issue` keeps those "
            "whose body.issue is that issue."
        ),
        input_model=GetMessageHistoryInput,
        output_model=GetMessageHistoryOutput,
        handler=get_message_history,
        annotations=_MONITOR,
        toolset=TOOLSET,
    ),
    Tool(
        name="get_pipeline_status",
        description=(
            "The broker's phase pipeline snapshot (not a GitLab CI pipeline: see get_pipeline): state, "
            "phase, issues, agents (connected, lastSeen), queue depths, phase plan, auto-advance stage "
            "and deadline, fixCount, uptime. Works in every state."
        ),
        input_model=NoArguments,
        output_model=GetPipelineStatusOutput,
        handler=get_pipeline_status,
        annotations=_MONITOR,
        toolset=TOOLSET,
    ),
    Tool(
        name="log_activity",
        description=(
            "Append one line to your activity log (.pipeline/logs/<your agent id>.log). Works in every state."
        ),
        input_model=LogActivityInput,
        output_model=SuccessOutput,
        handler=log_activity,
        annotations=Annotations(read_only=False, idempotent=False, open_world=False),
        toolset=TOOLSET,
    ),
    Tool(
        name="get_activity_log",
        description=(
            "The last tail_lines (default 50) lines of an agent's activity log, or of `pipeline` (the "
            "broker's own log of every transition). Default: your own log."
        ),
        input_model=GetActivityLogInput,
        output_model=GetActivityLogOutput,
        handler=get_activity_log,
        annotations=_MONITOR,
        toolset=TOOLSET,
    ),
    Tool(
        name="request_human",
        description=(
            "Stop for a person's decision: any state but STOPPED → HUMAN_NEEDED; every connected agent "
            "is told. The PM calls resume once the person has decided."
        ),
        input_model=ReasonInput,
        output_model=RequestHumanOutput,
        handler=request_human,
        annotations=_CHANGE,
        toolset=TOOLSET,
    ),
    Tool(
        name="resume",
        description=(
            "PM only, on a person's word: HUMAN_NEEDED → PHASE_DEVELOPING (when it came from development "
            "or review) or IDLE; PAUSED → IDLE."
        ),
        input_model=NoArguments,
        output_model=StateOutput,
        handler=resume,
        annotations=_CHANGE,
        toolset=TOOLSET,
    ),
    Tool(
        name="stop_pipeline",
        description=(
            "Stop the broker's phase pipeline for good (not a GitLab CI pipeline: cancel one with "
            "save_pipeline action cancel): any state → STOPPED, writes .stop-pipeline, wakes every "
            "waiting agent; later state-changing calls fail. Monitoring tools keep working."
        ),
        input_model=NoArguments,
        output_model=StateOutput,
        handler=stop_pipeline,
        annotations=Annotations(read_only=False, destructive=True, idempotent=True, open_world=False),
        toolset=TOOLSET,
    ),
]
