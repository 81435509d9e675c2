"""Typed statements on one connection, the same for SQLite and PostgreSQL (SQLAlchemy Core).

Used inside ``Store.read`` / ``Store.write`` (``gateway.broker.store``). Row locks
(``FOR UPDATE``, ``FOR SHARE``, ``SKIP LOCKED``) render on PostgreSQL and are nothing on SQLite,
where every write transaction is ``BEGIN IMMEDIATE`` and so already alone.

:class:`Queries` is every statement of the broker, grouped by what they touch: ``pipeline`` (the
pipeline row, the phase's issues, the plan), ``messages`` (the queues), ``activity`` (``lastSeen``
and the activity logs), ``archive`` (starting over after a stop), ``sessions`` (MCP sessions
ended by DELETE), ``replicas`` (their heartbeats); ``rows`` holds what they return.
"""

from __future__ import annotations

from gateway.broker.queries.activity import ActivityQueries
from gateway.broker.queries.archive import ArchiveQueries
from gateway.broker.queries.messages import MessageQueries
from gateway.broker.queries.pipeline import PipelineQueries
from gateway.broker.queries.replicas import ReplicaQueries
from gateway.broker.queries.rows import (
    IssueRow,
    MessageRow,
    PipelineRow,
    PlanRow,
    ReplicaRow,
    RowLock,
    issue_key,
)
from gateway.broker.queries.sessions import SessionQueries

__all__ = [
    "IssueRow",
    "MessageRow",
    "PipelineRow",
    "PlanRow",
    "Queries",
    "ReplicaRow",
    "RowLock",
    "issue_key",
]


class Queries(
    PipelineQueries, MessageQueries, ActivityQueries, ArchiveQueries, SessionQueries, ReplicaQueries
):
    """The broker's statements on one connection (a transaction the caller opened)."""
