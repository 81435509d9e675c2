"""Messages between agents: send and reply, wait with leases and delivery callbacks, history.

Contract: broker.md ("send_message", "reply_message", "wait_for_message", "get_message_history",
"Delivery"). A send is refused in STOPPED and committed before the recipient's waits are woken:
a reply is a change (``gateway.broker.changes``); a message starting its own thread, the busiest
call, is one statement that changes no state (``gateway.broker.prepared``).

Delivery (broker.md "Delivery"; MCP basic/utilities/cancellation): :meth:`Messages.wait_for_message`
claims the first free message of the caller (priority, then age) with a lease in the database
(``broker.lease_seconds``; ``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so waits on several replicas
never take the same message) and returns two callbacks, the one interface this module has with
the transport: the message leaves its queue only when the transport reports the answer as
written (``on_delivered``, an acknowledgement fenced by the lease's token); a cancelled wait or a
client that went away (``on_abandoned``) gives the lease back. A replica that dies in between
leaves the lease to run out, and the message goes out again, through any replica, with the same
``messageId`` and a higher ``deliveryAttempt``: delivery is at-least-once.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import SQLAlchemyError

from gateway.broker.changes import Changes
from gateway.broker.effects import After, queue_message
from gateway.broker.errors import BrokerError
from gateway.broker.formats import PRIORITIES, PRIORITY_NAMES, iso, new_message_id
from gateway.broker.machine import Event, Refused, State, decide
from gateway.broker.roster import Roster
from gateway.broker.store import MessageRow, PipelineRow, Queries, Store, StoreError
from gateway.broker.wakeups import Wakeups

if TYPE_CHECKING:
    from gateway.observability.metrics import Metrics

log = logging.getLogger(__name__)

#: ``await progress(elapsed, total, message)``, as ``ToolContext.progress``.
ProgressFn = Callable[[float, float | None, str | None], Awaitable[None]]


@dataclass
class WaitOutcome:
    """What :meth:`Messages.wait_for_message` ended with.

    Attributes:
        message: the leased message (see :func:`message_json`), or None.
        timed_out: the timeout passed with nothing to deliver.
        stopped: the pipeline was stopped while waiting.
        shutdown: the gateway is shutting down; reconnect and wait again.
        reason: why a stop or shutdown ended the wait.
        waited_seconds: how long the call waited.
        on_delivered / on_abandoned: for a message, the lease's end (see the module docstring).
        read_check_seconds: for a message to an agent that does not acknowledge, how long the
            transport should watch for a reset (the client closed without reading the answer)
            before it reports the answer delivered; None: no check.
    """

    message: dict[str, Any] | None = None
    timed_out: bool = False
    stopped: bool = False
    shutdown: bool = False
    reason: str | None = None
    waited_seconds: float = 0.0
    on_delivered: Callable[[], Awaitable[None]] | None = None
    on_abandoned: Callable[[], Awaitable[None]] | None = None
    read_check_seconds: float | None = None


def message_json(m: MessageRow) -> dict[str, Any]:
    """A message as tools show it.

    ``{messageId, from, to, subject, body, priority, replyTo, threadId, createdAt,
    deliveryAttempt, delivered}``; ``deliveryAttempt`` > 1 means an earlier answer carrying
    this message may have reached the receiver (at-least-once delivery).
    """
    return {
        "messageId": m.id,
        "from": m.sender,
        "to": m.recipient,
        "subject": m.subject,
        "body": m.body,
        "priority": PRIORITY_NAMES.get(m.priority, "normal"),
        "replyTo": m.reply_to,
        "threadId": m.thread_id,
        "createdAt": m.created_at,
        "deliveryAttempt": m.delivery_attempts,
        "delivered": m.delivered_at is not None,
    }


class Messages:
    """The message side of one broker.

    Args:
        changes: runs sends as changes; shields leases; the committed state.
        roster: the agents (recipients, ``lastSeen`` at the end of a wait).
        wakeups: this process's open waits.
        store: the opened database.
        metrics: the app's metrics.
        clock: Unix time source.
        progress_interval_seconds: default interval of a wait's progress notifications
            (``broker.progress_interval_seconds``).
        closing: the shutdown reason, or None while the broker runs.
    """

    def __init__(
        self,
        changes: Changes,
        roster: Roster,
        wakeups: Wakeups,
        store: Store,
        metrics: Metrics,
        clock: Callable[[], float],
        *,
        progress_interval_seconds: float,
        lease_seconds: float,
        recheck_seconds: float,
        ack_timeout_seconds: float = 300.0,
        read_check_seconds: float = 0.0,
        max_message_bytes: int = 262_144,
        history_page_bytes: int = 1_048_576,
        history_item_bytes: int = 65_536,
        closing: Callable[[], str | None],
    ) -> None:
        self._changes = changes
        self._roster = roster
        self._wakeups = wakeups
        self._lease_seconds = lease_seconds
        self._recheck = recheck_seconds
        #: lease token → message id, for leases this process holds and has not ended.
        self._held: dict[str, str] = {}
        self._store = store
        self._metrics = metrics
        self._clock = clock
        self._progress_interval = progress_interval_seconds
        self._closing = closing
        self._max_message_bytes = max_message_bytes
        self._ack_timeout = ack_timeout_seconds
        self._read_check = read_check_seconds
        #: Agents known to acknowledge (never forgotten: an agent that acknowledges always does).
        self._acknowledging: set[str] = set()
        self._history_page_bytes = history_page_bytes
        self._history_item_bytes = history_item_bytes

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
            BrokerError: ``bad_request`` for an unknown recipient, ``not_found`` for an unknown
                ``reply_to``, ``conflict`` in STOPPED.
        """
        if reply_to is None:
            self._check_recipient(to)
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

        async def run(q: Queries, p: PipelineRow, after: After) -> dict[str, Any]:
            self._changes.decide(p, Event.REPLY_MESSAGE if reply_to is not None else Event.SEND_MESSAGE)
            recipient, thread = to, None
            if reply_to is not None:
                original = await q.message(reply_to)
                if original is None:
                    raise BrokerError(
                        "not_found",
                        f"`replyTo`: no message has id {reply_to!r}. Use the messageId of a message you "
                        "received (wait_for_message) or found with get_message_history. Nothing was sent.",
                    )
                if original.sender not in self._roster.agents:
                    raise BrokerError(
                        "bad_request",
                        f"`replyTo`: message {reply_to} is a notice from the {original.sender}, "
                        "which takes no replies; use send_message to reach an agent. Nothing was sent.",
                    )
                recipient, thread = original.sender, original.thread_id
            message_id = await queue_message(
                q,
                after,
                sender=agent,
                recipient=recipient,
                subject=subject,
                body=body,
                priority=PRIORITIES[priority],
                created_at=iso(self._clock()),
                reply_to=reply_to,
                thread_id=thread,
            )
            out: dict[str, Any] = {"messageId": message_id, "queued": True}
            if reply_to is not None:
                out["to"] = recipient
                out["threadId"] = thread
            return out

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

    async def wait_for_message(
        self,
        agent: str,
        seconds: float,
        progress: ProgressFn | None = None,
        progress_interval: float | None = None,
        ack: list[str] | None = None,
    ) -> WaitOutcome:
        """Block until ``agent``'s queue has a message it can lease, ``seconds`` pass, the pipeline
        stops or the gateway shuts down.

        Args:
            agent: the caller (already authorized).
            seconds: the longest wait; 0 looks without waiting.
            ack: messageIds the agent has processed (taken off its queue first); sending it, even
                empty, makes the agent one that acknowledges, for good.
            progress: ``await progress(elapsed, seconds, text)`` every ``progress_interval``
                seconds (``broker.progress_interval_seconds``) while waiting; None: no progress.

        Raises:
            BrokerError: ``conflict`` when the pipeline is STOPPED.
        """
        loop = asyncio.get_running_loop()
        start = loop.time()
        if (closing := self._closing()) is not None:
            return WaitOutcome(shutdown=True, reason=closing)
        if ack is not None:
            await self._changes.shielded(self._acknowledge(agent, ack))
        interval = progress_interval or self._progress_interval
        deadline = start + seconds
        next_progress = start + interval
        first, force = True, False
        # Subscribe before looking: a message committed after the look still wakes this wait.
        with self._wakeups.subscribe(agent) as wake:
            self._metrics.broker_waits_open.inc()
            try:
                while True:
                    if (closing := self._closing()) is not None:
                        return WaitOutcome(shutdown=True, reason=closing, waited_seconds=loop.time() - start)
                    wake.clear()
                    state, row = await self._lease(agent, force)
                    if state is State.STOPPED:
                        if first:
                            try:
                                decide(State.STOPPED, Event.WAIT_FOR_MESSAGE)
                            except Refused as err:
                                async with self._store.read() as q:
                                    p = await q.pipeline()
                                raise self._changes.refusal(p, err) from None
                        return WaitOutcome(
                            stopped=True,
                            reason="stop_pipeline was called",
                            waited_seconds=loop.time() - start,
                        )
                    first = False
                    if row is not None:
                        delivered, abandoned = self._lease_callbacks(agent, row)
                        # An agent that acknowledges gets the message again when it does not
                        # acknowledge it; one that does not is saved what a reset shows it missed.
                        acknowledges = row.acknowledges or agent in self._acknowledging
                        check = None if acknowledges or not self._read_check else self._read_check
                        return WaitOutcome(
                            message=message_json(row),
                            waited_seconds=loop.time() - start,
                            on_delivered=delivered,
                            on_abandoned=abandoned,
                            read_check_seconds=check,
                        )
                    now = loop.time()
                    if now >= deadline:
                        return WaitOutcome(timed_out=True, waited_seconds=now - start)
                    recheck = now + self._recheck
                    until = min(deadline, recheck)
                    if progress is not None:
                        until = min(until, next_progress)
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout_at(until):
                            await wake.wait()
                    now = loop.time()
                    force = now >= recheck  # the safety net always asks the database
                    if progress is not None and now >= next_progress:
                        next_progress = now + interval
                        elapsed = now - start
                        try:
                            await progress(
                                elapsed, seconds, f"waiting for a message, {int(elapsed)} s elapsed"
                            )
                        except Exception as err:  # a gone client shows up as a cancel; best-effort
                            log.debug("progress notification failed: %s", err)
            finally:
                self._metrics.broker_waits_open.dec()
                self._roster.seen(agent)

    async def _acknowledge(self, agent: str, ids: list[str]) -> None:
        async with self._store.write() as q:
            if agent not in self._acknowledging:
                await q.set_acknowledges(agent)
            done = await q.acknowledge_ids(agent, ids, iso(self._clock()))
        self._acknowledging.add(agent)
        if done:
            self._metrics.broker_messages_delivered.labels(agent).inc(done)

    async def _lease(self, agent: str, force: bool = True) -> tuple[State, MessageRow | None]:
        """Lease ``agent``'s next message, shielded: a cancelled caller gives back what was leased."""

        def give_back(out: tuple[State, MessageRow | None]) -> None:
            row = out[1]
            if row is not None and row.lease_token is not None:
                self._changes.spawn(self._release(agent, row.id, row.lease_token))

        return await self._changes.shielded(self._lease_now(agent, force), if_cancelled=give_back)

    async def _lease_now(self, agent: str, force: bool) -> tuple[State, MessageRow | None]:
        if not force and not self._wakeups.maybe_queued(agent):
            # Nothing was sent to this agent or given back since its last empty look: no need to
            # ask the database (the periodic re-check still does, for leases that ran out).
            return self._changes.state, None
        mark = self._wakeups.mark(agent)
        async with self._store.write_one() as q:
            row = await q.claim(agent, self._clock(), self._lease_seconds)
        if row is not None:
            assert row.lease_token is not None
            self._held[row.lease_token] = row.id
            if not row.more:
                self._wakeups.looked_empty(agent, mark)
            return self._changes.state, row
        self._wakeups.looked_empty(agent, mark)
        # The claim hands nothing out in STOPPED; the state as this process knows it says why
        # (a stop on another replica arrives as a signal before the woken wait looks again).
        return self._changes.state, None

    async def _release(self, agent: str, message_id: str, token: str) -> None:
        """Give a lease back (the answer never went out): the next wait of ``agent`` takes it."""
        self._held.pop(token, None)
        try:
            async with self._store.write() as q:
                released = await q.release(message_id, token)
                if released:
                    await q.notify(agent)
        except (StoreError, SQLAlchemyError) as err:
            # The lease runs out by itself; the message then goes out again.
            log.warning(
                "lease of message %s not given back (%s); it is redelivered when it runs out", message_id, err
            )
            return
        if released:
            self._wakeups.queued(agent)
            self._wakeups.wake(agent)

    async def release_all(self) -> None:
        """At a clean close: give back every lease whose answer the transport did not report."""
        for token, message_id in list(self._held.items()):
            async with self._store.write() as q:
                await q.release(message_id, token)
            self._held.pop(token, None)

    def _lease_callbacks(
        self, agent: str, row: MessageRow
    ) -> tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]:
        token = row.lease_token
        assert token is not None
        message_id = row.id
        ended = False

        async def delivered() -> None:
            nonlocal ended
            if ended:
                return
            ended = True
            self._held.pop(token, None)

            async def mark() -> bool:
                if row.acknowledges:
                    self._acknowledging.add(agent)  # told by another replica, or before a restart
                if agent in self._acknowledging:
                    # Written, but it may not have reached the agent: it stays leased until the
                    # agent acknowledges it, and goes out again if that does not happen in time.
                    async with self._store.write_one() as q:
                        await q.hold_for_ack(message_id, token, self._clock() + self._ack_timeout)
                    return False
                async with self._store.write_one() as q:
                    return await q.acknowledge(message_id, token, iso(self._clock()))

            try:
                removed = await self._changes.shielded(mark())
            except (StoreError, SQLAlchemyError) as err:
                # The answer went out but the queue could not be updated: the lease runs out and
                # the message goes out again (same messageId, higher deliveryAttempt).
                self._wakeups.queued(agent)
                log.warning("message %s delivered but not removed from its queue: %s", message_id, err)
                removed = False
            if removed:
                self._metrics.broker_messages_delivered.labels(agent).inc()

        async def abandoned() -> None:
            nonlocal ended
            if ended:
                return
            ended = True
            await self._changes.shielded(self._release(agent, message_id, token))

        return delivered, abandoned

    async def message_history(
        self, issue: str | None, limit: int, after: str | None = None
    ) -> dict[str, Any]:
        """``get_message_history`` → ``{messages, page_info}``: newest first by page, oldest first in a page.

        A page holds up to ``limit`` messages, and its whole answer stays within about
        ``history_page_bytes``: a tool result carries its ``structuredContent`` twice, as the object
        and as its JSON text (the text block MCP asks for, for clients that read only text), so each
        message is counted as both. A body over ``history_item_bytes`` is cut (``bodyTruncated``,
        ``bodyPreview``). ``after`` is the previous page's ``page_info.end_cursor``: the next page
        holds older messages. A page always holds at least one message.

        Raises:
            BrokerError: ``bad_request`` for a cursor this tool did not hand out.
        """
        before = _decode_cursor(after)
        out: list[dict[str, Any]] = []
        used, more, last_seq = _PAGE_OVERHEAD_BYTES, False, before
        while len(out) < limit and not more:
            # Small batches: rows are read only as far as the page's byte budget reaches.
            batch = min(_HISTORY_BATCH, limit - len(out))
            async with self._store.read() as q:
                rows = await q.history_page(issue, last_seq, batch + 1, self._history_item_bytes)
            for row, head, length in rows[:batch]:
                item = message_json(row)
                encoded = head.encode("utf-8")
                if length > len(head) or len(encoded) > self._history_item_bytes:
                    preview = encoded[: self._history_item_bytes].decode("utf-8", errors="ignore")
                    item.update(body=None, bodyTruncated=True, bodyPreview=preview)
                else:
                    item.update(body=json.loads(head), bodyTruncated=False, bodyPreview=None)
                cost = _answer_bytes(item)
                if out and used + cost > self._history_page_bytes:
                    more = True
                    break
                used += cost
                out.append(item)
                last_seq = row.seq
            else:
                if len(rows) <= batch:
                    break
                if len(out) >= limit:
                    more = True
        out.reverse()
        end = _encode_cursor(last_seq) if more and last_seq is not None else None
        return {"messages": out, "page_info": {"has_next_page": end is not None, "end_cursor": end}}


def _answer_bytes(item: dict[str, Any]) -> int:
    """What ``item`` adds to a history answer: its compact JSON in ``structuredContent`` and again,
    escaped, in the JSON text block (the two quotes counted there stand for the two commas)."""
    dumped = json.dumps(item, ensure_ascii=False, separators=(",", ":"))
    escaped = json.dumps(dumped, ensure_ascii=False)
    return len(dumped.encode("utf-8")) + len(escaped.encode("utf-8"))


#: Rows read per statement while filling a history page.
_HISTORY_BATCH = 16
#: A history answer besides its messages (the JSON-RPC and result envelope, ``page_info``), twice.
_PAGE_OVERHEAD_BYTES = 1024
_CURSOR_PREFIX = "msg:"


def _encode_cursor(seq: int) -> str:
    return base64.urlsafe_b64encode(f"{_CURSOR_PREFIX}{seq}".encode()).decode("ascii")


def _decode_cursor(cursor: str | None) -> int | None:
    if cursor is None:
        return None
    try:
        text = base64.urlsafe_b64decode(cursor.encode("ascii")).decode("ascii")
        if text.startswith(_CURSOR_PREFIX):
            return int(text[len(_CURSOR_PREFIX) :])
    except (ValueError, UnicodeError):
        pass
    raise BrokerError(
        "bad_request",
        "`after`: not a cursor of get_message_history; pass `page_info.end_cursor` from the previous "
        "answer as is, or leave `after` out to start from the newest messages.",
    )
