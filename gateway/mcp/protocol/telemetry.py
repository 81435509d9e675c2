"""The MCP layer's metrics: JSON-RPC messages and tool calls, on the app's :class:`Metrics`.

Label values come from closed sets only: method labels (``wire.method_label``), declared tool
names and fixed outcomes.
"""

from __future__ import annotations

from gateway.observability.metrics import Metrics


class Telemetry:
    """Counts MCP messages and tool calls."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def request(self, method: str, outcome: str) -> None:
        """One JSON-RPC message by method label and outcome."""
        self.metrics.mcp_requests.labels(method, outcome).inc()

    def tool_call(self, tool: str, outcome: str, seconds: float | None, *, source: str = "tool") -> None:
        """One ``tools/call`` of a declared tool: its outcome, where the outcome came from
        (``gateway``: the gateway's own refusal; ``tool``: the tool's answer) and, when it ran, its
        duration."""
        self.metrics.tool_calls.labels(tool, outcome, source).inc()
        if seconds is not None:
            self.metrics.tool_latency.labels(tool).observe(seconds)
