"""The tool edge: the one place a failure becomes an ``isError: true`` tool result.

The layers below raise their own typed errors and know nothing of tools: the GitLab client
:class:`~gateway.gitlab.errors.GitLabError` (with the reason its HTTP status or GraphQL answer
means), the URL and path parsers :class:`~gateway.gitlab.errors.InvalidReference`, the broker
:class:`~gateway.broker.errors.BrokerError`. Handlers raise :class:`~gateway.errors.ToolError` for
what only a tool knows (arguments that disagree). :func:`as_tool_error` maps each to a
``ToolError`` (reason, message, details); the registry adds the request id and builds the result.
Anything else is a bug and propagates (JSON-RPC internal error, logged with its traceback).

A cursor GitLab refuses (:class:`~gateway.gitlab.errors.GitLabCursorRefused`) is the caller's
``after`` when the call carried one: every paged tool takes its cursor there
(``gateway.tools.pagination``), so this is the one place that names it, for all of them.
"""

from __future__ import annotations

from gateway.broker.errors import BrokerError
from gateway.errors import ToolError
from gateway.gitlab.errors import GitLabCursorRefused, GitLabError, GitLabUnsupported, InvalidReference

#: What the edge turns into tool results; anything else propagates.
HANDLED: tuple[type[Exception], ...] = (ToolError, GitLabError, InvalidReference, BrokerError)
#: The argument every paged tool takes GitLab's cursor in.
CURSOR_ARGUMENT = "after"


def as_tool_error(
    err: Exception,
    *,
    reference_hint: str | None = None,
    cursor_sent: bool = False,
    tool: str | None = None,
) -> ToolError:
    """The tool error for a failure of a type in :data:`HANDLED`.

    Args:
        reference_hint: the tool's other way to name what a rejected URL or path meant
            (``Tool.reference_hint``), appended to an :class:`InvalidReference` message.
        cursor_sent: the call carried a :data:`CURSOR_ARGUMENT`, so a cursor GitLab refuses
            is that argument (otherwise it is the gateway's own, a plain ``bad_request``).
        tool: the tool's name, put first in a refusal of the whole tool by this GitLab.

    Raises:
        TypeError: ``err`` is of no type the edge handles (a bug: let it propagate instead).
    """
    if isinstance(err, ToolError):
        return err
    if isinstance(err, GitLabCursorRefused) and cursor_sent:
        name = CURSOR_ARGUMENT
        return ToolError(
            "bad_request",
            f"`{name}` is not a cursor GitLab accepts: pass `page_info.end_cursor` from the previous "
            f"page of the same call (same arguments), or omit `{name}` for the first page. "
            f"(GitLab: {err.said})",
            invalid_arguments=[name],
            **err.details(),
        )
    if isinstance(err, GitLabUnsupported) and err.unnamed and tool:
        return ToolError(err.reason, f"{tool} {err.unnamed}", **err.details())
    if isinstance(err, GitLabError):
        return ToolError(err.reason, err.message, **err.details())
    if isinstance(err, InvalidReference):
        message = f"{err.message} {reference_hint}" if reference_hint else err.message
        return ToolError("bad_request", message)
    if isinstance(err, BrokerError):
        return ToolError(err.reason, err.message, **err.details)
    raise TypeError(f"no tool error for {type(err).__name__}")
