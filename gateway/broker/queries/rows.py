"""The broker's rows as the statements return them, and how database rows become them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.broker.machine import State
from gateway.broker.schema import pipeline

#: How a change holds the pipeline row (``Queries.pipeline``).
RowLock = Literal["update", "share"] | None


@dataclass
class PipelineRow:
    """The single ``pipeline`` row. ``aa_deadline`` is Unix time (seconds)."""

    state: State
    phase: int | None
    fix_count: int
    auto_advance: bool
    aa_stage: str | None
    aa_deadline: float | None
    aa_next_phase: int | None
    human_origin: State | None
    human_reason: str | None
    human_by: str | None
    human_at: str | None
    stopped_by: str | None
    stopped_at: str | None
    #: Which pipeline this is: 1, then one more each time an operator starts over after a stop.
    generation: int = 1


@dataclass(frozen=True)
class ReplicaRow:
    """One running gateway's heartbeat (``replicas``); times are Unix seconds on its own clock."""

    id: str
    host: str
    pid: int
    version: str
    started: float
    last_seen: float
    #: Seconds between its heartbeats.
    every: float

    def gone(self, now: float, beats: int) -> bool:
        """No heartbeat for more than ``beats`` of its intervals at ``now``."""
        return now - self.last_seen > beats * self.every


@dataclass
class IssueRow:
    """One issue of the current phase."""

    id: str
    position: int
    status: str
    fail_count: int


@dataclass
class PlanRow:
    """The phase plan: ``phases`` is ``[{"phase": int, "issues": [str]}]`` in plan order."""

    plan_id: str
    phases: list[dict[str, Any]]
    cooldown_minutes: float
    completed_phases: list[int] = field(default_factory=list)


@dataclass
class MessageRow:
    """One message, queued (``delivered_at`` None) or delivered."""

    seq: int
    id: str
    sender: str
    recipient: str
    subject: str
    body: dict[str, Any]
    priority: int
    reply_to: str | None
    thread_id: str
    created_at: str
    delivered_at: str | None
    delivery_attempts: int
    lease_token: str | None = None
    #: The recipient acknowledges its messages (as its row said when the message was claimed).
    acknowledges: bool = False
    #: Another free message of the recipient was queued behind this one when it was claimed.
    more: bool = True
    #: When not ``more``: when the first lease of the recipient's other queued messages ends
    #: (Unix time), None when none is leased.
    next_lease_end: float | None = None


PIPELINE_COLUMNS = (
    pipeline.c.state,
    pipeline.c.phase,
    pipeline.c.fix_count,
    pipeline.c.auto_advance,
    pipeline.c.aa_stage,
    pipeline.c.aa_deadline,
    pipeline.c.aa_next_phase,
    pipeline.c.human_origin,
    pipeline.c.human_reason,
    pipeline.c.human_by,
    pipeline.c.human_at,
    pipeline.c.stopped_by,
    pipeline.c.stopped_at,
    pipeline.c.generation,
)


def message_row(r: Any) -> MessageRow:
    """A ``messages`` row (:data:`~gateway.broker.prepared.MESSAGE_COLUMNS`) as a :class:`MessageRow`."""
    return MessageRow(
        seq=r.seq,
        id=r.id,
        sender=r.sender,
        recipient=r.recipient,
        subject=r.subject,
        body=json.loads(r.body),
        priority=r.priority,
        reply_to=r.reply_to,
        thread_id=r.thread_id,
        created_at=r.created_at,
        delivered_at=r.delivered_at,
        delivery_attempts=r.delivery_attempts,
        lease_token=r.lease_token,
    )


def pipeline_row(r: Any) -> PipelineRow:
    """The ``pipeline`` row (:data:`PIPELINE_COLUMNS`) as a :class:`PipelineRow`."""
    return PipelineRow(
        state=State(r.state),
        phase=r.phase,
        fix_count=r.fix_count,
        auto_advance=bool(r.auto_advance),
        aa_stage=r.aa_stage,
        aa_deadline=r.aa_deadline,
        aa_next_phase=r.aa_next_phase,
        human_origin=State(r.human_origin) if r.human_origin else None,
        human_reason=r.human_reason,
        human_by=r.human_by,
        human_at=r.human_at,
        stopped_by=r.stopped_by,
        stopped_at=r.stopped_at,
        generation=r.generation,
    )


def issue_key(body: Mapping[str, Any]) -> str | None:
    """``body.issue`` as the history filter compares it (SQLite's ``CAST(json_extract(..) AS TEXT)``)."""
    value = body.get("issue")
    if value is None:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, str | int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
