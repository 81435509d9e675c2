"""The broker tools' argument and result models: each input model is a tool's ``inputSchema``, each
output model its ``outputSchema``, and the registry checks every result against it.

Arguments are snake_case, as every GitLab tool's are; the camelCase names of earlier releases
(``planId``, ``replyTo``, ...) are still accepted (``argument_aliases``). Results keep the broker
contract's camelCase field names (``messageId``, ``issueCount``).
"""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StringConstraints, field_validator

from gateway.tools.pagination import Cursor, PageInfo, after_field
from gateway.tools.registry import ToolInput, ToolOutput

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


class _In(ToolInput):
    """Broker arguments are taken as their JSON type only: ``true`` is no phase number and ``"off"``
    no boolean (the lax conversions would start phase 1 or turn auto-advance on)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class NoArguments(_In):
    """No arguments."""


class StartPhaseInput(_In):
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


class ReportCompletionInput(_In):
    issue: IssueId = Field(description="The issue in progress, e.g. JOP-240")
    result: Literal["pass", "fail"] = Field(description="pass: the issue is done; fail: it failed this time")


class ReportReviewInput(_In):
    argument_aliases = {"prId": "pr_id", "hasNextPhase": "has_next_phase"}

    result: Literal["approved", "changes"] = Field(description="approved, or changes to send the phase back")
    pr_id: str | None = Field(None, max_length=200, description="The pull/merge request reviewed, e.g. PR #4")
    has_next_phase: bool | None = Field(
        None,
        description="Whether a phase follows; omitted: true when the phase plan has a phase after this one",
    )


class PlanPhase(_In):
    phase: int = Field(ge=0, le=1_000_000, description="Phase number")
    issues: list[IssueId] = Field(
        min_length=1, max_length=500, description="Issue ids of the phase, in order"
    )


class SetPhasePlanInput(_In):
    argument_aliases = {
        "planId": "plan_id",
        "autoAdvance": "auto_advance",
        "cooldownMinutes": "cooldown_minutes",
    }

    plan_id: str = Field(
        min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$", description='Plan id, e.g. "jope-core"'
    )
    phases: list[PlanPhase] = Field(
        min_length=1, max_length=200, description="The phases in the order they run"
    )
    auto_advance: bool = Field(False, description="Start the next phase by itself after an approved review")
    cooldown_minutes: float = Field(
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


class SetAutoAdvanceInput(_In):
    enabled: bool = Field(description="true: start the next planned phase by itself after an approval")


class ReasonInput(_In):
    reason: Text = Field(description="Why, in a sentence a person will read")


class StopPipelineInput(_In):
    reason: Text | None = Field(
        None, description="Why, in a sentence a person will read: shown to whoever is asked to confirm"
    )


class SendMessageInput(_In):
    to: str = Field(max_length=64, description="Recipient agent id: pm, dev or reviewer")
    subject: Subject = Field(description='Message type, e.g. "develop"')
    body: dict[str, Any] = Field(description='A JSON object, e.g. {"issue": "JOP-240", "phase": 2}')
    priority: Priority = Field("normal", description="high, normal or low; higher is delivered first")


class ReplyMessageInput(_In):
    argument_aliases = {"replyTo": "reply_to"}

    reply_to: str = Field(min_length=1, max_length=64, description="messageId of the message answered")
    subject: Subject = Field(description='Reply type, e.g. "done"')
    body: dict[str, Any] = Field(description="A JSON object")
    priority: Priority = Field("normal", description="high, normal or low")


class WaitForMessageInput(_In):
    argument_aliases = {"timeout_sec": "wait_seconds"}

    wait_seconds: float | None = Field(
        None,
        ge=0,
        description="Most seconds to wait (default 3600, at most broker.max_wait_seconds); 0 only looks",
    )
    ack: list[Annotated[str, StringConstraints(min_length=1, max_length=255)]] | None = Field(
        None,
        max_length=1000,
        description="messageIds you have finished processing. Once you send `ack` (even []), a message "
        "not acknowledged in time is delivered again (same messageId, higher deliveryAttempt)",
    )


class GetMessageHistoryInput(_In):
    argument_aliases = {"limit": "first"}

    issue: str | None = Field(
        None, max_length=255, description="Only messages whose body.issue is this issue id"
    )
    first: int = Field(
        50,
        ge=1,
        le=1000,
        description="At most this many messages per page (default 50, max 1000); a page also ends "
        "at about 1 MB of bodies",
    )
    after: Cursor = after_field("older messages")


class LogActivityInput(_In):
    message: Text = Field(description="One line for your activity log")


class GetActivityLogInput(_In):
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
    messageId: str = Field(description="The message's id; a redelivery keeps it, so skip ids you handled")
    from_: str = Field(
        alias="from", description="The sender: an agent id, or broker for the broker's notices"
    )
    to: str = Field(description="The recipient's agent id")
    subject: str = Field(description="The message type the sender chose, e.g. develop")
    body: dict[str, Any] = Field(description="The JSON object the sender sent")
    priority: Priority = Field(description="high, normal or low; higher is delivered first")
    replyTo: str | None = Field(description="The messageId this message answers; null for a new thread")
    threadId: str = Field(description="The conversation: the messageId of its first message")
    createdAt: str = Field(description="When it was sent, ISO 8601 UTC (2026-04-11T01:10:00Z)")
    deliveryAttempt: int = Field(
        description="1 on the first hand-out; more means it may have reached you before"
    )
    delivered: bool = Field(
        description="True once its recipient has received it; false while it is queued or being handed "
        "out (so always false in the wait_for_message answer that hands it to you)"
    )


class WaitForMessageOutput(_Out):
    message: Message | None
    timedOut: bool
    stopped: bool | None = None
    shutdown: bool | None = None
    reason: str | None = None
    waitedSeconds: float | None = None


class HistoryMessage(Message):
    body: dict[str, Any] | None = Field(description="The body; null when bodyTruncated")  # type: ignore[assignment]
    bodyTruncated: bool = Field(description="True when the body was too large to show whole here")
    bodyPreview: str | None = Field(description="When bodyTruncated: the start of the body's JSON text")


class GetMessageHistoryOutput(_Out):
    messages: list[HistoryMessage]
    page_info: PageInfo


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
