"""Safety and control: ``request_human``, ``resume``, ``stop_pipeline``.

Contract: broker.md ("States", "Stopping"). A person is asked for by any agent;
only the PM resumes, on a person's word; a stop lasts until a person starts over
(``gateway.broker.operator``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.broker.changes import Changes
from gateway.broker.effects import After, Facts
from gateway.broker.errors import BrokerError
from gateway.broker.machine import Event, State, resume_event
from gateway.broker.store import PipelineRow, Queries

#: The agent allowed to ``resume`` (broker.md: the PM resumes, on a person's word).
PM = "pm"


class Control:
    """The safety controls of one broker.

    Args:
        changes: runs each call as a change.
        clock: Unix time source.
    """

    def __init__(self, changes: Changes, clock: Callable[[], float]) -> None:
        self._changes = changes
        self._clock = clock

    async def request_human(self, agent: str, reason: str) -> dict[str, Any]:
        """``request_human``: any state but STOPPED → HUMAN_NEEDED; connected agents are told.

        Returns ``{success, previousState}``.
        """

        async def body(q: Queries, p: PipelineRow, after: After) -> dict[str, Any]:
            await self._changes.apply(
                q, p, Event.REQUEST_HUMAN, Facts(agent=agent, now=self._clock(), reason=reason), after
            )
            after.pipeline_log.append((agent, f"human needed: {reason}"))
            return {"success": True, "previousState": p.state.value}

        return await self._changes.run(agent, body)

    async def resume(self, agent: str) -> dict[str, Any]:
        """``resume`` (PM only): HUMAN_NEEDED → PHASE_DEVELOPING or IDLE; PAUSED → IDLE. ``{success, state}``.

        Raises:
            BrokerError: ``unauthorized`` for any agent but ``pm``; ``conflict`` in other states.
        """
        if agent != PM:
            raise BrokerError(
                "unauthorized",
                f"resume is only for the PM (agent {PM!r}), on a person's word; you are {agent!r}. "
                "Ask for a person with request_human, or tell the PM with send_message.",
            )

        async def body(q: Queries, p: PipelineRow, after: After) -> dict[str, Any]:
            event = resume_event(p.state, p.human_origin)
            t = await self._changes.apply(q, p, event, Facts(agent=agent, now=self._clock()), after)
            return {"success": True, "state": t.target.value}

        return await self._changes.run(agent, body)

    async def stop_pipeline(self, agent: str) -> dict[str, Any]:
        """``stop_pipeline``: any state → STOPPED (until a person starts over); writes
        ``.stop-pipeline``, wakes every wait.

        Returns ``{success, state}``. A second call succeeds and changes nothing.
        """

        async def body(q: Queries, p: PipelineRow, after: After) -> dict[str, Any]:
            if p.state is State.STOPPED:
                return {"success": True, "state": State.STOPPED.value}
            await self._changes.apply(q, p, Event.STOP, Facts(agent=agent, now=self._clock()), after)
            return {"success": True, "state": State.STOPPED.value}

        return await self._changes.run(agent, body)
