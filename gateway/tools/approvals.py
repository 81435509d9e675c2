"""Confirmations an operator gives (``confirm_by = "operator"``): outside the agent's reach.

A destructive call records a pending approval in the broker's database
(``gateway.broker.confirmations``) with who asked (the agent, its address), what would be done
(the question a person would be asked) and why (the agent's ``reason``, when the tool takes one),
and waits up to ``confirm_wait_seconds`` for an operator to approve or refuse it, in the console
(``/broker``, an operator sign-in) or with ``gitlab-mcp-gateway broker confirmations | approve
TICKET | refuse TICKET``. For a client of the MCP tasks extension the call is a task meanwhile;
other clients hold the request (over SSE with keep-alives where the transport streams).

What it guarantees, and against whom: neither the agent nor anything holding only its client
token or GitLab credential can approve; only a console operator token or the gateway's own user
(the command line, the operator socket) can. An approval acts once: it is taken
(``approved`` → ``taken``, one statement) just before the action, and the same call made again
afterwards asks anew. A refusal is final for that call (the same call made again within the hour
is refused at once, ``declined``). An action that failed before GitLab accepted it gives its
approval back, so calling again acts without asking twice. A call whose wait ran out ends with
the ticket; calling again with the same arguments waits on the same ticket, and picks up the
decision taken meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Final

from gateway.errors import ToolError
from gateway.tools.confirm_records import declined_error, failed_before_gitlab, record_of, recording
from gateway.tools.context import ToolContext

log = logging.getLogger("gateway.confirmations")

#: How long an approval is kept: pending, decided or refused (seconds).
APPROVAL_KEEP_SECONDS: Final = 3600.0
#: How often a waiting call looks at its approval (one indexed read).
LOOK_SECONDS: Final = 1.0


def approval_key(ctx: ToolContext, tool: str, question: str) -> str:
    """What an approval is bound to: the caller, the tool and what it would do. Never the
    agent's ``reason``: a refusal is of the action, and rewording why does not make it another
    call (nor does it reopen a decided one)."""
    caller = ctx.call.caller
    digest = hashlib.sha256(
        f"{caller.owner}\x00{caller.agent_id}\x00{tool}\x00{question}".encode()
    ).hexdigest()
    return f"approval:{digest}"


@contextlib.asynccontextmanager
async def operator_approval(
    ctx: ToolContext, *, tool: str, question: str, declined: str, why: str | None
) -> AsyncIterator[None]:
    """Enter once an operator approved this call (see the module docs).

    Raises:
        ToolError: ``declined`` when the operator refused; ``conflict`` when the wait ran out
            (``ticket`` and ``pending: true`` in the details) or the approval was taken by another
            call; ``unauthorized`` without the broker's database.
    """
    record = record_of(ctx)
    if record is None:
        raise ToolError(
            "unauthorized",
            f'{tool} needs an operator\'s approval on this gateway (confirm_by = "operator") and the '
            "gateway runs without its broker database, where approvals are kept. Nothing was done.",
        )
    caller = ctx.call.caller
    who = caller.agent_id or "a caller without an agent id"
    if caller.remote:
        who += f" (from {caller.remote})"
    key = approval_key(ctx, tool, question)
    with recording(tool):
        approval = await record.request(
            key, agent=who, tool=tool, what=question, why=why, ttl_seconds=APPROVAL_KEEP_SECONDS
        )
    if approval.status == "pending":
        broker = ctx.services.broker
        if broker is not None:
            broker.feed.changed()  # the consoles show it now
        log.info(
            "confirmation %s waits for an operator: %s asks %s",
            approval.ticket,
            who,
            tool,
            extra={"request_id": ctx.call.request_id, "tool": tool},
        )
    waited_until = time.monotonic() + ctx.settings.confirm_wait_seconds
    while approval.status == "pending":
        left = waited_until - time.monotonic()
        if left <= 0:
            # Only the ways this gateway offers: the console is named only when it is served.
            where = "in the gateway's console (/broker) or " if ctx.settings.console.enabled else ""
            raise ToolError(
                "conflict",
                f"{tool} waits for an operator's approval (ticket {approval.ticket}), and none came within "
                f"{int(ctx.settings.confirm_wait_seconds)} s. Nothing was done yet. Ask a person to approve "
                f"or refuse ticket {approval.ticket} {where}with "
                f"`gitlab-mcp-gateway broker approve {approval.ticket}`, then call {tool} again with the "
                "same arguments: it picks up the decision.",
                ticket=approval.ticket,
                pending=True,
            )
        await ctx.progress(0, None, f"waiting for an operator's approval (ticket {approval.ticket})")
        await asyncio.sleep(min(LOOK_SECONDS, left))
        with recording(tool):
            current = await record.approval(key)
        if current is None:
            raise ToolError(
                "conflict",
                f"The approval {tool} waited for (ticket {approval.ticket}) expired. Nothing was done; call "
                f"{tool} again to ask anew.",
            )
        approval = current
    if approval.status == "refused":
        by = f"The operator ({approval.decided_by})" if approval.decided_by else "The operator"
        raise declined_error(tool, declined, by=by, note=approval.note)
    with recording(tool):
        taken = approval.status == "approved" and await record.take_approved(key)
    if not taken:
        raise ToolError(
            "conflict",
            f"This approval (ticket {approval.ticket}) was already acted on by another call, so {tool} did "
            "not act a second time. Check the current state; a new call asks again.",
        )
    log.info(
        "confirmation %s approved by %s: %s acts",
        approval.ticket,
        approval.decided_by,
        tool,
        extra={"request_id": ctx.call.request_id, "tool": tool},
    )
    try:
        yield
    except BaseException as err:
        if failed_before_gitlab(err):
            with contextlib.suppress(Exception):
                await record.give_back(key)
        raise
    with contextlib.suppress(Exception):
        await record.finish(key)
