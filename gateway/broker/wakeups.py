"""Wake-ups of waiting ``wait_for_message`` calls, in this process and across replicas.

A wait subscribes to its agent before it looks at its queue, so a message committed between the look
and the sleep still wakes it. A committed change wakes this process's waits at once
(:meth:`Wakeups.wake`); on PostgreSQL the same transaction also sent ``pg_notify`` (delivered at
commit, dropped on rollback), and one LISTEN connection per replica (:class:`Listener`) fans the
other replicas' signals out to this replica's waits (it skips the notifications its own connections
sent, ``Store.sent_here``: it woke its waits at commit). A notification is only a signal: the woken
wait re-reads the table.

A look that found nothing to claim is remembered (:meth:`Wakeups.looked_empty`), so a woken or new
wait of that agent needs no database round trip, until the first of: a signal for the agent; the
end of the first lease or acknowledgement hold of its queued messages, read from the database
with the look (the message is free again then, with nobody to signal it: every wait open then
looks, and so does the next one); ``broker.recheck_seconds`` (a safety net for a signal missed).
While the LISTEN connection is down, signals from the other replicas are missed: a look is then
trusted for :data:`DEAF_RECHECK_SECONDS` only, and the connection is retried at least every
:data:`RECONNECT_MAX_SECONDS`; once it is back every wait looks again.

Payloads: an agent id (a message for it, a lease given back, or an acknowledgement hold set: its
end is when the message is free again), ``*stop`` (the pipeline stopped), ``*timer`` (an
auto-advance stage was scheduled or changed), ``*reset`` (an operator started over after a stop),
``*changed`` (any other change, for the live console only).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

log = logging.getLogger(__name__)

STOP = "*stop"
TIMER = "*timer"
RESET = "*reset"
CHANGED = "*changed"
#: The longest pause between two attempts of the LISTEN connection to come back.
RECONNECT_MAX_SECONDS = 1.0
#: While this replica may miss signals (its LISTEN connection is down) or its database failed,
#: its waits look at their queues this often (``broker.recheck_seconds`` when that is shorter).
DEAF_RECHECK_SECONDS = 0.5


class Wakeups:
    """The open waits of this process, per agent, and which queues are known empty.

    Attributes:
        listening: False while this replica's LISTEN connection is down (never on SQLite, where
            every signal is this process's own).
    """

    def __init__(self, agents: Iterable[str]) -> None:
        self._waiters: dict[str, set[asyncio.Event]] = {agent: set() for agent in agents}
        # Per agent: a count of the signals that something may be claimable (a send, a lease
        # given back), and, from its last look that found nothing, the count then and until
        # when that look holds (Unix time). Same count, time not reached: the queue is known
        # empty and a wait needs no database round trip.
        self._signals: dict[str, int] = dict.fromkeys(self._waiters, 1)
        self._empty: dict[str, tuple[int, float]] = dict.fromkeys(self._waiters, (0, 0.0))
        self.listening = True

    def queued(self, agent: str) -> None:
        """Something may have become claimable for ``agent``."""
        if agent in self._signals:
            self._signals[agent] += 1

    def maybe_queued(self, agent: str, now: float) -> bool:
        """Whether a look at ``agent``'s queue at ``now`` (Unix time) may find something."""
        return self.empty_until(agent, now) is None

    def empty_until(self, agent: str, now: float) -> float | None:
        """Until when (Unix time) ``agent``'s queue is known empty; None: a look may find something."""
        mark, until = self._empty[agent]
        return until if mark == self._signals[agent] and now < until else None

    def mark(self, agent: str) -> int:
        """The signal count before a look (see :meth:`looked_empty`)."""
        return self._signals[agent]

    def looked_empty(self, agent: str, mark: int, until: float) -> None:
        """A look that started at ``mark`` found nothing, and holds until ``until`` (Unix time:
        the first lease of the agent's queued messages ends then, or the look is too old to
        trust); signals since ``mark`` still count."""
        self._empty[agent] = (mark, until)

    def lease_ends(self, agent: str, at: float) -> None:
        """A lease of one of ``agent``'s messages ends at ``at`` (Unix time) now, earlier than a
        look found: a queue known empty is known so until then only, and the open waits of
        ``agent`` sleep until then only."""
        mark, until = self._empty.get(agent, (0, 0.0))
        if mark == self._signals.get(agent) and at < until:
            self._empty[agent] = (mark, at)
            for event in self._waiters[agent]:
                event.set()  # to sleep again, until ``at``

    def heard(self, listening: bool) -> None:
        """This replica's LISTEN connection went down (False) or is back (True): either way the
        queues known empty are not any more, and every open wait looks again."""
        self.listening = listening
        self.wake_all()

    @contextlib.contextmanager
    def subscribe(self, agent: str) -> Iterator[asyncio.Event]:
        """An event set by every later :meth:`wake` of ``agent``, for the block's duration."""
        event = asyncio.Event()
        self._waiters[agent].add(event)
        try:
            yield event
        finally:
            self._waiters[agent].discard(event)

    def wake(self, agent: str) -> None:
        """Wake every open wait of ``agent``; each re-reads its queue."""
        self.queued(agent)
        for event in self._waiters.get(agent, ()):
            event.set()

    def wake_all(self) -> None:
        """Wake every open wait (stop, shutdown, a listener that reconnected)."""
        for agent in self._signals:
            self.queued(agent)
        for events in self._waiters.values():
            for event in events:
                event.set()

    def waiting(self, agent: str) -> bool:
        """``agent`` has a wait open in this process."""
        return bool(self._waiters.get(agent))

    def waits_open(self) -> int:
        """Open waits in this process, all agents."""
        return sum(len(e) for e in self._waiters.values())

    def dispatch(self, payload: str, on_stop: Callable[[], None], on_timer: Callable[[], None]) -> None:
        """Act on one notification payload."""
        if payload == STOP:
            on_stop()  # first: the woken waits must find the pipeline stopped
            self.wake_all()
        elif payload == TIMER:
            on_timer()
        elif payload in (RESET, CHANGED):
            return  # no wait to wake: the service and the change feed act on these
        else:
            self.wake(payload)


class Listener:
    """The replica's one LISTEN connection (psycopg, autocommit), reconnecting with backoff.

    Args:
        conninfo: the libpq URL (``postgresql://…``); never logged.
        channel: the channel to listen on.
        on_payload: called with each notification's payload.
        on_reconnect: called after the connection came back (signals may have been missed).
        where: how to name the database in log lines (no password).
        sent_here: whether a notifying server process is one of this replica's own connections;
            its notifications are skipped (this replica acted on its own commits already).
        on_lost: called when the connection is lost or could not be made at start (signals are
            missed from then until ``on_reconnect``).
    """

    def __init__(
        self,
        conninfo: str,
        channel: str,
        on_payload: Callable[[str], None],
        on_reconnect: Callable[[], None],
        where: str,
        sent_here: Callable[[int], bool] | None = None,
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        self._conninfo = conninfo
        self._channel = channel
        self._on_payload = on_payload
        self._on_reconnect = on_reconnect
        self._on_lost = on_lost
        self._where = where
        self._sent_here = sent_here
        self._task: asyncio.Task[None] | None = None
        self._conn: Any = None
        self.ready = asyncio.Event()

    async def start(self) -> None:
        """Start listening; returns once LISTEN is in place (or after its first failure)."""
        self._task = asyncio.get_running_loop().create_task(self._run())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(10):
                await self.ready.wait()

    async def _run(self) -> None:
        import psycopg  # only the PostgreSQL backend needs it

        loop = asyncio.get_running_loop()
        pause = 0.2
        first = True
        lost_at: float | None = None  # while down: since when
        while True:
            conn: psycopg.AsyncConnection[Any] | None = None
            try:
                conn = self._conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
                await conn.execute(f'LISTEN "{self._channel}"')
                self.ready.set()
                if not first:
                    down = 0.0 if lost_at is None else loop.time() - lost_at
                    log.info("broker LISTEN connection to %s is back after %.1f s", self._where, down)
                    self._on_reconnect()
                first, pause, lost_at = False, 0.2, None
                async for note in conn.notifies():
                    if self._sent_here is None or not self._sent_here(note.pid):
                        self._on_payload(note.payload)
            except asyncio.CancelledError:
                raise
            except Exception as err:
                self.ready.set()  # start() must not hang on a database that went away
                first = False
                if lost_at is None:
                    lost_at = loop.time()
                    log.warning(
                        "broker LISTEN connection to %s lost (%s); retrying at least every %.0f s; waits "
                        "look at their queues at least every %.1f s meanwhile",
                        self._where,
                        type(err).__name__,
                        RECONNECT_MAX_SECONDS,
                        DEAF_RECHECK_SECONDS,
                    )
                    if self._on_lost is not None:
                        self._on_lost()
                else:  # still down: said once above
                    log.debug(
                        "broker LISTEN connection to %s: still down (%s)", self._where, type(err).__name__
                    )
                await asyncio.sleep(pause)
                pause = min(pause * 2, RECONNECT_MAX_SECONDS)
            finally:
                self._conn = None
                if conn is not None and not conn.closed:
                    await asyncio.shield(conn.close())

    async def close(self) -> None:
        """Stop listening: the connection is closed here, not left to a cancelled task."""
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
