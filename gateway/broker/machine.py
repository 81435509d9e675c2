"""The broker's state machine as a pure table: ``(state, event) → (state, effects)``. No I/O.

Source: ``docs/broker.md`` ("States", "The 18 tools"). The broker's operations
(``gateway.broker.phases``, ``plan``, ``control``, ``messages``) turn a tool call into an
:class:`Event` with the pure classifiers below (which look at counters and the phase plan); the
change unit (``gateway.broker.changes``) asks :func:`decide` for the :class:`Transition` and applies
its effects inside one transaction. A pair missing from :data:`TABLE` is refused: the call changes
nothing and the error names the states where the tool is allowed (:func:`allowed_states`).

Guards live in the events, not in the table: ``report_completion(pass)`` is ``PASS_NEXT`` or
``PASS_LAST`` depending on whether issues are left, so the table stays a flat literal that a test
can check exhaustively.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class State(StrEnum):
    """The pipeline's states (broker.md "States")."""

    IDLE = "IDLE"
    PHASE_PREPARING = "PHASE_PREPARING"
    PHASE_DEVELOPING = "PHASE_DEVELOPING"
    PHASE_REVIEWING = "PHASE_REVIEWING"
    COMPLETED = "COMPLETED"
    HUMAN_NEEDED = "HUMAN_NEEDED"
    PAUSED = "PAUSED"
    STOPPED = "STOPPED"


class Event(StrEnum):
    """What happened: a tool call with its guard already evaluated, or a timer step."""

    START_PHASE = "start_phase"
    BEGIN_DEVELOPING = "begin_developing"
    #: ``report_completion(pass)`` with ``todo`` issues left.
    PASS_NEXT = "report_completion:pass_next"  # noqa: S105 - not a secret
    #: ``report_completion(pass)`` on the last issue.
    PASS_LAST = "report_completion:pass_last"  # noqa: S105 - not a secret
    #: ``report_completion(fail)`` below the fail limit.
    FAIL = "report_completion:fail"
    #: ``report_completion(fail)`` that reaches the fail limit.
    FAIL_LIMIT = "report_completion:fail_limit"
    #: ``report_review(approved)``, a next phase, auto-advance enabled and a plan phase to start.
    APPROVED_ADVANCE = "report_review:approved_advance"
    #: ``report_review(approved)`` with a next phase the PM starts by hand.
    APPROVED_NEXT = "report_review:approved_next"
    #: ``report_review(approved)`` without a next phase.
    APPROVED_LAST = "report_review:approved_last"
    #: ``report_review(changes)`` below the fix limit.
    CHANGES = "report_review:changes"
    #: ``report_review(changes)`` that reaches the fix limit.
    CHANGES_LIMIT = "report_review:changes_limit"
    REQUEST_HUMAN = "request_human"
    #: ``resume`` from ``HUMAN_NEEDED`` entered from ``PHASE_DEVELOPING`` or ``PHASE_REVIEWING``.
    RESUME_PHASE = "resume:phase"
    #: ``resume`` from ``PAUSED``, or from ``HUMAN_NEEDED`` entered from any other state.
    RESUME_IDLE = "resume:idle"
    CANCEL_AUTO_ADVANCE = "cancel_auto_advance"
    STOP = "stop_pipeline"
    #: An operator starts over after a stop (the console or ``broker reset``): the stopped
    #: pipeline is archived and a new one starts in IDLE. Not a tool: agents cannot do it.
    START_OVER = "start_over"
    #: Timer: the cooldown ended; every agent is sent a reset message.
    AUTO_ADVANCE_RESET = "auto_advance:session_reset"
    #: Timer: the session reset ended; the plan's next phase starts as ``start_phase`` would.
    AUTO_ADVANCE_START = "auto_advance:start_phase"
    # Calls that change stored data (plan, queues) but not the state: refused only in STOPPED.
    SET_PHASE_PLAN = "set_phase_plan"
    SET_AUTO_ADVANCE = "set_auto_advance"
    SEND_MESSAGE = "send_message"
    REPLY_MESSAGE = "reply_message"
    WAIT_FOR_MESSAGE = "wait_for_message"


class Effect(StrEnum):
    """What the service does, inside the same transaction, when a transition is taken."""

    #: Store the phase number and its issues, all ``todo`` with fail count 0; fix count 0.
    INIT_PHASE = "init_phase"
    #: Drop an auto-advance under way without a trace (superseded by a manual start or a stop).
    CLEAR_AUTO_ADVANCE = "clear_auto_advance"
    #: Put the first issue in progress.
    FIRST_IN_PROGRESS = "first_in_progress"
    #: Mark the reported issue ``done`` and the next ``todo`` one ``in_progress``.
    MARK_DONE_NEXT = "mark_done_next"
    #: Mark the reported (last) issue ``done``.
    MARK_DONE = "mark_done"
    #: Raise the reported issue's fail count by one.
    RAISE_FAIL = "raise_fail"
    #: Add the phase to the plan's completed phases.
    COMPLETE_PHASE = "complete_phase"
    #: Store the cooldown stage and its deadline; the timer takes it from there.
    SCHEDULE_AUTO_ADVANCE = "schedule_auto_advance"
    #: Raise the phase's fix count by one.
    RAISE_FIX = "raise_fix"
    #: Every issue back to ``todo``, the first ``in_progress``; fail counts kept.
    REOPEN_ISSUES = "reopen_issues"
    #: Reopen the issues only when none is left to do (resume into development after a review).
    REOPEN_IF_ALL_DONE = "reopen_if_all_done"
    #: Remember the state HUMAN_NEEDED was entered from (kept when already HUMAN_NEEDED).
    REMEMBER_ORIGIN = "remember_origin"
    #: A high-priority ``human_needed`` message to every connected agent, the caller included.
    NOTIFY_HUMAN_NEEDED = "notify_human_needed"
    #: A high-priority ``resumed`` message to every connected agent, the caller included.
    NOTIFY_RESUMED = "notify_resumed"
    #: Every issue at the fail limit back to fail count 0, and the phase's fix count back to 0 at
    #: the fix limit (a person resuming means "try again").
    RESET_REACHED_LIMITS = "reset_reached_limits"
    #: A high-priority ``auto_advance_cancelled`` message to every agent (the pipeline is PAUSED).
    NOTIFY_AUTO_ADVANCE_CANCELLED = "notify_auto_advance_cancelled"
    #: Store the ``session_reset`` stage and its deadline; a high-priority ``session_reset``
    #: message to every agent.
    SESSION_RESET = "session_reset"
    #: A high-priority ``phase_started`` message to every agent (auto-advance started a phase).
    NOTIFY_PHASE_STARTED = "notify_phase_started"
    #: Write ``<state_dir>/.stop-pipeline`` and wake every waiting agent.
    STOP = "stop"


@dataclass(frozen=True)
class Transition:
    """The outcome of an allowed event: the next state and the effects to apply, in order."""

    target: State
    effects: tuple[Effect, ...] = ()


def _every(
    states: tuple[State, ...], event: Event, effects: tuple[Effect, ...] = ()
) -> dict[tuple[State, Event], Transition]:
    """The same event allowed in each of ``states`` without changing the state."""
    return {(s, event): Transition(s, effects) for s in states}


_S = State
_E = Event
_F = Effect
_NOT_STOPPED = tuple(s for s in State if s is not State.STOPPED)

#: Every allowed (state, event) pair. Anything else is refused.
TABLE: dict[tuple[State, Event], Transition] = {
    (_S.IDLE, _E.START_PHASE): Transition(_S.PHASE_PREPARING, (_F.CLEAR_AUTO_ADVANCE, _F.INIT_PHASE)),
    (_S.PHASE_PREPARING, _E.BEGIN_DEVELOPING): Transition(_S.PHASE_DEVELOPING, (_F.FIRST_IN_PROGRESS,)),
    (_S.PHASE_DEVELOPING, _E.PASS_NEXT): Transition(_S.PHASE_DEVELOPING, (_F.MARK_DONE_NEXT,)),
    (_S.PHASE_DEVELOPING, _E.PASS_LAST): Transition(_S.PHASE_REVIEWING, (_F.MARK_DONE,)),
    (_S.PHASE_DEVELOPING, _E.FAIL): Transition(_S.PHASE_DEVELOPING, (_F.RAISE_FAIL,)),
    (_S.PHASE_DEVELOPING, _E.FAIL_LIMIT): Transition(
        _S.HUMAN_NEEDED, (_F.RAISE_FAIL, _F.REMEMBER_ORIGIN, _F.NOTIFY_HUMAN_NEEDED)
    ),
    (_S.PHASE_REVIEWING, _E.APPROVED_ADVANCE): Transition(
        _S.IDLE, (_F.COMPLETE_PHASE, _F.SCHEDULE_AUTO_ADVANCE)
    ),
    (_S.PHASE_REVIEWING, _E.APPROVED_NEXT): Transition(_S.IDLE, (_F.COMPLETE_PHASE,)),
    (_S.PHASE_REVIEWING, _E.APPROVED_LAST): Transition(_S.COMPLETED, (_F.COMPLETE_PHASE,)),
    (_S.PHASE_REVIEWING, _E.CHANGES): Transition(_S.PHASE_DEVELOPING, (_F.RAISE_FIX, _F.REOPEN_ISSUES)),
    (_S.PHASE_REVIEWING, _E.CHANGES_LIMIT): Transition(
        _S.HUMAN_NEEDED, (_F.RAISE_FIX, _F.REOPEN_ISSUES, _F.REMEMBER_ORIGIN, _F.NOTIFY_HUMAN_NEEDED)
    ),
    **{
        (s, _E.REQUEST_HUMAN): Transition(
            _S.HUMAN_NEEDED, (_F.CLEAR_AUTO_ADVANCE, _F.REMEMBER_ORIGIN, _F.NOTIFY_HUMAN_NEEDED)
        )
        for s in _NOT_STOPPED
    },
    (_S.HUMAN_NEEDED, _E.RESUME_PHASE): Transition(
        _S.PHASE_DEVELOPING, (_F.REOPEN_IF_ALL_DONE, _F.RESET_REACHED_LIMITS, _F.NOTIFY_RESUMED)
    ),
    (_S.HUMAN_NEEDED, _E.RESUME_IDLE): Transition(_S.IDLE, (_F.NOTIFY_RESUMED,)),
    (_S.PAUSED, _E.RESUME_IDLE): Transition(_S.IDLE, (_F.NOTIFY_RESUMED,)),
    # An auto-advance is only ever under way in IDLE (it is scheduled by a transition to IDLE and
    # cleared by every transition out of it); ``cancel_auto_advance`` checks that one is under way.
    (_S.IDLE, _E.CANCEL_AUTO_ADVANCE): Transition(
        _S.PAUSED, (_F.NOTIFY_AUTO_ADVANCE_CANCELLED, _F.CLEAR_AUTO_ADVANCE)
    ),
    (_S.IDLE, _E.AUTO_ADVANCE_RESET): Transition(_S.IDLE, (_F.SESSION_RESET,)),
    (_S.IDLE, _E.AUTO_ADVANCE_START): Transition(
        _S.PHASE_PREPARING, (_F.CLEAR_AUTO_ADVANCE, _F.INIT_PHASE, _F.NOTIFY_PHASE_STARTED)
    ),
    # stop_pipeline: any state, STOPPED included (a second stop changes nothing and succeeds).
    **{(s, _E.STOP): Transition(_S.STOPPED, (_F.CLEAR_AUTO_ADVANCE, _F.STOP)) for s in State},
    # Only a person starts over, and only once the pipeline is stopped (gateway.broker.operator
    # archives the stopped pipeline in the same transaction).
    (_S.STOPPED, _E.START_OVER): Transition(_S.IDLE),
    **_every(_NOT_STOPPED, _E.SET_PHASE_PLAN),
    **_every(_NOT_STOPPED, _E.SET_AUTO_ADVANCE),
    **_every(_NOT_STOPPED, _E.SEND_MESSAGE),
    **_every(_NOT_STOPPED, _E.REPLY_MESSAGE),
    **_every(_NOT_STOPPED, _E.WAIT_FOR_MESSAGE),
}

#: The events each state-changing tool can turn into (monitoring tools are not in the table).
TOOL_EVENTS: dict[str, tuple[Event, ...]] = {
    "start_phase": (_E.START_PHASE,),
    "begin_developing": (_E.BEGIN_DEVELOPING,),
    "report_completion": (_E.PASS_NEXT, _E.PASS_LAST, _E.FAIL, _E.FAIL_LIMIT),
    "report_review": (_E.APPROVED_ADVANCE, _E.APPROVED_NEXT, _E.APPROVED_LAST, _E.CHANGES, _E.CHANGES_LIMIT),
    "request_human": (_E.REQUEST_HUMAN,),
    "resume": (_E.RESUME_PHASE, _E.RESUME_IDLE),
    "cancel_auto_advance": (_E.CANCEL_AUTO_ADVANCE,),
    "stop_pipeline": (_E.STOP,),
    "set_phase_plan": (_E.SET_PHASE_PLAN,),
    "set_auto_advance": (_E.SET_AUTO_ADVANCE,),
    "send_message": (_E.SEND_MESSAGE,),
    "reply_message": (_E.REPLY_MESSAGE,),
    "wait_for_message": (_E.WAIT_FOR_MESSAGE,),
}

#: Tools that never change state and are allowed in every state, STOPPED included.
MONITORING_TOOLS: tuple[str, ...] = (
    "get_pipeline_status",
    "log_activity",
    "get_activity_log",
    "get_phase_plan",
    "get_message_history",
)


class Refused(Exception):
    """``event`` is not allowed in ``state``.

    Attributes:
        state: the current state.
        event: the refused event.
        allowed: the states where the event's tool is allowed, in :class:`State` order.
    """

    def __init__(self, state: State, event: Event, allowed: tuple[State, ...]) -> None:
        super().__init__(f"{event} is not allowed in {state}")
        self.state = state
        self.event = event
        self.allowed = allowed


def tool_of(event: Event) -> str:
    """The tool (or ``auto_advance`` timer) an event comes from: ``"report_completion"``."""
    return str(event.value).split(":", 1)[0]


def allowed_states(tool: str) -> tuple[State, ...]:
    """The states where ``tool`` can be called (every state for monitoring tools).

    Raises:
        KeyError: ``tool`` is not a broker tool.
    """
    if tool in MONITORING_TOOLS:
        return tuple(State)
    events = TOOL_EVENTS[tool]
    return tuple(s for s in State if any((s, e) in TABLE for e in events))


def decide(state: State, event: Event) -> Transition:
    """The transition for ``event`` in ``state``.

    Raises:
        Refused: the pair is not in :data:`TABLE`; nothing may change.
    """
    transition = TABLE.get((state, event))
    if transition is None:
        tool = tool_of(event)
        allowed = (
            allowed_states(tool) if tool in TOOL_EVENTS else tuple(s for s in State if (s, event) in TABLE)
        )
        raise Refused(state, event, allowed)
    return transition


# ---- guards: pure classifiers from stored facts to events ------------------------------------


def completion_event(result: str, *, todo_left: int, fail_count_after: int, fail_limit: int) -> Event:
    """``report_completion``'s event.

    Args:
        result: ``pass`` or ``fail``.
        todo_left: issues still ``todo`` besides the reported one.
        fail_count_after: the issue's fail count once raised (a fail raises it first, then
            compares it with the limit: broker.md "Counters").
        fail_limit: ``broker.fail_limit`` (3 by default).
    """
    if result == "pass":
        return Event.PASS_NEXT if todo_left > 0 else Event.PASS_LAST
    return Event.FAIL_LIMIT if fail_count_after >= fail_limit else Event.FAIL


def review_event(
    result: str,
    *,
    has_next_phase: bool,
    auto_advance: bool,
    next_plan_phase: int | None,
    fix_count_after: int,
    fix_limit: int,
) -> Event:
    """``report_review``'s event.

    Args:
        result: ``approved`` or ``changes``.
        has_next_phase: the caller's ``hasNextPhase``, or whether the plan has a phase after the
            current one when omitted.
        auto_advance: auto-advance is enabled.
        next_plan_phase: the plan's phase to start next, or None (nothing to auto-start).
        fix_count_after: the phase's fix count once raised (raised first, then compared).
        fix_limit: ``broker.fix_limit`` (2 by default).
    """
    if result == "approved":
        if not has_next_phase:
            return Event.APPROVED_LAST
        if auto_advance and next_plan_phase is not None:
            return Event.APPROVED_ADVANCE
        return Event.APPROVED_NEXT
    return Event.CHANGES_LIMIT if fix_count_after >= fix_limit else Event.CHANGES


def resume_event(state: State, origin: State | None) -> Event:
    """``resume``'s event: back into the phase when HUMAN_NEEDED came from developing or reviewing."""
    if state is State.HUMAN_NEEDED and origin in (State.PHASE_DEVELOPING, State.PHASE_REVIEWING):
        return Event.RESUME_PHASE
    return Event.RESUME_IDLE
