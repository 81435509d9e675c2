"""The tool edge: the one place a failure becomes an ``isError: true`` tool result.

The layers below raise their own typed errors and know nothing of tools: the GitLab client
:class:`~gateway.gitlab.errors.GitLabError` (with the reason its HTTP status or GraphQL answer
means), the URL and path parsers :class:`~gateway.gitlab.errors.InvalidReference`, the broker
:class:`~gateway.broker.errors.BrokerError`. Handlers raise :class:`~gateway.errors.ToolError` for
what only a tool knows (arguments that disagree). :func:`as_tool_error` maps each to a
``ToolError`` (reason, message, details); the registry adds the request id and builds the result.
Anything else is a bug and propagates (JSON-RPC internal error, logged with its traceback).
"""

from __future__ import annotations

from gateway.broker.errors import BrokerError
from gateway.errors import ToolError
from gateway.gitlab.errors import GitLabError, InvalidReference

#: What the edge turns into tool results; anything else propagates.
HANDLED: tuple[type[Exception], ...] = (ToolError, GitLabError, InvalidReference, BrokerError)


def as_tool_error(err: Exception, *, reference_hint: str | None = None) -> ToolError:
    """The tool error for a failure of a type in :data:`HANDLED`.

    Args:
        reference_hint: the tool's other way to name what a rejected URL or path meant
            (``Tool.reference_hint``), appended to an :class:`InvalidReference` message.

    Raises:
        TypeError: ``err`` is of no type the edge handles (a bug: let it propagate instead).
    """
    if isinstance(err, ToolError):
        return err
    if isinstance(err, GitLabError):
        return ToolError(err.reason, err.message, **err.details())
    if isinstance(err, InvalidReference):
        message = f"{err.message} {reference_hint}" if reference_hint else err.message
        return ToolError("bad_request", message)
    if isinstance(err, BrokerError):
        return ToolError(err.reason, err.message, **err.details)
    raise TypeError(f"no tool error for {type(err).__name__}")
