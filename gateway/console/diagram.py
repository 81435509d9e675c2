"""The phase state machine as an inline SVG, drawn from the broker's own table
(``gateway.broker.machine.TABLE``), with the current state highlighted.

The edges are the table's: one arrow per (state, next state) pair, labelled with the tools that
take it. An event allowed from (nearly) every state, ``request_human`` and ``stop_pipeline``, is
drawn once, from an "any state" box, rather than as seven arrows. Only the boxes' places are
chosen here; a state added to the machine without a place is drawn in the bottom row, so the
drawing never drops one.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

from markupsafe import Markup, escape

from gateway.broker.machine import TABLE, Event, State, tool_of

WIDTH, HEIGHT = 980, 420
BOX_W, BOX_H = 170, 38
ANY = "any state"

#: Box centres, laid out so the phase cycle reads left to right.
PLACES: dict[str, tuple[float, float]] = {
    State.IDLE: (110, 170),
    State.PHASE_PREPARING: (350, 60),
    State.PHASE_DEVELOPING: (630, 60),
    State.PHASE_REVIEWING: (870, 170),
    State.COMPLETED: (870, 340),
    State.HUMAN_NEEDED: (630, 250),
    State.PAUSED: (110, 340),
    State.STOPPED: (350, 340),
    ANY: (630, 380),
}

#: How an event reads on its arrow (the tool's name, unless it is not a tool).
LABELS = {
    Event.AUTO_ADVANCE_START: "auto-advance",
    Event.START_OVER: "start over (person)",
}

#: An event allowed from at least this many states is drawn from the "any state" box.
BROADCAST_FROM = 5


def edges() -> dict[tuple[str, str], list[str]]:
    """``{(from, to): [labels]}`` from the machine's table; self-loops left out."""
    sources: dict[Event, set[State]] = defaultdict(set)
    for (state, event), t in TABLE.items():
        if t.target is not state:
            sources[event].add(state)
    out: dict[tuple[str, str], list[str]] = defaultdict(list)
    for (state, event), t in TABLE.items():
        if t.target is state:
            continue
        label = LABELS.get(event, tool_of(event))
        source = ANY if len(sources[event]) >= BROADCAST_FROM else state
        if source == ANY and source == t.target:
            continue
        if label not in out[(source, t.target)]:
            out[(source, t.target)].append(label)
    return dict(out)


def _place(name: str, index: int) -> tuple[float, float]:
    return PLACES.get(name, (110 + 150 * index, HEIGHT - 30))


def _border(cx: float, cy: float, dx: float, dy: float) -> tuple[float, float]:
    """Where the ray from a box's centre in direction (dx, dy) leaves the box."""
    scale = min(
        (BOX_W / 2) / abs(dx) if dx else math.inf,
        (BOX_H / 2) / abs(dy) if dy else math.inf,
    )
    return cx + dx * scale, cy + dy * scale


def _arrow(
    a: tuple[float, float], b: tuple[float, float], bend: float
) -> tuple[str, tuple[float, float], str]:
    """A quadratic curve from box ``a`` to box ``b`` bent by ``bend`` px: its path, its label's
    point and text anchor (beside the curve, on its outer side, so the labels of a pair of
    opposite arrows do not overlap)."""
    (ax, ay), (bx, by) = a, b
    dx, dy = bx - ax, by - ay
    length = math.hypot(dx, dy) or 1.0
    nx, ny = -dy / length, dx / length
    cx, cy = (ax + bx) / 2 + nx * bend, (ay + by) / 2 + ny * bend
    start = _border(ax, ay, cx - ax, cy - ay)
    end = _border(bx, by, cx - bx, cy - by)
    mid = (0.25 * start[0] + 0.5 * cx + 0.25 * end[0], 0.25 * start[1] + 0.5 * cy + 0.25 * end[1])
    path = f"M{start[0]:.1f},{start[1]:.1f} Q{cx:.1f},{cy:.1f} {end[0]:.1f},{end[1]:.1f}"
    side = 1.0 if bend >= 0 else -1.0
    anchor = "middle"
    if bend and abs(nx) > 0.5:  # a mostly vertical arrow: its label to the side it bends to
        anchor = "start" if nx * side > 0 else "end"
        mid = (mid[0] + 6 * nx * side, mid[1] + 4)
    return path, mid, anchor


def render(current: str | None, states: Iterable[str] = tuple(State)) -> Markup:
    """The SVG, ``current`` highlighted (``class="node current"``)."""
    names = [*states, ANY]
    places = {name: _place(name, i) for i, name in enumerate(names)}
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" class="machine" '
        'role="img" aria-labelledby="machine-title">',
        f'<title id="machine-title">Pipeline state machine; current state: {escape(current or "unknown")}'
        "</title>",
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" class="arrowhead"/></marker></defs>',
    ]
    pairs = edges()
    for (src, dst), labels in sorted(pairs.items()):
        reverse = (dst, src) in pairs
        bend = 28.0 if reverse else 0.0
        path, (lx, ly), anchor = _arrow(places[src], places[dst], bend)
        kind = "edge any" if src == ANY else "edge"
        parts.append(f'<path d="{path}" class="{kind}" marker-end="url(#arrow)"/>')
        parts.append(
            f'<text x="{lx:.1f}" y="{ly - 4:.1f}" class="edge-label" text-anchor="{anchor}">'
            f"{escape(', '.join(labels))}</text>"
        )
    for name in names:
        x, y = places[name]
        cls = "node any" if name == ANY else ("node current" if name == current else "node")
        parts.append(
            f'<g class="{cls}" data-state="{escape(name)}"><rect x="{x - BOX_W / 2:.1f}" '
            f'y="{y - BOX_H / 2:.1f}" width="{BOX_W}" height="{BOX_H}" rx="8"/>'
            f'<text x="{x:.1f}" y="{y + 5:.1f}" text-anchor="middle">{escape(name)}</text></g>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - every text in it went through escape()
