"""What the people behind the agents do: instruct the PM, switch auto-advance, stop, start over.

Used by the live console (``gateway.console``) and the command line (``gitlab-mcp-gateway
broker``). Each action is a change like an agent's (``gateway.broker.changes``), and its line in
``pipeline.log`` names the operator (``operator:alice``): the audit trail of who did what.

- :meth:`Operator.instruct` sends the PM a ``human`` message (high priority, from ``human``): the
  PM reads it and calls ``resume``, as the broker's rules want (only the PM resumes).
- :meth:`Operator.decide` approves or refuses a destructive action an agent asked for where an
  operator confirms them (``confirm_by = "operator"``, ``gateway.tools.approvals``), by its
  ticket; no agent can.
- :meth:`Operator.start_over` is the other thing no agent can do: after ``stop_pipeline``, archive
  the stopped pipeline (messages, transitions and activity logs move to the ``archived_*``
  tables under its generation number; nothing is deleted) and start a new one in ``IDLE``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.broker.changes import Changes
from gateway.broker.confirmations import ConfirmationStore
from gateway.broker.control import PM, Control
from gateway.broker.effects import After, Facts, queue_message
from gateway.broker.errors import BrokerError
from gateway.broker.formats import PRIORITIES, iso
from gateway.broker.machine import Event, State
from gateway.broker.plan import Plan
from gateway.broker.store import PipelineRow, Queries

#: The sender of an operator's instruction, and its subject.
HUMAN = "human"
#: How an operator is named in the logs: ``operator:alice``.
OPERATOR_PREFIX = "operator:"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}")
#: The longest instruction, in characters (a message coordinates; details belong in GitLab).
MAX_INSTRUCTION_CHARS = 20_000
#: The longest note an operator adds to a decision (the agent reads it).
MAX_NOTE_CHARS = 2_000

log = logging.getLogger("gateway.confirmations")


def operator_name(name: str | None, default: str = "operator") -> str:
    """``name`` when it is a plain name (letters, digits, ``._@+-``, at most 64), else ``default``."""
    name = (name or "").strip()
    return name if _NAME.fullmatch(name) else default


def operator_label(name: str) -> str:
    """``operator:alice``: who an action is by, in the logs and messages."""
    return f"{OPERATOR_PREFIX}{operator_name(name)}"


class Operator:
    """The actions of people on one broker.

    Args:
        changes: runs each action as a change.
        plan: the auto-advance switch.
        control: the stop.
        clock: Unix time source.
    """

    def __init__(
        self,
        changes: Changes,
        plan: Plan,
        control: Control,
        clock: Callable[[], float],
        confirmations: ConfirmationStore,
    ) -> None:
        self._changes = changes
        self._plan = plan
        self._control = control
        self._clock = clock
        self._confirmations = confirmations

    async def pending_confirmations(self) -> dict[str, Any]:
        """``{pending: [approval, ...]}``: the destructive actions waiting for an operator, with
        who asked, what would be done and why, oldest first."""
        return {"pending": [a.to_json() for a in await self._confirmations.pending()]}

    async def decide(self, name: str, ticket: str, *, approve: bool, note: str | None) -> dict[str, Any]:
        """Approve or refuse the pending confirmation ``ticket``; the approval as it is now.

        Raises:
            BrokerError: ``not_found`` for a ticket that is not pending (unknown, expired, decided).
        """
        who = operator_label(name)
        note = (note or "").strip()[:MAX_NOTE_CHARS] or None
        approval = await self._confirmations.decide(ticket.strip(), approve=approve, operator=who, note=note)
        log.info(
            "confirmation %s %s by %s: %s asked %s",
            approval.ticket,
            approval.status,
            who,
            approval.agent,
            approval.tool,
        )
        self._changes.feed.changed()
        return approval.to_json()

    async def generations(self) -> dict[str, Any]:
        """``{generation, archives}``: which pipeline this is, and the archived ones, newest first."""
        async with self._changes.store.read() as q:
            p = await q.pipeline()
            archives = await q.archives()
        return {"generation": p.generation, "archives": archives}

    async def instruct(self, name: str, text: str) -> dict[str, Any]:
        """Send the PM a high-priority ``human`` message ``{text, operator, state}``;
        ``{messageId, to, state}`` (the pipeline's state it was sent in).

        Raises:
            BrokerError: ``bad_request`` for an empty or too long text; ``conflict`` in STOPPED.
        """
        text = text.strip()
        if not text:
            raise BrokerError("bad_request", "The instruction is empty: write what the PM should do.")
        if len(text) > MAX_INSTRUCTION_CHARS:
            raise BrokerError(
                "bad_request",
                f"The instruction has {len(text)} characters, over {MAX_INSTRUCTION_CHARS}: put the details "
                "in GitLab (an issue or a comment) and send its link.",
            )
        who = operator_label(name)

        async def body(q: Queries, p: PipelineRow, after: After) -> dict[str, Any]:
            self._changes.decide(p, Event.SEND_MESSAGE)
            message_id = await queue_message(
                q,
                after,
                sender=HUMAN,
                recipient=PM,
                subject=HUMAN,
                body={"text": text, "operator": who, "state": p.state.value},
                priority=PRIORITIES["high"],
                created_at=iso(self._clock()),
            )
            shown = text if len(text) <= 200 else text[:200] + "…"
            after.pipeline_log.append((who, f"instruction {message_id} to {PM} in {p.state}: {shown}"))
            return {"messageId": message_id, "to": PM, "state": p.state.value}

        return await self._changes.run(who, body, lock="share", save_seen=False)

    async def set_auto_advance(self, name: str, enabled: bool) -> dict[str, Any]:
        """Switch auto-advance on or off (off drops an advance under way; the state stays IDLE)."""
        return await self._plan.set_auto_advance(operator_label(name), enabled)

    async def cancel_auto_advance(self, name: str) -> dict[str, Any]:
        """Cancel the auto-advance under way: PAUSED until the PM resumes."""
        who = operator_label(name)
        return await self._plan.cancel_auto_advance(who, f"cancelled by {who}")

    async def stop(self, name: str) -> dict[str, Any]:
        """``stop_pipeline`` by a person: STOPPED until someone starts over."""
        return await self._control.stop_pipeline(operator_label(name))

    async def start_over(self, name: str) -> dict[str, Any]:
        """Archive the stopped pipeline and start a new one in IDLE.

        Returns ``{success, state, generation, archived: {generation, messages, transitions, logLines}}``.

        Raises:
            BrokerError: ``conflict`` unless the pipeline is STOPPED (stop it first).
        """
        who = operator_label(name)

        async def body(q: Queries, p: PipelineRow, after: After) -> dict[str, Any]:
            if p.state is not State.STOPPED:
                raise BrokerError(
                    "conflict",
                    f"The pipeline is {p.state}, not STOPPED: only a stopped pipeline can be started over. "
                    "Stop it first (the agents are told), then start over. Nothing was changed.",
                    state=p.state.value,
                    allowed_states=[State.STOPPED.value],
                )
            now = self._clock()
            counts = await q.archive_pipeline(p, iso(now), who)
            fresh = await q.pipeline("update")
            await self._changes.apply(q, fresh, Event.START_OVER, Facts(agent=who, now=now), after)
            after.reset = True
            after.results["archivedGeneration"] = p.generation
            after.pipeline_log.append(
                (
                    who,
                    f"started over: pipeline {p.generation} (stopped by {p.stopped_by} at "
                    f"{p.stopped_at}) archived with {counts['messages']} "
                    f"message{'' if counts['messages'] == 1 else 's'}; pipeline "
                    f"{fresh.generation} starts in IDLE",
                )
            )
            return {
                "success": True,
                "state": State.IDLE.value,
                "generation": fresh.generation,
                "archived": {"generation": p.generation, **counts},
            }

        return await self._changes.run(who, body, save_seen=False)


#: What people can do, by name (the operator socket's and the command line's names):
#: ``(operator, name, arguments) -> result``.
ACTIONS: dict[str, Callable[[Operator, str, dict[str, Any]], Awaitable[dict[str, Any]]]] = {
    "instruct": lambda op, name, args: op.instruct(name, str(args.get("text", ""))),
    "stop": lambda op, name, args: op.stop(name),
    "reset": lambda op, name, args: op.start_over(name),
    "auto-advance": lambda op, name, args: op.set_auto_advance(name, args.get("enabled") is True),
    "cancel-advance": lambda op, name, args: op.cancel_auto_advance(name),
    "approve": lambda op, name, args: op.decide(
        name, str(args.get("ticket", "")), approve=True, note=_note(args)
    ),
    "refuse": lambda op, name, args: op.decide(
        name, str(args.get("ticket", "")), approve=False, note=_note(args)
    ),
}


def _note(args: dict[str, Any]) -> str | None:
    note = args.get("note")
    return note if isinstance(note, str) else None
