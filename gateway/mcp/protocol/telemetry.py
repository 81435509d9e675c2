"""The MCP layer's metrics: JSON-RPC messages and tool calls, on the app's :class:`Metrics`.

Label values come from closed sets only: method labels (``wire.method_label``), declared tool
names, fixed outcomes, and who called (:class:`CallerLabels`: the configured agents, else one
fixed bucket).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client.metrics import MetricWrapperBase

from gateway.observability.metrics import ANONYMOUS_AGENT, Metrics
from gateway.tools.caller import Caller


class CallerLabels:
    """Who called, as label values of :data:`gateway.observability.metrics.CALLER_LABELS`: the
    caller's agent id when it is one of the configured agents (``broker.agents`` and the client
    tokens' agents), else :data:`ANONYMOUS_AGENT`. A caller cannot grow the set: an unknown
    ``X-Agent-Id`` has no agent id (``gateway.mcp.http.auth``) and is counted as anonymous.

    A ``user`` label (once people sign in) is one more value here and one more name in
    :data:`gateway.observability.metrics.CALLER_LABELS`.
    """

    def __init__(self, agents: Iterable[str]) -> None:
        self._known = {agent: (agent,) for agent in agents}
        self._anonymous = (ANONYMOUS_AGENT,)

    @property
    def agents(self) -> tuple[str, ...]:
        """Every agent label value, the anonymous bucket last."""
        return (*self._known, ANONYMOUS_AGENT)

    def of(self, caller: Caller | None) -> tuple[str, ...]:
        """The label values of ``caller``: tuples made once, found by one dict lookup (this runs
        on every call; the series' children are then found in :class:`Telemetry`'s cache)."""
        if caller is None or caller.agent_id is None:
            return self._anonymous
        return self._known.get(caller.agent_id, self._anonymous)


class Telemetry:
    """Counts MCP messages and tool calls."""

    def __init__(self, metrics: Metrics, agents: Iterable[str] = ()) -> None:
        self.metrics = metrics
        self.callers = CallerLabels(agents)
        # Each series' child, looked up once (``labels`` takes a lock and builds a key per call);
        # bounded by the closed label sets.
        self._children: dict[tuple[int | str, ...], Any] = {}

    def _child(self, metric: MetricWrapperBase, *labels: str) -> Any:
        key: tuple[int | str, ...] = (id(metric), *labels)  # the metrics outlive this object
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def request(self, method: str, outcome: str) -> None:
        """One JSON-RPC message by method label and outcome."""
        self._child(self.metrics.mcp_requests, method, outcome).inc()

    def tool_call(
        self,
        tool: str,
        outcome: str,
        seconds: float | None,
        *,
        toolset: str,
        source: str = "tool",
        caller: Caller | None = None,
    ) -> None:
        """One ``tools/call`` of a declared tool: its toolset (``broker`` calls reach no GitLab
        and no per-agent limit), its outcome, where the outcome came from (``gateway``: the
        gateway's own refusal; ``tool``: the tool's answer), who called (:class:`CallerLabels`)
        and, when it ran, its duration."""
        who = self.callers.of(caller)
        self._child(self.metrics.tool_calls, tool, toolset, outcome, source, *who).inc()
        if seconds is not None:
            self._child(self.metrics.tool_latency, tool).observe(seconds)
