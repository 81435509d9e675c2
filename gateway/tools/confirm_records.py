"""What both ways of confirming a destructive action share (``gateway.tools.confirmations``,
``gateway.tools.approvals``): the shared record, the error of a "no", and whether a failed action
may give its answer back."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from gateway.broker.database import StoreError
from gateway.broker.errors import BrokerError
from gateway.errors import ToolError
from gateway.gitlab.errors import GitLabMaybeSent
from gateway.tools.context import ToolContext

if TYPE_CHECKING:
    from gateway.broker.confirmations import ConfirmationStore

log = logging.getLogger("gateway.confirmations")


def record_of(ctx: ToolContext) -> ConfirmationStore | None:
    """The shared record of confirmations (None where the app runs without a broker: tests of
    single tools, where an answer is not remembered)."""
    broker = ctx.services.broker
    return None if broker is None else broker.confirmations


@contextlib.contextmanager
def recording(tool: str) -> Iterator[None]:
    """Around a read or write of the record before the action: a database that cannot serve it
    is a tool error saying nothing was done (not an internal error)."""
    try:
        yield
    except StoreError:
        log.warning("a confirmation could not be recorded", exc_info=True)
        raise ToolError(
            "upstream_error",
            f"The gateway's database, where confirmations are recorded, could not be reached, so {tool} "
            "did nothing. Try again in a few seconds.",
        ) from None


def declined_error(
    tool: str, declined: str, by: str = "The person asked", note: str | None = None
) -> ToolError:
    """The error of a "no": nothing was done, and the agent should not insist."""
    said = f" They said: {note}" if note else ""
    return ToolError(
        "declined",
        f"{by} did not confirm, so nothing was done: {declined}{said} Do not call {tool} again for this "
        "unless they ask you to.",
    )


def failed_before_gitlab(err: BaseException) -> bool:
    """Whether a failed action certainly changed nothing, so its answer may be used again: any
    failure but one whose outcome is unknown (a request that may have reached GitLab, a broker
    change whose commit was not confirmed) or a cancelled call."""
    if not isinstance(err, Exception) or isinstance(err, GitLabMaybeSent):
        return False
    if isinstance(err, BrokerError):
        return err.reason != "upstream_error"
    return not (isinstance(err, ToolError) and err.details.get("outcome") == "unknown")
