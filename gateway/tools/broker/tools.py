"""The phase broker's 18 tools as one table: each row names the tool, its argument and result
models (``gateway.tools.broker.models``), its annotations and a thin handler.

A handler identifies the caller (``ctx.agent_id``, set by the transport from ``X-Agent-Id`` on
loopback or from a client token; refused by ``BrokerService.roster`` when missing or not configured)
and calls one method of a part of :class:`gateway.broker.service.BrokerService` (``phases``,
``plan``, ``control``, ``sending``, ``delivery``, ``history``, ``monitoring``), passing its answer
through: the registry checks it against the row's output model. Broker failures are the broker's own
errors, turned into tool results at the tool edge (``gateway.tools.registry``).

``wait_for_message`` is ``long_running``: the transport answers it over SSE with keep-alive
comments, and the tool sends ``notifications/progress`` when the caller sent a progress token.
Its message leaves the queue only when the transport has written the answer
(``ToolResult.on_delivered``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from gateway.observability.tracing import broker_operation
from gateway.tools.broker.handlers import (
    begin_developing,
    cancel_auto_advance,
    get_activity_log,
    get_message_history,
    get_phase_plan,
    get_pipeline_status,
    log_activity,
    reply_message,
    report_completion,
    report_review,
    request_human,
    resume,
    send_message,
    set_auto_advance,
    set_phase_plan,
    start_phase,
    stop_pipeline,
    wait_for_message,
)
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
    StopPipelineInput,
    SuccessOutput,
    WaitForMessageInput,
    WaitForMessageOutput,
)
from gateway.tools.registry import Annotations, Tool

if TYPE_CHECKING:
    pass

TOOLSET = "broker"
#: The 18 tools share one docs page.
DOC_PAGE = "broker"

_MONITOR = Annotations(read_only=True, destructive=False, idempotent=True, open_world=False)
_CHANGE = Annotations(read_only=False, destructive=False, idempotent=False, open_world=False)
_SETTING = Annotations(read_only=False, destructive=False, idempotent=True, open_world=False)


# ---- handlers ----------------------------------------------------------------------------------


#: The table: one row per tool, in tools/list order.
TOOLS: list[Tool] = [
    Tool(
        name="start_phase",
        title="Start phase",
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
        title="Begin developing",
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
        title="Report completion",
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
        title="Report review",
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
        title="Set phase plan",
        description=(
            "Store the plan of phases (plan_id, phases with their issues), whether the next phase starts "
            "by itself after an approval (auto_advance, default false) and the cooldown before it "
            "(cooldown_minutes, default 5)."
        ),
        input_model=SetPhasePlanInput,
        output_model=SetPhasePlanOutput,
        handler=set_phase_plan,
        annotations=_SETTING,
        toolset=TOOLSET,
    ),
    Tool(
        name="get_phase_plan",
        title="Get phase plan",
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
        title="Set auto-advance",
        description="Turn auto-advance on or off. Turning it off also drops an auto-advance under way.",
        input_model=SetAutoAdvanceInput,
        output_model=SetAutoAdvanceOutput,
        handler=set_auto_advance,
        annotations=_SETTING,
        toolset=TOOLSET,
    ),
    Tool(
        name="cancel_auto_advance",
        title="Cancel auto-advance",
        description=(
            "Cancel the auto-advance under way (its cooldown or session_reset stage); the pipeline goes "
            "to PAUSED until the PM calls resume. Every agent is sent a high-priority "
            "auto_advance_cancelled message."
        ),
        input_model=ReasonInput,
        output_model=CancelAutoAdvanceOutput,
        handler=cancel_auto_advance,
        annotations=_CHANGE,
        toolset=TOOLSET,
    ),
    Tool(
        name="send_message",
        title="Send message",
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
        title="Wait for message",
        description=(
            "Wait for the next message in your queue (priority, then time) for at most wait_seconds "
            "seconds (default 3600). Returns {message, timedOut}; on timedOut call it again. A message "
            "can reach you twice (after a crash or a dropped connection) with the same messageId "
            "(deliveryAttempt > 1): skip ids you have handled. To lose none, pass `ack` with the "
            "messageIds you finished processing on each call; once you have, a message not "
            "acknowledged within broker.ack_timeout_seconds (300 s by default) comes back to you."
        ),
        input_model=WaitForMessageInput,
        output_model=WaitForMessageOutput,
        handler=wait_for_message,
        annotations=_CHANGE,
        toolset=TOOLSET,
        long_running=True,
        wait_argument="wait_seconds",
    ),
    Tool(
        name="reply_message",
        title="Reply to message",
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
        title="Get message history",
        description=(
            "Past and queued messages between all agents (not only yours), newest first by page and in "
            "time order within a page; `issue` "
            "keeps those whose body.issue is that issue. A page holds up to `first` messages (default 50) "
            "and about 1 MB of bodies; a larger body is shown cut (bodyTruncated, bodyPreview). While "
            "`page_info.has_next_page` is true, call again with `after: page_info.end_cursor` for older "
            "messages."
        ),
        input_model=GetMessageHistoryInput,
        output_model=GetMessageHistoryOutput,
        handler=get_message_history,
        annotations=_MONITOR,
        toolset=TOOLSET,
    ),
    Tool(
        name="get_pipeline_status",
        title="Get broker pipeline status",
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
        title="Log activity",
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
        title="Get activity log",
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
        title="Request a human",
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
        title="Resume broker pipeline",
        description=(
            "PM only, on a person's word: HUMAN_NEEDED → PHASE_DEVELOPING (when it came from development "
            "or review) or IDLE; PAUSED → IDLE. Resuming means try again: an issue that reached the fail "
            "limit starts over at failCount 0, and a phase that reached the fix limit at fixCount 0."
        ),
        input_model=NoArguments,
        output_model=StateOutput,
        handler=resume,
        annotations=_CHANGE,
        toolset=TOOLSET,
    ),
    Tool(
        name="stop_pipeline",
        title="Stop broker pipeline",
        description=(
            "Stop the broker's phase pipeline for good (not a GitLab CI pipeline: cancel one with "
            "save_pipeline action cancel): any state → STOPPED, writes .stop-pipeline, wakes every "
            "waiting agent; later state-changing calls fail. Monitoring tools keep working."
        ),
        input_model=StopPipelineInput,
        output_model=StateOutput,
        handler=stop_pipeline,
        annotations=Annotations(read_only=False, destructive=True, idempotent=True, open_world=False),
        toolset=TOOLSET,
        confirms_when=lambda arguments: True,
    ),
]

# Each broker operation gets its own span under the request's when tracing is on.
TOOLS = [replace(tool, handler=broker_operation(tool.name, tool.handler)) for tool in TOOLS]
