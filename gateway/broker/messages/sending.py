"""Sending: ``send_message`` and ``reply_message`` queue one message each.

A send is refused in STOPPED and committed before the recipient's waits are woken: a reply is a
change (``gateway.broker.changes``); a message starting its own thread, the busiest call, is one
statement that changes no state (``gateway.broker.prepared``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from gateway.broker.changes import Changes
from gateway.broker.effects import After, queue_message
from gateway.broker.errors import BrokerError
from gateway.broker.formats import PRIORITIES, iso, new_message_id
from gateway.broker.machine import Event
from gateway.broker.roster import Roster
from gateway.broker.store import PipelineRow, Queries, Store, StoreError

#: How deeply a body may nest (``{}`` is 1). The encoder of the gateway's answers stops at 255
#: levels and wraps a delivered body in several of its own, so a deeper body, once queued, could
#: never be delivered: it would fail every wait of its recipient. No coordination message needs
#: nearly this many.
MAX_BODY_DEPTH = 100


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether the JSON value ``value`` nests more than ``limit`` objects or arrays deep (without
    recursion, so a body of any depth is measured)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


class Sending:
    """The sending side of one broker.

    Args:
        changes: runs replies as changes; the committed state.
        roster: the agents (recipients).
        store: the opened database.
        clock: Unix time source.
        max_message_bytes: the largest body, as JSON (``broker.max_message_bytes``).
    """

    def __init__(
        self,
        changes: Changes,
        roster: Roster,
        store: Store,
        clock: Callable[[], float],
        *,
        max_message_bytes: int = 262_144,
    ) -> None:
        self._changes = changes
        self._roster = roster
        self._store = store
        self._clock = clock
        self._max_message_bytes = max_message_bytes

    def _check_recipient(self, to: str) -> None:
        agents = self._roster.agents
        if to not in agents:
            raise BrokerError(
                "bad_request",
                f"`to`: {to!r} is not an agent of this broker; send to one of: {', '.join(agents)}. "
                "Nothing was sent.",
                agents=list(agents),
            )

    async def send_message(
        self,
        agent: str,
        to: str,
        subject: str,
        body: dict[str, Any],
        priority: str = "normal",
        *,
        reply_to: str | None = None,
    ) -> dict[str, Any]:
        """``send_message`` / ``reply_message``: queue one message; ``{messageId, queued}``.

        With ``reply_to`` the message goes to that message's sender, in its thread, and ``to`` is
        ignored; the result then also has ``to`` and ``threadId``.

        Raises:
            BrokerError: ``bad_request`` for an unknown recipient or a body too large or too
                deeply nested, ``not_found`` for an unknown
                ``reply_to``, ``conflict`` in STOPPED.
        """
        if reply_to is None:
            self._check_recipient(to)
        if _deeper_than(body, MAX_BODY_DEPTH):
            raise BrokerError(
                "bad_request",
                f"`body`: nested more than {MAX_BODY_DEPTH} objects or arrays deep, more than this "
                "broker can deliver. Send a flatter body (or put the structure in GitLab and send "
                "its link). Nothing was sent.",
                limit=MAX_BODY_DEPTH,
            )
        size = len(json.dumps(body, ensure_ascii=False).encode("utf-8"))
        if size > self._max_message_bytes:
            raise BrokerError(
                "bad_request",
                f"`body`: {size} bytes as JSON, over this broker's limit of {self._max_message_bytes} "
                "bytes (broker.max_message_bytes). Send a smaller body: put large content in GitLab "
                "(a file, an issue or a merge request comment) and send its link. Nothing was sent.",
                limit=self._max_message_bytes,
            )

        if reply_to is None:
            return await self._changes.shielded(self._send(agent, to, subject, body, PRIORITIES[priority]))
        return await self._reply(agent, reply_to, subject, body, PRIORITIES[priority])

    async def _reply(
        self, agent: str, reply_to: str, subject: str, body: dict[str, Any], priority: int
    ) -> dict[str, Any]:
        """A reply: a change, as it reads the message it answers (its sender, its thread)."""

        async def run(q: Queries, p: PipelineRow, after: After) -> dict[str, Any]:
            self._changes.decide(p, Event.REPLY_MESSAGE)
            original = await q.message(reply_to)
            if original is None:
                raise BrokerError(
                    "not_found",
                    f"`reply_to`: no message has id {reply_to!r}. Use the messageId of a message you "
                    "received (wait_for_message) or found with get_message_history. Nothing was sent.",
                )
            if original.sender not in self._roster.agents:
                raise BrokerError(
                    "bad_request",
                    f"`reply_to`: message {reply_to} is a notice from the {original.sender}, "
                    "which takes no replies; use send_message to reach an agent. Nothing was sent.",
                )
            message_id = await queue_message(
                q,
                after,
                sender=agent,
                recipient=original.sender,
                subject=subject,
                body=body,
                priority=priority,
                created_at=iso(self._clock()),
                reply_to=reply_to,
                thread_id=original.thread_id,
            )
            return {
                "messageId": message_id,
                "queued": True,
                "to": original.sender,
                "threadId": original.thread_id,
            }

        return await self._changes.run(agent, run, lock="share", save_seen=False)

    async def _send(
        self, agent: str, to: str, subject: str, body: dict[str, Any], priority: int
    ) -> dict[str, Any]:
        """A message that starts its own thread: one statement (the busiest change, kept short:
        sending changes no state, so it needs neither the change unit's transaction nor a log line)."""
        message_id = new_message_id()
        async with self._store.write_one() as q:
            queued = await q.queue_if_running(
                id=message_id,
                sender=agent,
                recipient=to,
                subject=subject,
                body=body,
                priority=priority,
                created_at=iso(self._clock()),
            )
        if not queued:
            async with self._store.read() as q:
                p = await q.pipeline()
            self._changes.decide(p, Event.SEND_MESSAGE)  # STOPPED: refused, saying by whom and when
            raise StoreError(f"message to {to} not queued in state {p.state}")  # only a stop does that
        after = After()
        after.sent.append(to)
        after.wake.add(to)
        self._changes.after_commit(after)
        return {"messageId": message_id, "queued": True}
