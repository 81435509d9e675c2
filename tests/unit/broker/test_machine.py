"""The transition table, exhaustively: every (state, event) pair is allowed with the expected
target, or refused naming the states where its tool is allowed (docs/broker.md)."""

from __future__ import annotations

import itertools

import pytest

from gateway.broker.machine import (
    MONITORING_TOOLS,
    TABLE,
    TOOL_EVENTS,
    Effect,
    Event,
    Refused,
    State,
    allowed_states,
    completion_event,
    decide,
    resume_event,
    review_event,
)

S, E = State, Event
ALL = tuple(State)
NOT_STOPPED = tuple(s for s in State if s is not S.STOPPED)

# Written from broker.md independently of the table: event → {state: target}.
EXPECTED: dict[Event, dict[State, State]] = {
    E.START_PHASE: {S.IDLE: S.PHASE_PREPARING},
    E.BEGIN_DEVELOPING: {S.PHASE_PREPARING: S.PHASE_DEVELOPING},
    E.PASS_NEXT: {S.PHASE_DEVELOPING: S.PHASE_DEVELOPING},
    E.PASS_LAST: {S.PHASE_DEVELOPING: S.PHASE_REVIEWING},
    E.FAIL: {S.PHASE_DEVELOPING: S.PHASE_DEVELOPING},
    E.FAIL_LIMIT: {S.PHASE_DEVELOPING: S.HUMAN_NEEDED},
    E.APPROVED_ADVANCE: {S.PHASE_REVIEWING: S.IDLE},
    E.APPROVED_NEXT: {S.PHASE_REVIEWING: S.IDLE},
    E.APPROVED_LAST: {S.PHASE_REVIEWING: S.COMPLETED},
    E.CHANGES: {S.PHASE_REVIEWING: S.PHASE_DEVELOPING},
    E.CHANGES_LIMIT: {S.PHASE_REVIEWING: S.HUMAN_NEEDED},
    E.REQUEST_HUMAN: {s: S.HUMAN_NEEDED for s in NOT_STOPPED},
    E.RESUME_PHASE: {S.HUMAN_NEEDED: S.PHASE_DEVELOPING},
    E.RESUME_IDLE: {S.HUMAN_NEEDED: S.IDLE, S.PAUSED: S.IDLE},
    E.CANCEL_AUTO_ADVANCE: {S.IDLE: S.PAUSED},
    E.STOP: {s: S.STOPPED for s in ALL},
    E.START_OVER: {S.STOPPED: S.IDLE},
    E.AUTO_ADVANCE_RESET: {S.IDLE: S.IDLE},
    E.AUTO_ADVANCE_START: {S.IDLE: S.PHASE_PREPARING},
    E.SET_PHASE_PLAN: {s: s for s in NOT_STOPPED},
    E.SET_AUTO_ADVANCE: {s: s for s in NOT_STOPPED},
    E.SEND_MESSAGE: {s: s for s in NOT_STOPPED},
    E.REPLY_MESSAGE: {s: s for s in NOT_STOPPED},
    E.WAIT_FOR_MESSAGE: {s: s for s in NOT_STOPPED},
}


def test_every_event_has_an_expectation() -> None:
    assert set(EXPECTED) == set(Event)


@pytest.mark.parametrize(
    ("state", "event"), list(itertools.product(State, Event)), ids=lambda v: str(v.value)
)
def test_every_pair(state: State, event: Event) -> None:
    target = EXPECTED[event].get(state)
    if target is None:
        with pytest.raises(Refused) as info:
            decide(state, event)
        assert info.value.state is state
        # resume in PAUSED is allowed, but resume_event never makes RESUME_PHASE there.
        if (state, event) != (S.PAUSED, E.RESUME_PHASE):
            assert state not in info.value.allowed
        assert info.value.allowed  # the error can always say where the call is allowed
    else:
        assert decide(state, event).target is target


def test_table_has_nothing_unexpected() -> None:
    expected_pairs = {(s, e) for e, m in EXPECTED.items() for s in m}
    assert set(TABLE) == expected_pairs


ALLOWED_BY_TOOL = {
    "start_phase": (S.IDLE,),
    "begin_developing": (S.PHASE_PREPARING,),
    "report_completion": (S.PHASE_DEVELOPING,),
    "report_review": (S.PHASE_REVIEWING,),
    "request_human": NOT_STOPPED,
    "resume": (S.HUMAN_NEEDED, S.PAUSED),
    "cancel_auto_advance": (S.IDLE,),
    "stop_pipeline": ALL,
    "set_phase_plan": NOT_STOPPED,
    "set_auto_advance": NOT_STOPPED,
    "send_message": NOT_STOPPED,
    "reply_message": NOT_STOPPED,
    "wait_for_message": NOT_STOPPED,
    **{tool: ALL for tool in MONITORING_TOOLS},
}


def test_allowed_states_per_tool() -> None:
    assert len(ALLOWED_BY_TOOL) == 18
    for tool, states in ALLOWED_BY_TOOL.items():
        assert set(allowed_states(tool)) == set(states), tool


def test_every_tool_event_belongs_to_one_tool() -> None:
    events = [e for evs in TOOL_EVENTS.values() for e in evs]
    assert len(events) == len(set(events))


def test_effects_that_matter() -> None:
    assert Effect.NOTIFY_HUMAN_NEEDED in decide(S.PHASE_DEVELOPING, E.FAIL_LIMIT).effects
    assert Effect.NOTIFY_HUMAN_NEEDED in decide(S.PHASE_REVIEWING, E.CHANGES_LIMIT).effects
    assert Effect.REOPEN_ISSUES in decide(S.PHASE_REVIEWING, E.CHANGES).effects
    assert Effect.SCHEDULE_AUTO_ADVANCE in decide(S.PHASE_REVIEWING, E.APPROVED_ADVANCE).effects
    assert Effect.SCHEDULE_AUTO_ADVANCE not in decide(S.PHASE_REVIEWING, E.APPROVED_NEXT).effects
    # Every way out of IDLE drops an auto-advance under way (it only ever runs in IDLE).
    for (state, event), t in TABLE.items():
        if state is S.IDLE and t.target is not S.IDLE and event is not E.CANCEL_AUTO_ADVANCE:
            assert Effect.CLEAR_AUTO_ADVANCE in t.effects, event
    for state in ALL:
        assert Effect.STOP in decide(state, E.STOP).effects


def test_completion_guards() -> None:
    assert completion_event("pass", todo_left=2, fail_count_after=1, fail_limit=3) is E.PASS_NEXT
    assert completion_event("pass", todo_left=0, fail_count_after=1, fail_limit=3) is E.PASS_LAST
    assert completion_event("fail", todo_left=2, fail_count_after=2, fail_limit=3) is E.FAIL
    # raised first, then compared: the third fail reaches the limit
    assert completion_event("fail", todo_left=2, fail_count_after=3, fail_limit=3) is E.FAIL_LIMIT


def test_review_guards() -> None:
    kw = {"fix_count_after": 1, "fix_limit": 2}
    assert review_event("approved", has_next_phase=False, auto_advance=True, next_plan_phase=2, **kw) is (
        E.APPROVED_LAST
    )
    assert review_event("approved", has_next_phase=True, auto_advance=True, next_plan_phase=2, **kw) is (
        E.APPROVED_ADVANCE
    )
    assert review_event("approved", has_next_phase=True, auto_advance=False, next_plan_phase=2, **kw) is (
        E.APPROVED_NEXT
    )
    assert review_event("approved", has_next_phase=True, auto_advance=True, next_plan_phase=None, **kw) is (
        E.APPROVED_NEXT
    )
    assert (
        review_event(
            "changes",
            has_next_phase=True,
            auto_advance=True,
            next_plan_phase=2,
            fix_count_after=1,
            fix_limit=2,
        )
        is E.CHANGES
    )
    assert (
        review_event(
            "changes",
            has_next_phase=True,
            auto_advance=True,
            next_plan_phase=2,
            fix_count_after=2,
            fix_limit=2,
        )
        is E.CHANGES_LIMIT
    )


def test_resume_guard() -> None:
    assert resume_event(S.HUMAN_NEEDED, S.PHASE_DEVELOPING) is E.RESUME_PHASE
    assert resume_event(S.HUMAN_NEEDED, S.PHASE_REVIEWING) is E.RESUME_PHASE
    for origin in (S.IDLE, S.PHASE_PREPARING, S.COMPLETED, S.PAUSED, None):
        assert resume_event(S.HUMAN_NEEDED, origin) is E.RESUME_IDLE
    assert resume_event(S.PAUSED, None) is E.RESUME_IDLE
