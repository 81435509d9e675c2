"""Tasks of the MCP tasks extension, kept in the broker's database so that every replica, and this
one after a restart, answers ``tasks/get``, ``tasks/update`` and ``tasks/cancel`` for them.

What is kept of a task: a SHA-256 of its id (the id is an unguessable bearer handle, never
stored), a SHA-256 of what binds it to its caller, the tool and its arguments (to resume the
work), its status and outcome (the ``CallToolResult`` of a ``completed`` task, the JSON-RPC error
of a ``failed`` one), its times (Unix seconds) and a lease: the replica running the work renews
it; once it lapses (that replica was killed or stopped) whichever replica serves the task next
takes the lease over (:meth:`TaskStore.take_over`) and resumes the work.

A task whose work asks the client (``input_required``) keeps its outstanding questions by key
(:meth:`TaskStore.ask`) and every answer ``tasks/update`` delivered (:meth:`TaskStore.answer`), so
the work, run again from the start once the last question is answered (on whichever replica took
that answer, or one that takes the task over later), gets its answers and asks nothing twice.

Every status change is guarded by the status it leaves (``working``), so two replicas finishing
the same task (one slow, one that took over) or a cancel racing a result settle on the first
write. A task past its ``expires`` is answered as expired and deleted by :meth:`TaskStore.prune`,
which runs at each creation: the table grows only by creations, so it stays bounded by the rate
of creations times the TTL.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

import sqlalchemy as sa

from gateway.broker.schema import tasks
from gateway.broker.store import Store

#: Statuses (https://github.com/modelcontextprotocol/ext-tasks, specification ``Task``).
WORKING: Final = "working"
INPUT_REQUIRED: Final = "input_required"
COMPLETED: Final = "completed"
FAILED: Final = "failed"
CANCELLED: Final = "cancelled"
TERMINAL: Final = frozenset({COMPLETED, FAILED, CANCELLED})
_ACTIVE: Final = (WORKING, INPUT_REQUIRED)

#: Expired tasks deleted per creation.
PRUNE_BATCH: Final = 100


def id_hash(value: str) -> str:
    """What the table keeps of a task id (or of a caller's binding)."""
    return hashlib.sha256(value.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class TaskRow:
    """One stored task (times in Unix seconds)."""

    id_hash: str
    owner_hash: str
    tool: str
    arguments: str
    status: str
    status_message: str | None
    outcome: str | None
    created: float
    updated: float
    deadline: float
    expires: float
    poll_ms: int
    lease_owner: str | None
    lease_until: float
    #: The outstanding questions while ``input_required`` (JSON object of InputRequest by key).
    input_requests: str | None = None
    #: Every answer delivered so far (JSON object by key).
    answers: str | None = None


@dataclass(frozen=True, slots=True)
class NewTask:
    """A task to store: its id's hash, its caller's, and the work (tool, JSON arguments)."""

    id_hash: str
    owner_hash: str
    tool: str
    arguments: str
    deadline: float
    expires: float
    poll_ms: int
    #: Answers the call already had when the task was created (JSON object by key).
    answers: str | None = None


class TaskStore:
    """The shared record of tasks.

    Args:
        store: the broker's database.
        clock: Unix seconds.

    Raises (every method):
        StoreError: the database cannot serve the call (``DatabaseUnavailable`` while it is down).
    """

    def __init__(self, store: Store, clock: Callable[[], float]) -> None:
        self._store = store
        self._clock = clock

    def now(self) -> float:
        return self._clock()

    async def create(
        self, task: NewTask, replica: str, lease_seconds: float, *, cap: int | None = None
    ) -> TaskRow | None:
        """Store ``task`` as ``working``, leased to ``replica``; committed when this returns (a
        ``tasks/get`` on any replica then finds it). Deletes some expired tasks first.

        Returns:
            The stored task; None when its caller has ``cap`` live tasks (working or waiting for
            input, unexpired) already, counted in the transaction that would store it (on
            PostgreSQL concurrent creations of one caller on several replicas may pass the cap by
            as many as run at once).
        """
        now = self._clock()
        await self.prune(now)
        values = {
            "id_hash": task.id_hash,
            "owner_hash": task.owner_hash,
            "tool": task.tool,
            "arguments": task.arguments,
            "status": WORKING,
            "status_message": None,
            "outcome": None,
            "created": now,
            "updated": now,
            "deadline": task.deadline,
            "expires": task.expires,
            "poll_ms": task.poll_ms,
            "lease_owner": replica,
            "lease_until": now + lease_seconds,
            "input_requests": None,
            "answers": task.answers,
        }
        async with self._store.write() as q:
            if cap is not None and await self._live(q.conn, task.owner_hash, now) >= cap:
                return None
            await q.conn.execute(sa.insert(tasks).values(**values))
        return TaskRow(**values)  # type: ignore[arg-type]

    @staticmethod
    async def _live(conn: Any, owner_hash: str, now: float) -> int:
        """How many live tasks ``owner_hash`` has (an index range: ``tasks_by_owner``)."""
        count = await conn.execute(
            sa.select(sa.func.count())
            .select_from(tasks)
            .where(tasks.c.owner_hash == owner_hash, tasks.c.status.in_(_ACTIVE), tasks.c.expires > now)
        )
        return int(count.scalar_one())

    async def live(self, owner_hash: str) -> int:
        """How many live tasks (working or waiting for input, unexpired) ``owner_hash`` has."""
        async with self._store.read() as q:
            return await self._live(q.conn, owner_hash, self._clock())

    async def get(self, task_hash: str) -> TaskRow | None:
        """The task, or None when there is none (never created, or pruned)."""
        async with self._store.read() as q:
            row = (await q.conn.execute(sa.select(tasks).where(tasks.c.id_hash == task_hash))).first()
        return None if row is None else TaskRow(**row._mapping)

    async def take_over(self, task_hash: str, replica: str, lease_seconds: float) -> bool:
        """Lease a working task whose lease lapsed to ``replica``; True when this replica got it
        (one replica does, however many ask at once)."""
        now = self._clock()
        async with self._store.write() as q:
            done = await q.conn.execute(
                sa.update(tasks)
                .where(tasks.c.id_hash == task_hash, tasks.c.status == WORKING, tasks.c.lease_until < now)
                .values(lease_owner=replica, lease_until=now + lease_seconds)
            )
        return bool(done.rowcount)

    async def renew(self, task_hash: str, replica: str, lease_seconds: float) -> bool:
        """Extend ``replica``'s lease; False when the task is no longer its to run (cancelled,
        finished, or taken over)."""
        now = self._clock()
        async with self._store.write() as q:
            done = await q.conn.execute(
                sa.update(tasks)
                .where(
                    tasks.c.id_hash == task_hash, tasks.c.status == WORKING, tasks.c.lease_owner == replica
                )
                .values(lease_until=now + lease_seconds)
            )
        return bool(done.rowcount)

    async def release(self, task_hash: str, replica: str) -> None:
        """End ``replica``'s lease now (it is shutting down): the next ``tasks/get`` on any
        replica takes the task over without waiting for the lease to lapse."""
        async with self._store.write() as q:
            await q.conn.execute(
                sa.update(tasks)
                .where(
                    tasks.c.id_hash == task_hash, tasks.c.status == WORKING, tasks.c.lease_owner == replica
                )
                .values(lease_until=0.0)
            )

    async def ask(self, task_hash: str, replica: str, requests: Mapping[str, Any], message: str) -> bool:
        """Park ``replica``'s working task as ``input_required`` on ``requests`` (InputRequest by
        key, as JSON); False when it was no longer this replica's to run (cancelled, taken over)."""
        now = self._clock()
        async with self._store.write() as q:
            done = await q.conn.execute(
                sa.update(tasks)
                .where(
                    tasks.c.id_hash == task_hash, tasks.c.status == WORKING, tasks.c.lease_owner == replica
                )
                .values(
                    status=INPUT_REQUIRED,
                    input_requests=json.dumps(dict(requests)),
                    status_message=message,
                    updated=now,
                    lease_owner=None,
                    lease_until=0.0,
                )
            )
        return bool(done.rowcount)

    async def answer(
        self, task_hash: str, responses: Mapping[str, Any], replica: str, lease_seconds: float
    ) -> TaskRow | None:
        """Deliver ``responses`` (by key) to an ``input_required`` task: those for outstanding
        keys are kept with its answers and leave the outstanding questions; others are ignored.

        Returns:
            The task, now ``working`` and leased to ``replica`` (which resumes the work), when
            this delivery answered the last outstanding question; None otherwise (questions
            remain, nothing was outstanding, or no such task).
        """
        while True:
            row = await self.get(task_hash)
            if row is None or row.status != INPUT_REQUIRED or row.input_requests is None:
                return None
            pending: dict[str, Any] = json.loads(row.input_requests)
            taken = {key: value for key, value in responses.items() if key in pending}
            if not taken:
                return None
            answers: dict[str, Any] = json.loads(row.answers or "{}")
            answers.update(taken)
            for key in taken:
                del pending[key]
            now = self._clock()
            values: dict[str, Any] = {"answers": json.dumps(answers), "updated": now}
            if pending:
                values["input_requests"] = json.dumps(pending)
            else:
                values.update(
                    status=WORKING,
                    input_requests=None,
                    status_message=None,
                    lease_owner=replica,
                    lease_until=now + lease_seconds,
                )
            # Guarded by the questions it read: a delivery racing this one (another replica)
            # makes this write miss, and it reads again.
            async with self._store.write() as q:
                done = await q.conn.execute(
                    sa.update(tasks)
                    .where(
                        tasks.c.id_hash == task_hash,
                        tasks.c.status == INPUT_REQUIRED,
                        tasks.c.input_requests == row.input_requests,
                    )
                    .values(**values)
                )
            if done.rowcount:
                return None if pending else replace(row, **values)

    async def finish(self, task_hash: str, status: str, outcome: str | None, message: str | None) -> bool:
        """Move a working task to ``status`` (terminal) with its outcome (JSON); False when it had
        left ``working`` already (cancelled, or finished by another replica)."""
        assert status in TERMINAL
        now = self._clock()
        async with self._store.write() as q:
            done = await q.conn.execute(
                sa.update(tasks)
                .where(tasks.c.id_hash == task_hash, tasks.c.status.in_(_ACTIVE))
                .values(
                    status=status,
                    outcome=outcome,
                    status_message=message,
                    updated=now,
                    lease_owner=None,
                    input_requests=None,
                )
            )
        return bool(done.rowcount)

    async def cancel(self, task_hash: str, message: str) -> bool:
        """Cancel a task that is not terminal yet; False when it was."""
        return await self.finish(task_hash, CANCELLED, None, message)

    async def prune(self, now: float | None = None, limit: int = PRUNE_BATCH) -> int:
        """Delete at most ``limit`` tasks past their TTL; how many were."""
        now = self._clock() if now is None else now
        expired = (
            sa.select(tasks.c.id_hash).where(tasks.c.expires <= now).order_by(tasks.c.expires).limit(limit)
        )
        async with self._store.write() as q:
            done = await q.conn.execute(sa.delete(tasks).where(tasks.c.id_hash.in_(expired)))
        return int(done.rowcount or 0)
