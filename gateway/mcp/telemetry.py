"""The transport's metrics, with each label set's child looked up once.

``prometheus_client``'s ``labels()`` takes a lock and builds a key on every call; the label sets
here are bounded (known methods, declared tools, fixed outcomes), so their children are kept in
plain dicts and reused for the life of the app.
"""

from __future__ import annotations

from typing import Any

from gateway.observability.metrics import Metrics


class Telemetry:
    """Counts MCP messages and tool calls on the app's :class:`Metrics`."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._requests: dict[tuple[str, str], Any] = {}
        self._calls: dict[tuple[str, str], Any] = {}
        self._latency: dict[str, Any] = {}

    def request(self, method: str, outcome: str) -> None:
        """One JSON-RPC message by method label (see ``protocol.method_label``) and outcome."""
        child = self._requests.get((method, outcome))
        if child is None:
            child = self._requests[(method, outcome)] = self.metrics.mcp_requests.labels(method, outcome)
        child.inc()

    def tool_call(self, tool: str, outcome: str, seconds: float | None) -> None:
        """One ``tools/call`` of a declared tool: its outcome and, when it ran, its duration."""
        child = self._calls.get((tool, outcome))
        if child is None:
            child = self._calls[(tool, outcome)] = self.metrics.tool_calls.labels(tool, outcome)
        child.inc()
        if seconds is not None:
            latency = self._latency.get(tool)
            if latency is None:
                latency = self._latency[tool] = self.metrics.tool_latency.labels(tool)
            latency.observe(seconds)
