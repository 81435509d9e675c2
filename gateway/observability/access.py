"""The access line: one INFO line per MCP request, with the GitLab requests it made.

The transport opens a :class:`RequestTrace` per MCP request (:func:`trace_request`, through
:func:`gateway.observability.logging.bind_request_id`); the GitLab client notes each attempt on
the trace of the request it serves (:func:`note_gitlab_request`), and the transport's access
line carries :meth:`RequestTrace.fields`. Each GitLab request also gets its own line at DEBUG.

Only operation labels (a GraphQL operation's name or a REST route template), statuses and
error class names are noted: never a URL, a header or a body, so nothing here can hold a token.
"""

from __future__ import annotations

from contextvars import ContextVar


class RequestTrace:
    """What one MCP request did upstream: ``operation:status`` per GitLab attempt, in order."""

    __slots__ = ("gitlab", "trace_id")

    def __init__(self) -> None:
        self.gitlab: list[str] = []
        #: The OpenTelemetry trace the request's span is in (set only when tracing is on).
        self.trace_id: str | None = None

    def fields(self) -> dict[str, str | int]:
        """The access line's GitLab fields (none when no GitLab request was made) and trace id."""
        fields: dict[str, str | int] = {}
        if self.gitlab:
            fields = {"gitlab_requests": len(self.gitlab), "gitlab": " ".join(self.gitlab)}
        if self.trace_id is not None:
            fields["trace_id"] = self.trace_id
        return fields


#: The trace of the MCP request being served in this task (tasks it starts share it).
TRACE: ContextVar[RequestTrace | None] = ContextVar("gateway_request_trace", default=None)


def note_gitlab_request(operation: str, outcome: int | str | None) -> None:
    """Note one GitLab attempt (its status, or the error class when no answer came)."""
    trace = TRACE.get()
    if trace is not None:
        trace.gitlab.append(f"{operation.replace(' ', '_')}:{outcome}")
