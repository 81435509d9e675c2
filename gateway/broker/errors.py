"""The broker's refusals: a call the broker will not carry out, and why.

The broker raises :class:`BrokerError` with the reason from the gateway's vocabulary
(``conflict`` for a state that does not allow the call, ``bad_request``, ``not_found``,
``unauthorized``, ``upstream_error`` when the store is unavailable) and a message written for the
agent; the tool edge (``gateway.tools.failures``) turns it into an ``isError`` result. The broker
does not know about tools or MCP.
"""

from __future__ import annotations

from typing import Any

from gateway.errors import Reason


class BrokerError(Exception):
    """A refused broker call.

    Args:
        reason: what kind of refusal (one of ``gateway.errors.REASONS``).
        message: what went wrong and what to do next.
        **details: JSON-serialisable facts placed beside the message (e.g. ``state``).
    """

    def __init__(self, reason: Reason, message: str, **details: Any) -> None:
        super().__init__(message)
        self.reason: Reason = reason
        self.message = message
        self.details: dict[str, Any] = details

    def __repr__(self) -> str:
        return f"BrokerError({self.reason!r}, {self.message!r})"
