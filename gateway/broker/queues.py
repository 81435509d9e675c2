"""In-process queue bookkeeping: wake-ups, in-flight leases and depths per agent.

The messages themselves live in SQLite (``gateway.broker.store``); this module holds what only
makes sense inside one running process:

- wake-ups: a waiting ``wait_for_message`` parks on an :class:`asyncio.Event` that a send to its
  agent sets, so nobody polls the database;
- leases: the ids of messages handed to a wait whose answer the transport has not yet reported
  as delivered or abandoned. A leased message is skipped by other waits of the same agent, so a
  message is never in two answers at once; a restart drops every lease, which is right because
  every wait died with the process (at-least-once delivery);
- depths: undelivered messages per agent (leased ones included), loaded from the database at
  start and kept in step with each commit, for the status snapshot and the metrics.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class AgentQueue:
    """One agent's in-process queue state.

    Attributes:
        lock: serialises choosing and leasing the next message, so two waits of the same agent
            cannot pick the same one.
        leased: ids of messages handed to a wait and not yet delivered or abandoned.
        waiters: one event per open wait; set by :meth:`wake`.
        depth: undelivered messages (leased ones included).
    """

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    leased: set[str] = field(default_factory=set)
    waiters: set[asyncio.Event] = field(default_factory=set)
    depth: int = 0

    def wake(self) -> None:
        """Wake every open wait of this agent; each then looks for a message it can lease."""
        for event in self.waiters:
            event.set()


class Queues:
    """Every configured agent's :class:`AgentQueue`.

    Args:
        agents: the configured agent ids (``broker.agents``).
    """

    def __init__(self, agents: Iterable[str]) -> None:
        self._queues = {agent: AgentQueue() for agent in agents}

    def __getitem__(self, agent: str) -> AgentQueue:
        return self._queues[agent]

    def items(self) -> Iterable[tuple[str, AgentQueue]]:
        """``(agent, queue)`` pairs in configuration order."""
        return self._queues.items()

    def wake_all(self) -> None:
        """Wake every open wait of every agent (stop, shutdown)."""
        for queue in self._queues.values():
            queue.wake()

    def waits_open(self) -> int:
        """Open ``wait_for_message`` calls, all agents."""
        return sum(len(q.waiters) for q in self._queues.values())
