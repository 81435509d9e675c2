"""A person's confirmation before a destructive action (``confirm_destructive``).

Off by default. ``confirm_destructive = true`` turns it on for a deployment, and a client token's
``confirm_destructive = true`` for that token's callers (a token can ask for confirmations, never
waive the deployment's). Then a tool asks before it acts, with an elicitation
(https://modelcontextprotocol.io/specification/2025-11-25/client/elicitation; in 2026-07-28 an
input-required result, ``gateway.tools.input_requests``), and:

- acts only on an accepted answer whose ``confirm`` is true: "no", a declined or cancelled
  elicitation, or no answer sends nothing;
- acts once per answer: the same answered request sent again (a client retrying after a lost
  response) is refused rather than acted on again;
- refuses, with a tool error that says how to proceed, when the client cannot show a question to
  a person (no ``elicitation`` capability). There is deliberately no ``confirm: true`` argument to
  skip the question: the agent that calls the tool would set it itself, and the point is that a
  person decides. Where no person can answer, the operator turns confirmations off for that token.
"""

from __future__ import annotations

from typing import Any, Final

from gateway.errors import ToolError
from gateway.tools.context import ToolContext
from gateway.tools.input_requests import CannotAsk, elicit

#: The key of the question in ``inputRequests``.
KEY: Final = "confirm"


def confirmations_on(ctx: ToolContext) -> bool:
    """Whether this call must be confirmed: the deployment's setting or the caller's token."""
    return bool(ctx.settings.confirm_destructive or ctx.call.caller.confirm_destructive)


async def confirm(ctx: ToolContext, *, tool: str, question: str, declined: str) -> None:
    """Return once a person confirmed ``question``; raise otherwise. A no-op when confirmations
    are off.

    Args:
        tool: the tool's name, for messages.
        question: what the person is asked, in full (what will happen to what).
        declined: what was not done, for the error a "no" gets.

    Raises:
        ToolError: ``unauthorized`` when the client cannot ask a person, the person said no or
            did not answer (nothing was done); ``conflict`` when this answer was already acted on.
    """
    if not confirmations_on(ctx):
        return
    if not ctx.can_ask("elicitation/create"):
        raise ToolError(
            "unauthorized",
            f"{tool} needs a person's confirmation on this gateway (confirm_destructive is on), and "
            "your MCP client cannot show one: it did not declare the `elicitation` capability. Nothing "
            "was done. Ask a person to run this from a client that supports elicitation, or ask the "
            "gateway's operator to turn confirmations off (confirm_destructive, for the deployment or "
            "for your client token).",
        )
    schema = {
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
    try:
        answers = await ctx.ask({KEY: elicit(question, schema)})
    except CannotAsk:
        raise ToolError(
            "unauthorized",
            f"{tool} needs a person's confirmation and got no answer (the question went unanswered "
            f"or the client could not show it). Nothing was done: {declined} Call {tool} again to be "
            "asked again.",
        ) from None
    if not _accepted(answers[KEY]):
        raise ToolError(
            "unauthorized",
            f"The person asked did not confirm, so nothing was done: {declined} Do not call {tool} "
            "again for this unless they ask you to.",
        )
    if not answers.claim():
        raise ToolError(
            "conflict",
            f"This confirmation was already acted on (the same answered request came again), so {tool} "
            "did not act a second time. Check the current state before you call it again; a new call "
            "asks again.",
        )


def _accepted(answer: Any) -> bool:
    if not isinstance(answer, dict) or answer.get("action") != "accept":
        return False
    content = answer.get("content")
    return isinstance(content, dict) and content.get("confirm") is True
