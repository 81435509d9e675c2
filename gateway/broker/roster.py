"""The configured agents: who may call the broker tools, and who is connected.

Identity comes from the transport (``gateway.mcp.http.auth``): a client token's agent id, or on a
loopback gateway without client tokens the ``X-Agent-Id`` header (README, "Connecting a client", row
"callers and agents"). The transport drops a header value that is not a configured agent id, so
it also hands over what was claimed, and a refusal can say what was received.

``connected`` and ``lastSeen`` are broker.md's ("Monitoring"): an agent is connected with a wait
open or a call within ``broker.connected_window_seconds``. Agents reach the broker through any
replica, so each replica saves the calls it saw (``agents.last_seen``, every
``broker.timer_poll_seconds`` and with every change) and merges what the others saved; an
agent with a wait open here counts as seen now, so its wait keeps it connected everywhere.

Each saved ``lastSeen`` names the replica that saved it. A replica whose heartbeat stopped
(``gateway.broker.replicas``: killed, frozen, cut off from the database) holds no wait any more,
so an agent last seen there is not connected, however recent that was: the replicas alive are
learnt with each read of the saved values (:meth:`Roster.merge`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime

from gateway.broker.errors import BrokerError
from gateway.broker.formats import iso
from gateway.broker.wakeups import Wakeups


class Roster:
    """The agents of one broker and the time of each one's last call.

    Args:
        agents: the configured agent ids (``broker.agents``), in configuration order.
        wakeups: this process's open waits (an open wait counts as connected).
        connected_window_seconds: a call this recent counts as connected.
        clock: Unix time source.
        replica: this process's replica id (``gateway.broker.replicas``); None where no replica
            runs (the ``broker`` command line).

    Attributes:
        agents: the configured agent ids.
        last_call: agent id → Unix time of its last call (or the end of its last wait).
        replica: this process's replica id, or None.
    """

    def __init__(
        self,
        agents: Iterable[str],
        wakeups: Wakeups,
        *,
        connected_window_seconds: float,
        clock: Callable[[], float],
        replica: str | None = None,
    ) -> None:
        self.agents: tuple[str, ...] = tuple(agents)
        self.last_call: dict[str, float] = {}
        self.replica = replica
        #: Agent id → the replica its ``last_call`` was seen by (None: before heartbeats).
        self._seen_by: dict[str, str | None] = {}
        #: The replicas beating, as last read (None: not known, so every replica counts as alive).
        self._alive: frozenset[str] | None = None
        self._dirty: set[str] = set()
        self._saved_at: dict[str, float] = {}
        self._wakeups = wakeups
        self._window = connected_window_seconds
        self._clock = clock

    def authorize(self, agent_id: str | None, claimed_agent_id: str | None = None) -> str:
        """The caller's agent id, checked against ``broker.agents``; records the call for ``lastSeen``.

        Args:
            agent_id: the agent id the transport established, or None.
            claimed_agent_id: the ``X-Agent-Id`` value the transport received and did not accept
                (already cut short and made printable ASCII by the transport), or None when no
                header counted (none sent, or client tokens decide who calls).

        Raises:
            BrokerError: ``unauthorized`` without an agent id or with one not configured; the text
                names the value received and the ids accepted.
        """
        known = ", ".join(self.agents)
        if not agent_id and claimed_agent_id:
            hint = next(
                (f": did you mean {a!r}?" for a in self.agents if a.lower() == claimed_agent_id.lower()), ""
            )
            raise BrokerError(
                "unauthorized",
                f"X-Agent-Id {claimed_agent_id!r} is not one of the configured agents {known} "
                f"(ids are case-sensitive{hint}). Send the header `X-Agent-Id: <id>` with one of those ids.",
                agents=list(self.agents),
            )
        if not agent_id:
            raise BrokerError(
                "unauthorized",
                "The broker tools need to know which agent is calling, and this call carries no agent id. "
                f"On a gateway bound to loopback without client tokens, send the header `X-Agent-Id: <id>` "
                f"with one of: {known}. Otherwise send the client token configured for your agent.",
            )
        if agent_id not in self.agents:
            shown = agent_id if len(agent_id) <= 64 else agent_id[:64] + "…"
            raise BrokerError(
                "unauthorized",
                f"Agent id {shown!r} is not one of this broker's agents ({known}). Call with one of "
                "those ids (header `X-Agent-Id` on loopback, or your agent's client token).",
                agents=list(self.agents),
            )
        self.seen(agent_id)
        return agent_id

    def seen_calling(self, agent: str | None) -> None:
        """Record a call of a tool outside the broker (a GitLab tool) by ``agent``, when it is one
        of this broker's agents: an agent at work on GitLab is not away."""
        if agent in self.agents:
            assert agent is not None
            self.seen(agent)

    def seen(self, agent: str) -> None:
        """Record a call of ``agent`` now."""
        self.last_call[agent] = self._clock()
        self._seen_by[agent] = self.replica
        self._dirty.add(agent)

    def unsaved(self) -> dict[str, str]:
        """lastSeen values not yet saved; marks them saved.

        An agent waiting here counts as seen now, saved again once a quarter of the connected
        window has passed (enough for other replicas to show it connected; profiling showed a
        save per waiting agent per timer look was what slowed 100 waiting agents down).
        """
        now = self._clock()
        refresh = self._window / 4
        for agent in self.agents:
            if self._wakeups.waiting(agent) and now - self._saved_at.get(agent, 0.0) >= refresh:
                self.seen(agent)
        out = {a: iso(self.last_call[a]) for a in self._dirty if a in self.last_call}
        for agent in out:
            self._saved_at[agent] = now
        self._dirty.clear()
        return out

    def merge(
        self,
        saved: Mapping[str, str],
        seen_by: Mapping[str, str] | None = None,
        alive: Iterable[str] | None = None,
    ) -> None:
        """Take in lastSeen values saved by any replica (the later of theirs and ours wins).

        Args:
            saved: agent id → lastSeen (ISO 8601 UTC).
            seen_by: agent id → the replica that saved it (None: not read).
            alive: the replicas whose heartbeat is current (None: not read; the last read holds).
        """
        for agent, seen in saved.items():
            if agent in self.agents:
                with contextlib.suppress(ValueError):
                    at = datetime.strptime(seen, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
                    mine = self.last_call.get(agent, 0.0)
                    if at > mine:
                        self.last_call[agent] = at
                    if at >= mine and seen_by is not None:
                        self._seen_by[agent] = seen_by.get(agent)
        if alive is not None:
            self._alive = frozenset(alive)

    def replica_of(self, agent: str) -> str | None:
        """The replica that saw ``agent``'s last call (None: unknown)."""
        return self._seen_by.get(agent)

    def on_gone_replica(self, agent: str) -> bool:
        """``agent``'s last call was seen by a replica that is gone (no heartbeat, or stopped)."""
        replica = self._seen_by.get(agent)
        if replica is None or self._alive is None or replica == self.replica:
            return False
        return replica not in self._alive

    def waiting(self, agent: str) -> bool:
        """``agent`` has a wait open in this process."""
        return self._wakeups.waiting(agent)

    def connected(self, agent: str) -> bool:
        """A wait open, or a call within ``broker.connected_window_seconds`` (broker.md) seen by a
        replica that is still beating."""
        if self._wakeups.waiting(agent):
            return True
        last = self.last_call.get(agent)
        if last is None or self._clock() - last > self._window:
            return False
        return not self.on_gone_replica(agent)

    def last_seen(self, agent: str) -> str | None:
        """``agent``'s last call as ISO 8601 UTC, or None when it never called."""
        last = self.last_call.get(agent)
        return iso(last) if last is not None else None

    def last_seen_all(self) -> dict[str, str]:
        """Every agent's last call as ISO 8601 UTC (only those that called), for the store."""
        return {a: iso(t) for a, t in self.last_call.items()}

    def restore(self, saved: Mapping[str, str]) -> None:
        """Load the ``lastSeen`` times saved by an earlier run; unknown agents and bad times are skipped."""
        self.merge(saved)
