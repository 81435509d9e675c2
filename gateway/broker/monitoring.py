"""Monitoring: the pipeline status snapshot and the activity logs (broker.md "Monitoring").

``get_pipeline_status`` reads the store (state, issues, queue depths, every replica's saved
``lastSeen``) and this process's view (open waits, uptime); ``log_activity`` and
``get_activity_log`` write and read the activity logs in the database (and the files on SQLite).
None of these is a change: they work in every state, STOPPED included.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway.broker.activity_log import ActivityLogs, UnknownLog, format_line
from gateway.broker.control import PM
from gateway.broker.errors import BrokerError
from gateway.broker.formats import human_duration, iso
from gateway.broker.machine import State
from gateway.broker.migrations import HEAD
from gateway.broker.operator import HUMAN
from gateway.broker.replicas import alive, described
from gateway.broker.roster import Roster
from gateway.broker.store import Store
from gateway.broker.wakeups import CHANGED

if TYPE_CHECKING:
    from gateway.config import BrokerSettings


class Monitoring:
    """The read side of one broker, and its activity logs.

    Args:
        store: the opened database.
        roster: the agents (``connected``, ``lastSeen``).
        logs: the activity logs.
        config: the ``broker`` settings (limits).
        clock: Unix time source.

    ``uptime`` counts from this object's creation, which is the broker's.
    """

    def __init__(
        self,
        store: Store,
        roster: Roster,
        logs: ActivityLogs,
        config: BrokerSettings,
        clock: Callable[[], float],
        *,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self._store = store
        self._on_change = on_change
        self._roster = roster
        self._logs = logs
        self._config = config
        self._clock = clock
        self._started = time.monotonic()

    async def status(self, *, replicas: bool = False) -> dict[str, Any]:
        """``get_pipeline_status``: the whole snapshot (broker.md "Monitoring").

        ``replicas``: for operators (``broker status``, the console), also every replica's
        heartbeat (``replicas``, ``gateway.broker.replicas.described``) and the replica that saw
        each agent last (``agents.<id>.replica``); not for agents, to whom hosts and process ids
        are nothing.
        """
        rows = None
        async with self._store.read() as q:
            p = await q.pipeline()
            issues = await q.issues()
            plan = await q.plan()
            depths = await q.queue_depths()
            if self._store.revision == HEAD:
                rows = await q.replicas()
                self._roster.merge(await q.last_seen(), await q.seen_by(), alive(rows, self._clock()))
            else:  # the command line on another schema: no heartbeats to read
                self._roster.merge(await q.last_seen())
            answer = None
            if p.state is State.HUMAN_NEEDED and p.human_at:
                # A person's answer (broker instruct, the console) since the pipeline asked.
                answer = await q.latest_from(HUMAN, PM, p.human_at)
        now = self._clock()
        aa: dict[str, Any] = {"active": p.aa_stage is not None}
        if p.aa_stage is not None and p.aa_deadline is not None:
            aa.update(
                stage=p.aa_stage,
                deadline=iso(p.aa_deadline),
                secondsLeft=max(0.0, round(p.aa_deadline - now, 1)),
                nextPhase=p.aa_next_phase,
            )
        uptime = time.monotonic() - self._started
        out: dict[str, Any] = {
            "state": p.state.value,
            "phase": p.phase,
            "issues": {i.id: {"status": i.status, "failCount": i.fail_count} for i in issues},
            "agents": {
                a: {"connected": self._roster.connected(a), "lastSeen": self._roster.last_seen(a)}
                for a in self._roster.agents
            },
            "queues": {a: depths.get(a, 0) for a in self._roster.agents},
            "phasePlan": {"planId": plan.plan_id if plan else None, "autoAdvance": p.auto_advance},
            "autoAdvance": aa,
            "fixCount": p.fix_count,
            "uptime": human_duration(uptime),
            "uptimeSeconds": round(uptime, 1),
            "limits": {"failLimit": self._config.fail_limit, "fixLimit": self._config.fix_limit},
        }
        if p.state is State.HUMAN_NEEDED:
            out["humanNeeded"] = {
                "reason": p.human_reason,
                "requestedBy": p.human_by,
                "at": p.human_at,
                "origin": p.human_origin.value if p.human_origin else None,
            }
            if answer is not None:
                out["humanNeeded"]["answered"] = {
                    "messageId": answer.id,
                    "by": answer.body.get("operator"),
                    "at": answer.created_at,
                    # Read by the PM (its wait_for_message got it), which then calls resume.
                    "read": answer.delivered_at is not None,
                }
        if p.state is State.STOPPED:
            out["stopped"] = {"by": p.stopped_by, "at": p.stopped_at}
        if replicas and rows is not None:
            out["replicas"] = described(rows, now, self._roster.replica)
            for agent, shown in out["agents"].items():
                shown["replica"] = self._roster.replica_of(agent)
        return out

    async def log_activity(self, agent: str, message: str) -> dict[str, Any]:
        """``log_activity``: one line in ``agent``'s log; ``{success}``."""
        line = (agent, iso(self._clock()), agent, message)
        async with self._store.write() as q:
            await q.append_log([line])
            await q.notify(CHANGED)  # other replicas' consoles show the line
        self._logs.write_files([line])
        if self._on_change is not None:
            self._on_change()
        return {"success": True}

    async def activity_log(self, name: str, tail_lines: int) -> dict[str, Any]:
        """``get_activity_log`` → ``{agent, lines}``.

        Raises:
            BrokerError: ``bad_request`` when ``name`` is not an agent id or ``pipeline``.
        """
        try:
            self._logs.check(name)
        except UnknownLog:
            shown = name if len(name) <= 64 else name[:64] + "…"
            raise BrokerError(
                "bad_request",
                f"`agent`: {shown!r} is not a log of this broker; use one of: {', '.join(self._logs.names)}.",
                logs=list(self._logs.names),
            ) from None
        async with self._store.read() as q:
            rows = await q.tail_log(name, tail_lines)
        return {"agent": name, "lines": [format_line(*r) for r in rows]}
