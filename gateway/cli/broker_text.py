"""The ``broker`` command line's text output (``--json`` prints the same results as JSON)."""

from __future__ import annotations

import json
from typing import Any

from gateway.broker.formats import answer_state, human_duration, iso


def count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def status_text(r: dict[str, Any]) -> str:
    s, plan = r["status"], r["plan"]
    lines = [
        f"Pipeline {r['generation']}: {s['state']}"
        + (f", phase {s['phase']}" if s["phase"] is not None else "")
        + (f" (plan {plan['planId']}" if plan["planId"] else " (no plan")
        + f", auto-advance {'on' if plan['autoAdvance'] else 'off'})"
    ]
    if "humanNeeded" in s:
        h = s["humanNeeded"]
        lines.append(f"NEEDS A PERSON: {h['reason']} (asked by {h['requestedBy']} at {h['at']})")
        answered = h.get("answered")
        if answered is None and r.get("consoleAnswers") is False:
            lines.append(
                "  Answer with: broker instruct 'what the PM should do' (beside a running gateway too; the "
                "PM then calls resume), or start over with: broker reset (the console is off: no "
                "console.operator_token)"
            )
        elif answered is None:
            lines.append(
                '  Answer from the console (/broker on the gateway\'s port, "Send to the PM"), or with: '
                "broker instruct 'what the PM should do' (beside a running gateway too); the PM then "
                "calls resume"
            )
        else:
            lines.append(
                f"  Answered by {answered['by']} at {answered['at']} ({answered['messageId']}): "
                + answer_state(answered)
            )
    waiting = r.get("confirmationsPending")
    if waiting:
        lines.append(
            f"{count(waiting, 'confirmation')} {'waits' if waiting == 1 else 'wait'} for an operator: "
            "run broker confirmations"
        )
    if "stopped" in s:
        lines.append(
            f"STOPPED by {s['stopped']['by']} at {s['stopped']['at']}; start over with: broker reset"
        )
    if s["issues"]:
        issues = ", ".join(f"{k} {v['status']} (fails {v['failCount']})" for k, v in s["issues"].items())
        lines.append(f"Issues: {issues}; fix count {s['fixCount']}/{s['limits']['fixLimit']}")
    aa = s["autoAdvance"]
    if aa.get("active"):
        lines.append(f"Auto-advance: {aa['stage']}, phase {aa['nextPhase']} in {aa['secondsLeft']:.0f} s")
    if r.get("gatewayRunning") is False:
        lines.append("No gateway is running on this state folder: no agent is connected.")
    replicas = s.get("replicas")
    gone = {x["id"]: x for x in replicas or [] if not x["alive"]}
    if replicas is not None:
        lines.extend(replicas_text(replicas))
    lines.append("Agents:")
    every = r.get("waitSeenEverySeconds")
    stale = []
    for agent, a in s["agents"].items():
        seen = a["lastSeen"] or "never"
        ago = a.get("secondsAgo")
        if ago is not None:
            seen += f" ({human_duration(ago)} ago)"
        lines.append(
            f"  {agent:<10} {'connected' if a['connected'] else 'away':<10} last seen {seen:<32} "
            f"queued {s['queues'][agent]}"
        )
        if a["connected"] and every is not None and ago is not None and ago > every + 5:
            stale.append(agent)
        elif not a["connected"] and (on := gone.get(a.get("replica") or "")) is not None:
            lines.append(
                f"    its last call went through replica {on['id']} ({on['host']}), which is "
                f"{'not running' if on.get('running') is False else 'gone'}: "
                "the agent is not connected until it calls again"
            )
    if stale:
        # A replica that holds an agent's wait saves it as seen every `every` seconds: older than
        # that, no live replica holds one (a replica killed with it, or the agent between calls).
        lines.append(
            f"  {', '.join(stale)}: no wait open on a live replica (a replica holding one says so every "
            f"{every:g} s); connected only by the last call, until {r['connectedWindowSeconds']:g} s after it"
        )
    for a in r["archives"]:
        lines.append(
            f"Archived: pipeline {a['generation']} ({a['finalState']}), "
            f"by {a['archivedBy']} at {a['archivedAt']}"
        )
    return "\n".join(lines)


def replicas_text(replicas: list[dict[str, Any]]) -> list[str]:
    """The replicas' heartbeats: how many beat, and one line each."""
    if replicas and all(x.get("running") is False for x in replicas):
        # SQLite, no gateway holding the folder's lock: the rows are of runs that ended.
        lines = [f"Replicas: none running ({len(replicas)} stopped without saying so)"]
    else:
        up = sum(1 for x in replicas if x["alive"])
        lines = [f"Replicas: {up} alive, {len(replicas) - up} gone"]
    for x in replicas:
        beat = f"{human_duration(x['secondsAgo'])} ago"
        if x["alive"]:
            state = f"alive   last beat {beat}"
        elif x.get("running") is False:
            state = f"not running (no gateway holds the state folder's lock), last beat {beat}"
        else:
            state = (
                f"GONE    last beat {beat} (beats every {x['everySeconds']:g} s): killed, frozen or cut "
                "off from the database"
            )
        lines.append(
            f"  {x['id']} {x['host']} pid {x['pid']} version {x['version']}, started {x['started']}: {state}"
        )
    return lines


#: States in which the pipeline waits for the PM's ``resume``.
_WAITING = {
    "HUMAN_NEEDED": "waits for a person",
    "PAUSED": "is paused (an auto-advance was cancelled)",
}


def instructed(state: str | None) -> str:
    """What happens after ``broker instruct``, by the pipeline's state when it was sent."""
    reads = "the PM gets it at its next wait_for_message (high priority)"
    if state in _WAITING:
        return (
            f"The pipeline {_WAITING[state]} ({state}): {reads} and calls resume to go on; nothing "
            "moves until it does."
        )
    if state is None:  # a gateway older than this command does not say
        return f"{reads[0].upper()}{reads[1:]}, and calls resume if the pipeline is HUMAN_NEEDED or PAUSED."
    return f"The pipeline is {state}, not paused: {reads} and acts on it; no resume is needed."


def history_text(r: dict[str, Any]) -> str:
    lines = []
    for m in r["messages"]:
        body = json.dumps(m["body"], ensure_ascii=False) if not m.get("bodyTruncated") else m["bodyPreview"]
        body = body if len(body) <= 200 else body[:200] + "…"
        reply = f" reply to {m['replyTo']}" if m["replyTo"] else ""
        lines.append(
            f"{m['createdAt']} {m['messageId']} {m['from']} -> {m['to']} [{m['subject']}] {m['priority']}"
            f"{'' if m['delivered'] else ' (queued)'}{reply}: {body}"
        )
    pipeline = r.get("pipeline")
    if not lines:
        lines.append(
            "(no messages)"
            if pipeline is None
            else f"(no messages in archived pipeline {pipeline}: see 'broker status' for the archived ones)"
        )
    if r["page_info"]["has_next_page"]:
        more = f" --pipeline {pipeline}" if pipeline is not None else ""
        lines.append(f"Older messages: broker history{more} --before {r['page_info']['end_cursor']}")
    return "\n".join(lines)


def confirmations_text(result: dict[str, Any]) -> str:
    """``broker confirmations``: one paragraph per pending confirmation, oldest first."""
    pending = result["pending"]
    if not pending:
        return "No confirmation waits for an operator."
    lines: list[str] = []
    for a in pending:
        lines.append(f"{a['ticket']}  {a['tool']}, asked by {_shown(a['agent'])} at {iso(a['created'])}")
        lines.append(f"  what: {_shown(a['what'])}")
        lines.append(f"  why:  {_shown(a['why']) or '(no reason given)'}")
    lines.append("Approve with 'broker approve TICKET', refuse with 'broker refuse TICKET --note ...'.")
    return "\n".join(lines)


def _shown(text: str | None) -> str:
    """An agent's text fit for a terminal: control and format characters (escape sequences, bidi
    overrides) shown as ``?``."""
    return "".join(c if c.isprintable() else "?" for c in text or "")
