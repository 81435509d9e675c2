"""Tool-level errors: what a tool handler raises when a call cannot succeed.

Every failure a caller can act on is a :class:`ToolError`. The registry turns it into one MCP
``CallToolResult`` with ``isError: true`` (MCP 2025-11-25, server/tools#error-handling), whose text
is :attr:`ToolError.message` and whose ``structuredContent`` is
``{"error": {"reason": <reason>, "message": <message>, **details}}``.

The reasons are part of the gateway's outside contract (README, "One real call"):

- ``bad_request``: the arguments are wrong or GitLab refused them (4xx other than below).
- ``unauthorized``: no credential, or GitLab answered 401/403.
- ``not_found``: the resource does not exist or the caller cannot see it (GitLab never tells which).
- ``rate_limited``: GitLab answered 429 past the retry budget; ``retry_after_seconds`` is set.
- ``conflict``: the call is not allowed in the current state (the broker's state machine).
- ``upstream_error``: GitLab failed (5xx, timeouts, an HTML page instead of JSON).
- ``declined``: a person (or an operator) said no to a destructive action; nothing was done.
- ``unsupported_by_gitlab``: the configured GitLab's version or edition cannot serve what was asked;
  the message names what it needs and what the instance is (README, "GitLab versions").

Handlers never return stack traces; unexpected exceptions are turned into a generic
``upstream_error``-free internal error by the dispatcher (JSON-RPC -32603) and logged.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

Reason = Literal[
    "bad_request",
    "unauthorized",
    "not_found",
    "rate_limited",
    "conflict",
    "upstream_error",
    "declined",
    "unsupported_by_gitlab",
]

REASONS: tuple[Reason, ...] = get_args(Reason)


class ToolError(Exception):
    """A failure reported to the caller as an ``isError: true`` tool result.

    Args:
        reason: one of :data:`REASONS`.
        message: what went wrong and what to do next, written for an LLM agent.
        **details: extra JSON-serialisable fields placed beside ``reason`` in
            ``structuredContent.error`` (for example ``retry_after_seconds``, ``request_id``).
    """

    #: The gateway refused the call by its own policy before the tool ran (a toolset or tool the
    #: caller may not use, its per-agent rate limit, no GitLab token in passthrough mode), rather
    #: than GitLab or the broker answering it: ``source="gateway"`` in the tool-call metric.
    by_gateway: bool = False

    def __init__(self, reason: Reason, message: str, **details: Any) -> None:
        super().__init__(message)
        self.reason: Reason = reason
        self.message = message
        self.details: dict[str, Any] = details

    def to_structured(self) -> dict[str, Any]:
        """Return ``{"error": {"reason", "message", **details}}`` for ``structuredContent``."""
        return {"error": {"reason": self.reason, "message": self.message, **self.details}}

    def __repr__(self) -> str:
        return f"ToolError({self.reason!r}, {self.message!r})"


def gateway_refusal(reason: Reason, message: str, **details: Any) -> ToolError:
    """A :class:`ToolError` of the gateway's own policy (:attr:`ToolError.by_gateway`)."""
    error = ToolError(reason, message, **details)
    error.by_gateway = True
    return error


def bad_request(message: str, **details: Any) -> ToolError:
    """Shorthand for ``ToolError("bad_request", message, **details)``."""
    return ToolError("bad_request", message, **details)


def not_found(message: str, **details: Any) -> ToolError:
    """Shorthand for ``ToolError("not_found", message, **details)``."""
    return ToolError("not_found", message, **details)


def conflict(message: str, **details: Any) -> ToolError:
    """Shorthand for ``ToolError("conflict", message, **details)``."""
    return ToolError("conflict", message, **details)
