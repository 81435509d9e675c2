"""The MCP layer's metrics: JSON-RPC messages and tool calls, on the app's :class:`Metrics`.

Label values come from closed sets only: method labels (``wire.method_label``), declared tool
names and fixed outcomes.
"""

from __future__ import annotations

from typing import Any

from prometheus_client.metrics import MetricWrapperBase

from gateway.observability.metrics import Metrics


class Telemetry:
    """Counts MCP messages and tool calls."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
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

    def tool_call(self, tool: str, outcome: str, seconds: float | None, *, source: str = "tool") -> None:
        """One ``tools/call`` of a declared tool: its outcome, where the outcome came from
        (``gateway``: the gateway's own refusal; ``tool``: the tool's answer) and, when it ran, its
        duration."""
        self._child(self.metrics.tool_calls, tool, outcome, source).inc()
        if seconds is not None:
            self._child(self.metrics.tool_latency, tool).observe(seconds)
