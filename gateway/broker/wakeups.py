"""Wake-ups of waiting ``wait_for_message`` calls, in this process and across replicas.

A wait subscribes to its agent before it looks at its queue, so a message committed between the look
and the sleep still wakes it. A committed change wakes this process's waits at once
(:meth:`Wakeups.wake`); on PostgreSQL the same transaction also sent ``pg_notify`` (delivered at
commit, dropped on rollback), and one LISTEN connection per replica (:class:`Listener`) fans the
other replicas' signals out to this replica's waits (it skips the notifications its own connections
sent, ``Store.sent_here``: it woke its waits at commit). A notification is only a signal: the woken
wait re-reads the table, and a slow re-check (``broker.recheck_seconds``) covers a signal missed
while the listener was reconnecting (after which every wait is woken anyway).

Payloads: an agent id (a message for it, or a lease given back), ``*stop`` (the pipeline
stopped), ``*timer`` (an auto-advance stage was scheduled or changed), ``*reset`` (an operator
started over after a stop), ``*changed`` (any other change, for the live console only).
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
RECONNECT_MAX_SECONDS = 10.0


class Wakeups:
    """The open waits of this process, per agent."""

    def __init__(self, agents: Iterable[str]) -> None:
        self._waiters: dict[str, set[asyncio.Event]] = {agent: set() for agent in agents}
        # Per agent: a count of the signals that something may be claimable (a send, a lease
        # given back), and the count at its last look that found nothing. Equal: the queue is
        # known empty and a woken wait needs no database round trip.
        self._signals: dict[str, int] = dict.fromkeys(self._waiters, 1)
        self._empty_at: dict[str, int] = dict.fromkeys(self._waiters, 0)

    def queued(self, agent: str) -> None:
        """Something may have become claimable for ``agent``."""
        if agent in self._signals:
            self._signals[agent] += 1

    def maybe_queued(self, agent: str) -> bool:
        """Whether a look at ``agent``'s queue may find something."""
        return self._signals[agent] != self._empty_at[agent]

    def mark(self, agent: str) -> int:
        """The signal count before a look (see :meth:`looked_empty`)."""
        return self._signals[agent]

    def looked_empty(self, agent: str, mark: int) -> None:
        """A look that started at ``mark`` found nothing; signals since then still count."""
        self._empty_at[agent] = mark

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
    """

    def __init__(
        self,
        conninfo: str,
        channel: str,
        on_payload: Callable[[str], None],
        on_reconnect: Callable[[], None],
        where: str,
        sent_here: Callable[[int], bool] | None = None,
    ) -> None:
        self._conninfo = conninfo
        self._channel = channel
        self._on_payload = on_payload
        self._on_reconnect = on_reconnect
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

        pause = 0.2
        first = True
        while True:
            conn: psycopg.AsyncConnection[Any] | None = None
            try:
                conn = self._conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
                await conn.execute(f'LISTEN "{self._channel}"')
                self.ready.set()
                if not first:
                    log.info("broker LISTEN connection to %s is back", self._where)
                    self._on_reconnect()
                first, pause = False, 0.2
                async for note in conn.notifies():
                    if self._sent_here is None or not self._sent_here(note.pid):
                        self._on_payload(note.payload)
            except asyncio.CancelledError:
                raise
            except Exception as err:
                self.ready.set()  # start() must not hang on a database that went away
                first = False
                log.warning(
                    "broker LISTEN connection to %s lost (%s); reconnecting in %.1f s; waits re-check "
                    "their queues meanwhile",
                    self._where,
                    type(err).__name__,
                    pause,
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
