"""The state machine drawing is the broker's table: every state, every transition, the current
state highlighted, and nothing in it unescaped."""

from __future__ import annotations

import re

from gateway.broker.machine import TABLE, State
from gateway.console import diagram


def test_every_state_is_drawn_and_the_current_one_highlighted() -> None:
    svg = str(diagram.render("HUMAN_NEEDED"))
    drawn = re.findall(r'data-state="([A-Z_a-z ]+)"', svg)
    assert set(drawn) == {s.value for s in State} | {diagram.ANY}
    assert re.findall(r'class="node current" data-state="([A-Z_]+)"', svg) == ["HUMAN_NEEDED"]


def test_every_transition_of_the_table_is_an_arrow() -> None:
    edges = diagram.edges()
    for (state, event), t in TABLE.items():
        if t.target is state:
            continue
        assert (state, t.target) in edges or (diagram.ANY, t.target) in edges, (state, event)
    assert "start over (person)" in edges[(State.STOPPED, State.IDLE)]
    assert edges[(diagram.ANY, State.STOPPED)] == ["stop_pipeline"]
    svg = str(diagram.render("IDLE"))
    assert svg.count("marker-end=") == len(edges)


def test_the_state_name_is_escaped() -> None:
    assert "<b>" not in str(diagram.render("<b>"))
