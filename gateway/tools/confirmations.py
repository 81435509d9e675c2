"""A person's confirmation before a destructive action (``confirm_destructive``, ``confirm_by``).

Off by default. ``confirm_destructive = true`` turns it on for a deployment, and a client token's
``confirm_destructive = true`` for that token's callers (a token can ask for confirmations, never
waive the deployment's); ``confirm_by = "operator"`` turns it on for every caller. A handler wraps
its action: ``async with confirmation(ctx, tool=..., question=..., declined=...): <act>``.

Who answers (``confirm_by``), and what each guarantees:

- ``client`` (default): the question goes to the agent's MCP client, an elicitation
  (https://modelcontextprotocol.io/specification/2025-11-25/client/elicitation; in 2026-07-28 an
  input-required result, ``gateway.tools.input_requests``), which shows it to its person. It
  guards honest clients: an agent whose client shows questions to a person cannot act without
  that person's "yes". It does not guard against an agent that answers its own question (the
  answer travels through the agent's own client, and a script holding the client token can send
  it): for that, use ``operator``.
- ``operator``: the call waits while an operator approves or refuses it outside the agent's
  reach, in the console or with the ``broker`` command line (``gateway.tools.approvals``).
  Nothing the agent can send alone completes the action.

In both modes:

- the action runs only on a "yes": a "no", a declined or cancelled elicitation, or no answer sends
  nothing, and a "no" is the tool error ``declined``;
- one answer, one action, on every replica and after a restart: the answer is recorded in the
  broker's database (``gateway.broker.confirmations``) by the statement that decides to act, so
  the same answered request sent again (a client retrying after a lost response, a replay on
  another replica) is refused (``conflict``); a "no" is recorded too, and a later "yes" with the
  same request state does not act (``declined``);
- an action that failed before GitLab accepted it (GitLab answered 503, say) gives its answer
  back: the same answer may be sent again. One whose outcome is unknown does not.

A client that cannot show a question (no ``elicitation`` capability) is refused with a tool error
that says how to proceed. There is deliberately no ``confirm: true`` argument to skip the
question: the agent that calls the tool would set it itself.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any, Final

from gateway.errors import ToolError
from gateway.tools.approvals import operator_approval
from gateway.tools.confirm_records import declined_error, failed_before_gitlab, record_of, recording
from gateway.tools.context import ToolContext
from gateway.tools.input_requests import CannotAsk, elicit

log = logging.getLogger(__name__)

#: The key of the question in ``inputRequests``.
KEY: Final = "confirm"
#: How long an answer is remembered: as long as the request state it came with is valid (the
#: protocol core's ``STATE_TTL_SECONDS``), with a margin for clocks that differ between replicas.
ANSWER_KEEP_SECONDS: Final = 900.0 + 300.0
SCHEMA: Final = {
    "type": "object",
    "properties": {
        "confirm": {
            "type": "boolean",
            "title": "Go ahead",
            "description": "true to go ahead; false to leave everything as it is.",
        }
    },
    "required": ["confirm"],
}


def confirmations_on(ctx: ToolContext) -> bool:
    """Whether this call must be confirmed: the deployment's setting, the caller's token, or
    operator mode."""
    settings = ctx.settings
    return bool(
        settings.confirm_destructive
        or ctx.call.caller.confirm_destructive
        or settings.confirm_by == "operator"
    )


@contextlib.asynccontextmanager
async def confirmation(
    ctx: ToolContext, *, tool: str, question: str, declined: str, why: str | None = None
) -> AsyncIterator[None]:
    """Enter once ``question`` is confirmed (at once when confirmations are off); run the action
    inside. See the module docs.

    Args:
        tool: the tool's name, for messages.
        question: what the person is asked, in full (what will happen to what).
        declined: what was not done, for the error a "no" gets.
        why: the agent's reason, shown to an operator.

    Raises:
        ToolError: ``declined`` for a "no"; ``unauthorized`` when the client cannot ask a person or
            no answer came; ``conflict`` when this answer was already acted on.
    """
    if not confirmations_on(ctx):
        yield
        return
    if ctx.settings.confirm_by == "operator":
        async with operator_approval(ctx, tool=tool, question=question, declined=declined, why=why):
            yield
        return
    key = await _client_answer(ctx, tool=tool, question=question, declined=declined)
    record = record_of(ctx)
    if key is None or record is None:
        yield
        return
    try:
        yield
    except BaseException as err:
        if failed_before_gitlab(err):
            try:
                await record.release(key)
            except Exception:
                log.warning("a confirmation's answer could not be given back", exc_info=True)
        raise


async def _client_answer(ctx: ToolContext, *, tool: str, question: str, declined: str) -> str | None:
    """Ask the client; return the key its "yes" is recorded under (None: not replayable)."""
    if not ctx.can_ask("elicitation/create"):
        raise ToolError(
            "unauthorized",
            f"{tool} needs a person's confirmation on this gateway (confirm_destructive is on), and "
            "your MCP client cannot show one: it did not declare the `elicitation` capability. Nothing "
            "was done. Ask a person to run this from a client that supports elicitation, or ask the "
            "gateway's operator to turn confirmations off (confirm_destructive, for the deployment or "
            "for your client token).",
        )
    try:
        answers = await ctx.ask({KEY: elicit(question, SCHEMA)})
    except CannotAsk:
        raise ToolError(
            "unauthorized",
            f"{tool} needs a person's confirmation and got no answer (the question went unanswered "
            f"or the client could not show it). Nothing was done: {declined} Call {tool} again to be "
            "asked again.",
        ) from None
    key = None if answers.once is None else f"answer:{answers.once}"
    record = record_of(ctx)
    if not _accepted(answers[KEY]):
        if key is not None and record is not None:
            with recording(tool):
                await record.decline(key, ANSWER_KEEP_SECONDS)
        raise declined_error(tool, declined)
    if key is None or record is None:
        return None
    with recording(tool):
        taken = await record.take(key, ANSWER_KEEP_SECONDS)
    if taken == "declined":
        raise ToolError(
            "declined",
            f"The person asked already said no to this very request, and a no is final: nothing was done "
            f"({declined}) Call {tool} again, without requestState, to ask anew.",
        )
    if taken == "already_taken":
        raise ToolError(
            "conflict",
            f"This confirmation was already acted on (the same answered request came again), so {tool} "
            "did not act a second time. Check the current state before you call it again; a new call "
            "asks again.",
        )
    return key


def _accepted(answer: Any) -> bool:
    if not isinstance(answer, dict) or answer.get("action") != "accept":
        return False
    content = answer.get("content")
    return isinstance(content, dict) and content.get("confirm") is True
