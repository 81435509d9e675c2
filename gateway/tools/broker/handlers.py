"""The broker tools' handlers: each identifies the caller and passes its arguments to one
:class:`~gateway.broker.service.BrokerService` part's method, returning its answer as is (the registry
checks it against the tool's output model). Kept this thin so the broker can change underneath.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.errors import ToolError
from gateway.tools.broker.models import (
    GetActivityLogInput,
    GetMessageHistoryInput,
    LogActivityInput,
    NoArguments,
    ReasonInput,
    ReplyMessageInput,
    ReportCompletionInput,
    ReportReviewInput,
    SendMessageInput,
    SetAutoAdvanceInput,
    SetPhasePlanInput,
    StartPhaseInput,
    StopPipelineInput,
    WaitForMessageInput,
)
from gateway.tools.confirmations import confirmation
from gateway.tools.result import ToolResult

if TYPE_CHECKING:
    from gateway.broker.service import BrokerService
    from gateway.tools.context import ToolContext

#: The default wait (3600 s), cut to ``broker.max_wait_seconds`` when that is lower.
DEFAULT_WAIT_SECONDS = 3600.0


def _caller(ctx: ToolContext) -> tuple[BrokerService, str]:
    broker = ctx.services.broker
    if broker is None or not broker.store.is_open:
        raise ToolError(
            "upstream_error",
            "The phase broker is not available in this gateway right now (it is starting or shutting down). "
            "Reconnect in a moment and try again.",
        )
    return broker, broker.roster.authorize(ctx.agent_id, ctx.call.caller.claimed_agent_id)


async def start_phase(ctx: ToolContext, args: StartPhaseInput) -> dict[str, Any]:
    broker, agent = _caller(ctx)
    return await broker.phases.start_phase(agent, args.phase, list(args.issues))


async def begin_developing(ctx: ToolContext, args: NoArguments) -> dict[str, Any]:
    broker, agent = _caller(ctx)
    return await broker.phases.begin_developing(agent)


async def report_completion(ctx: ToolContext, args: ReportCompletionInput) -> dict[str, Any]:
    broker, agent = _caller(ctx)
    return await broker.phases.report_completion(agent, args.issue, args.result)


async def report_review(ctx: ToolContext, args: ReportReviewInput) -> dict[str, Any]:
    broker, agent = _caller(ctx)
    return await broker.phases.report_review(agent, args.result, args.pr_id, args.has_next_phase)


async def set_phase_plan(ctx: ToolContext, args: SetPhasePlanInput) -> dict[str, Any]:
    broker, agent = _caller(ctx)
    phases = [{"phase": p.phase, "issues": list(p.issues)} for p in args.phases]
    return await broker.plan.set_phase_plan(
        agent, args.plan_id, phases, args.auto_advance, args.cooldown_minutes
    )


async def get_phase_plan(ctx: ToolContext, args: NoArguments) -> dict[str, Any]:
    broker, _ = _caller(ctx)
    return await broker.plan.get_phase_plan()


async def set_auto_advance(ctx: ToolContext, args: SetAutoAdvanceInput) -> dict[str, Any]:
    broker, agent = _caller(ctx)
    return await broker.plan.set_auto_advance(agent, args.enabled)


async def cancel_auto_advance(ctx: ToolContext, args: ReasonInput) -> dict[str, Any]:
    broker, agent = _caller(ctx)
    return await broker.plan.cancel_auto_advance(agent, args.reason)


async def send_message(ctx: ToolContext, args: SendMessageInput) -> dict[str, Any]:
    broker, agent = _caller(ctx)
    return await broker.sending.send_message(agent, args.to, args.subject, args.body, args.priority)


async def reply_message(ctx: ToolContext, args: ReplyMessageInput) -> dict[str, Any]:
    broker, agent = _caller(ctx)
    return await broker.sending.send_message(
        agent, "", args.subject, args.body, args.priority, reply_to=args.reply_to
    )


async def wait_for_message(ctx: ToolContext, args: WaitForMessageInput) -> ToolResult:
    broker, agent = _caller(ctx)
    limit = broker.config.max_wait_seconds
    timeout = args.wait_seconds if args.wait_seconds is not None else min(DEFAULT_WAIT_SECONDS, limit)
    if timeout > limit:
        raise ToolError(
            "bad_request",
            f"`wait_seconds`: {timeout:g} s is longer than the longest wait this gateway allows "
            f"({limit:g} s, broker.max_wait_seconds). Pass at most {limit:g} and call wait_for_message "
            "again when it times out.",
            invalid_arguments=["wait_seconds"],
        )
    progress = ctx.progress if ctx.call.has_progress_token else None
    outcome = await broker.delivery.wait_for_message(agent, timeout, progress, ack=args.ack)
    structured: dict[str, Any] = {
        "message": outcome.message,
        "timedOut": outcome.timed_out,
        "waitedSeconds": round(outcome.waited_seconds, 3),
    }
    text: str | None = None
    if outcome.shutdown:
        structured.update(shutdown=True, reason=outcome.reason)
        text = (
            "The gateway is shutting down. No message was taken from your queue: "
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
        structured=structured,
        text=text,
        on_delivered=outcome.on_delivered,
        on_abandoned=outcome.on_abandoned,
        read_check_seconds=outcome.read_check_seconds,
    )


async def get_message_history(ctx: ToolContext, args: GetMessageHistoryInput) -> dict[str, Any]:
    broker, _ = _caller(ctx)
    return await broker.history.message_history(args.issue, args.first, args.after)


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
    return await broker.control.request_human(agent, args.reason)


async def resume(ctx: ToolContext, args: NoArguments) -> dict[str, Any]:
    broker, agent = _caller(ctx)
    return await broker.control.resume(agent)


async def stop_pipeline(ctx: ToolContext, args: StopPipelineInput) -> dict[str, Any]:
    broker, agent = _caller(ctx)
    async with confirmation(
        ctx,
        tool="stop_pipeline",
        question=(
            f"Agent {agent} asks to stop the broker's phase pipeline for good: every phase "
            "ends as STOPPED, waiting agents are woken and later state-changing calls fail. Stop it?"
        ),
        declined="the broker's pipeline was not stopped.",
        why=args.reason,
    ):
        return await broker.control.stop_pipeline(agent)
