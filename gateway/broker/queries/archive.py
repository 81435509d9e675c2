"""Statements of starting over: archive a stopped pipeline under its generation, then clear it.

Nothing is deleted that is not first copied: the messages, transitions and activity-log lines of
the stopped pipeline go to the ``archived_*`` tables (migration 0004) in the same transaction that
removes them from the live ones, and the pipeline row, its issues and its plan are kept as one
JSON snapshot in ``archived_pipelines``.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import sqlalchemy as sa

from gateway.broker.queries.base import Statements
from gateway.broker.queries.rows import PipelineRow
from gateway.broker.schema import (
    activity_log,
    archived_activity_log,
    archived_messages,
    archived_pipelines,
    archived_transitions,
    issues,
    messages,
    pipeline,
    plan,
    transitions,
)

#: Columns copied as they are into each archive table (its ``generation`` comes first).
_MESSAGE_COLUMNS = (
    "seq",
    "id",
    "sender",
    "recipient",
    "subject",
    "body",
    "priority",
    "reply_to",
    "thread_id",
    "created_at",
    "delivered_at",
    "delivery_attempts",
    "issue",
)
_TRANSITION_COLUMNS = ("seq", "at", "from_state", "to_state", "event", "agent")
_LOG_COLUMNS = ("seq", "name", "at", "who", "text")


class ArchiveQueries(Statements):
    """Archive and clear the pipeline (start over), and list what was archived."""

    async def archive_pipeline(self, p: PipelineRow, at: str, by: str) -> dict[str, int]:
        """Copy generation ``p.generation`` into the archive tables and clear the live ones; the
        pipeline row goes back to ``IDLE`` with the next generation. Returns the rows archived."""
        gen = p.generation
        issue_rows = [dict(r._mapping) for r in await self.conn.execute(sa.select(issues))]
        plan_row = (await self.conn.execute(sa.select(plan))).first()
        snapshot = {
            "pipeline": {k: (v.value if hasattr(v, "value") else v) for k, v in asdict(p).items()},
            "issues": issue_rows,
            "plan": dict(plan_row._mapping) if plan_row is not None else None,
        }
        await self.conn.execute(
            sa.insert(archived_pipelines).values(
                generation=gen,
                archived_at=at,
                archived_by=by,
                final_state=p.state.value,
                snapshot=json.dumps(snapshot, default=str),
            )
        )
        counts: dict[str, int] = {}
        for name, live, archive, columns in (
            ("messages", messages, archived_messages, _MESSAGE_COLUMNS),
            ("transitions", transitions, archived_transitions, _TRANSITION_COLUMNS),
            ("logLines", activity_log, archived_activity_log, _LOG_COLUMNS),
        ):
            # Counted first: an INSERT ... SELECT's rowcount is not reported by every driver.
            counts[name] = (
                await self.conn.execute(sa.select(sa.func.count()).select_from(live))
            ).scalar_one()
            await self.conn.execute(
                sa.insert(archive).from_select(
                    ["generation", *columns],
                    sa.select(sa.literal(gen, sa.Integer), *(live.c[c] for c in columns)),
                )
            )
            await self.conn.execute(sa.delete(live))
        await self.conn.execute(sa.delete(issues))
        await self.conn.execute(sa.delete(plan))
        await self.conn.execute(
            sa.update(pipeline)
            .where(pipeline.c.id == 1)
            .values(
                phase=None,
                fix_count=0,
                auto_advance=0,
                aa_stage=None,
                aa_deadline=None,
                aa_next_phase=None,
                human_origin=None,
                human_reason=None,
                human_by=None,
                human_at=None,
                stopped_by=None,
                stopped_at=None,
                generation=gen + 1,
                updated_at=at,
            )
        )
        return counts

    async def archives(self, limit: int = 20) -> list[dict[str, Any]]:
        """The archived pipelines, newest first: ``{generation, archivedAt, archivedBy, finalState}``."""
        rows = await self.conn.execute(
            sa.select(
                archived_pipelines.c.generation,
                archived_pipelines.c.archived_at,
                archived_pipelines.c.archived_by,
                archived_pipelines.c.final_state,
            )
            .order_by(archived_pipelines.c.generation.desc())
            .limit(limit)
        )
        return [
            {"generation": r[0], "archivedAt": r[1], "archivedBy": r[2], "finalState": r[3]} for r in rows
        ]
