"""What the console shows, read through the broker's own read side, and its HTML sections.

:func:`snapshot` gathers one view of the broker (``get_pipeline_status``, ``get_phase_plan``,
``get_message_history``, ``get_activity_log``, the generations); :class:`Renderer` turns it into
the page's sections with Jinja2 templates (``templates/``), autoescaped: nothing from a message,
a log line or a reason is ever markup. The page and the live updates (``events``) use the same
sections, so what a live update shows is exactly what a reload would.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import jinja2
from markupsafe import Markup

from gateway.broker.activity_log import PIPELINE_LOG
from gateway.broker.formats import answer_state, human_duration, seconds_since
from gateway.broker.machine import State
from gateway.console import diagram

if TYPE_CHECKING:
    from gateway.broker.service import BrokerService
    from gateway.config import ConsoleSettings

#: The page's live sections, in page order; each is an element ``id`` the script refills.
SECTIONS = ("banner", "confirmations", "machine", "plan", "agents", "controls", "threads", "logs")

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("gateway.console", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


@dataclass
class Snapshot:
    """One reading of the broker for the page."""

    status: dict[str, Any]
    plan: dict[str, Any]
    generations: dict[str, Any]
    history: dict[str, Any]
    logs: dict[str, list[str]]
    waiting: dict[str, bool] = field(default_factory=dict)
    #: What the gateway's last check of GitLab found (``/readyz``'s ``gitlab``), None before one.
    gitlab: dict[str, Any] | None = None
    #: Unix time of this reading (the agents' "seen ... ago").
    now: float = 0.0
    #: Destructive actions waiting for an operator (``confirm_by = "operator"``), oldest first.
    confirmations: list[dict[str, Any]] = field(default_factory=list)


async def snapshot(
    broker: BrokerService,
    console: ConsoleSettings,
    before: str | None,
    gitlab: dict[str, Any] | None = None,
) -> Snapshot:
    """Read everything the page shows. ``before``: the threads page's cursor (None: the newest);
    ``gitlab``: what the gateway's last check of GitLab found.

    Raises:
        BrokerError: a cursor the history did not hand out (``bad_request``), the database down.
    """
    status = await broker.monitoring.status(replicas=True)
    plan = await broker.plan.get_phase_plan()
    generations = await broker.operator.generations()
    history = await broker.history.message_history(None, console.page_messages, before)
    logs = {}
    for name in (*broker.roster.agents, PIPELINE_LOG):
        logs[name] = (await broker.monitoring.activity_log(name, console.log_lines))["lines"]
    waiting = {a: broker.wakeups.waiting(a) for a in broker.roster.agents}
    pending = (await broker.operator.pending_confirmations())["pending"]
    return Snapshot(status, plan, generations, history, logs, waiting, gitlab, time.time(), pending)


def phase_rows(snap: Snapshot) -> list[dict[str, Any]]:
    """The plan's phases with their progress: ``{phase, issues, todo, inProgress, done, fails,
    fixCount, current, completed}``; the current phase is shown even without a plan."""
    status, plan = snap.status, snap.plan
    current = status.get("phase")
    completed = set(plan.get("completedPhases") or [])
    phases = list(plan.get("phases") or [])
    if current is not None and all(p.get("phase") != current for p in phases):
        phases.append({"phase": current, "issues": list(status["issues"])})
    rows = []
    for p in phases:
        number = p.get("phase")
        ids = [str(i) for i in p.get("issues", [])]
        if number == current:
            issues = status["issues"]
            counts = {
                s: sum(1 for i in issues.values() if i["status"] == s)
                for s in ("todo", "in_progress", "done")
            }
            fails = sum(i["failCount"] for i in issues.values())
            fix = status.get("fixCount", 0)
            detail = [{"id": k, **v} for k, v in issues.items()]
        else:
            done = number in completed
            counts = {"todo": 0 if done else len(ids), "in_progress": 0, "done": len(ids) if done else 0}
            fails, fix = 0, 0
            detail = [{"id": i, "status": "done" if done else "todo", "failCount": 0} for i in ids]
        rows.append(
            {
                "phase": number,
                "todo": counts["todo"],
                "inProgress": counts["in_progress"],
                "done": counts["done"],
                "total": sum(counts.values()),
                "fails": fails,
                "fixCount": fix,
                "current": number == current,
                "completed": number in completed,
                "issues": detail,
            }
        )
    return rows


def threads(history: dict[str, Any], collapse_chars: int) -> list[dict[str, Any]]:
    """The page's messages as threads grouped by issue: ``[{issue, threads: [{threadId, subject,
    messages: [{..., depth, bodyText, collapsed}]}]}]``, the busiest issue (newest message) first.

    A message's depth follows ``replyTo`` within the page (a reply's parent on an older page
    counts as the thread's root).
    """
    by_thread: dict[str, list[dict[str, Any]]] = {}
    for m in history["messages"]:
        by_thread.setdefault(m["threadId"], []).append(m)
    depth_of: dict[str, int] = {}
    groups: dict[str, list[dict[str, Any]]] = {}
    for thread_id, messages in by_thread.items():
        shown = []
        for m in messages:
            parent = m.get("replyTo")
            depth = depth_of[parent] + 1 if parent in depth_of else (1 if parent else 0)
            depth_of[m["messageId"]] = depth
            shown.append({**m, "depth": min(depth, 6), **_body(m, collapse_chars)})
        root_body = messages[0].get("body") or {}
        issue = root_body.get("issue") if isinstance(root_body, dict) else None
        key = str(issue) if issue is not None else ""
        groups.setdefault(key, []).append(
            {"threadId": thread_id, "subject": messages[0]["subject"], "messages": shown}
        )
    for group in groups.values():
        group.sort(key=lambda t: t["messages"][-1]["createdAt"], reverse=True)
    # Newest activity first: the newest message of each group decides.
    keys = sorted(groups, key=lambda k: groups[k][0]["messages"][-1]["createdAt"], reverse=True)
    return [{"issue": k or None, "threads": groups[k]} for k in keys]


def _body(m: dict[str, Any], collapse_chars: int) -> dict[str, Any]:
    if m.get("bodyTruncated"):
        text = str(m.get("bodyPreview") or "") + "\n… (cut: larger than broker.history_item_bytes)"
    else:
        text = json.dumps(m.get("body"), indent=2, ensure_ascii=False)
    collapsed = len(text) > collapse_chars
    first = text.replace("\n", " ")
    return {
        "bodyText": text,
        "collapsed": collapsed,
        "bodySummary": first[:120] + "…",
        "bodyChars": len(text),
    }


class Renderer:
    """The page and its sections, for one viewer's role.

    Args:
        console: the ``console`` settings.
    """

    def __init__(self, console: ConsoleSettings) -> None:
        self._console = console

    def context(self, snap: Snapshot, *, can_act: bool, csrf: str, before: str | None) -> dict[str, Any]:
        """The templates' variables."""
        status = snap.status
        ages = {name: seconds_since(a["lastSeen"], snap.now) for name, a in status["agents"].items()}
        answered = status.get("humanNeeded", {}).get("answered")
        return {
            "s": status,
            "seen_ago": {name: None if age is None else human_duration(age) for name, age in ages.items()},
            "answered": answered,
            "answer_state": answer_state(answered) if answered else None,
            "gitlab": snap.gitlab,
            "state": status["state"],
            "generation": snap.generations["generation"],
            "archives": snap.generations["archives"],
            "phases": phase_rows(snap),
            "plan": snap.plan,
            "groups": threads(snap.history, self._console.collapse_body_chars),
            "page_info": snap.history["page_info"],
            "before": before,
            "logs": snap.logs,
            "waiting": snap.waiting,
            "confirmations": snap.confirmations,
            "can_act": can_act,
            "csrf": csrf,
            "svg": diagram.render(status["state"]),
            "stopped": status["state"] == State.STOPPED.value,
        }

    def sections(self, ctx: dict[str, Any]) -> dict[str, str]:
        """Every live section's inner HTML."""
        return {name: _ENV.get_template(f"_{name}.html").render(ctx) for name in SECTIONS}

    def page(
        self, ctx: dict[str, Any], *, name: str, role: str, notice: str | None, error: str | None
    ) -> str:
        """The whole page."""
        sections = {k: Markup(v) for k, v in self.sections(ctx).items()}  # noqa: S704 - rendered escaped
        return _ENV.get_template("page.html").render(
            ctx, sections=sections, name=name, role=role, notice=notice, error=error
        )

    @staticmethod
    def login(*, error: str | None, tokens: bool = True, external: str | None = None) -> str:
        """The sign-in page: the token form (``tokens``), a button to sign in with ``external``."""
        return _ENV.get_template("login.html").render(error=error, tokens=tokens, external=external)
