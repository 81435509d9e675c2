"""Statements on the pipeline row, the current phase's issues and the phase plan."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from gateway.broker.machine import State
from gateway.broker.queries.base import Statements
from gateway.broker.queries.rows import (
    PIPELINE_COLUMNS,
    IssueRow,
    PipelineRow,
    PlanRow,
    RowLock,
    pipeline_row,
)
from gateway.broker.schema import issues, pipeline, plan, transitions


class PipelineQueries(Statements):
    """The pipeline's own statements: its row, its audit trail, its issues and plan."""

    async def pipeline(self, lock: RowLock = None) -> PipelineRow:
        """The pipeline row, optionally held: ``update`` (``FOR UPDATE``: a change that may move the
        state) or ``share`` (``FOR SHARE``: a change that only must not race a stop)."""
        stmt = sa.select(*PIPELINE_COLUMNS).where(pipeline.c.id == 1)
        if lock == "update":
            stmt = stmt.with_for_update()
        elif lock == "share":
            stmt = stmt.with_for_update(read=True)
        return pipeline_row((await self.conn.execute(stmt)).one())

    async def due_pipeline(self, now: float) -> PipelineRow | None:
        """The pipeline row, held, when an auto-advance stage is due at ``now`` and no other
        transaction holds the row (``FOR UPDATE SKIP LOCKED``); else None."""
        stmt = (
            sa.select(*PIPELINE_COLUMNS)
            .where(pipeline.c.id == 1, pipeline.c.aa_stage.is_not(None), pipeline.c.aa_deadline <= now)
            .with_for_update(skip_locked=True)
        )
        r = (await self.conn.execute(stmt)).first()
        return pipeline_row(r) if r is not None else None

    async def state(self) -> State:
        """The pipeline's state alone."""
        return State(
            (await self.conn.execute(sa.select(pipeline.c.state).where(pipeline.c.id == 1))).scalar_one()
        )

    async def state_since(self) -> str:
        """When the pipeline entered its state: the last transition's time, else (no transition
        since the pipeline began or started over) the pipeline row's last update."""
        at = (
            await self.conn.execute(sa.select(transitions.c.at).order_by(transitions.c.seq.desc()).limit(1))
        ).scalar()
        if at is None:
            at = (
                await self.conn.execute(sa.select(pipeline.c.updated_at).where(pipeline.c.id == 1))
            ).scalar_one()
        return str(at)

    async def update_pipeline(self, now: str, **values: Any) -> None:
        """Set the given columns of the pipeline row (names are the code's, never a caller's)."""
        if not values:
            return
        clean = {k: (v.value if isinstance(v, State) else v) for k, v in values.items()}
        await self.conn.execute(sa.update(pipeline).where(pipeline.c.id == 1).values(**clean, updated_at=now))

    async def record_transition(
        self, at: str, from_state: State, to_state: State, event: str, agent: str | None
    ) -> None:
        """Append to the ``transitions`` audit table."""
        await self.conn.execute(
            sa.insert(transitions).values(
                at=at, from_state=from_state.value, to_state=to_state.value, event=event, agent=agent
            )
        )

    # issues -----------------------------------------------------------------------------------

    async def issues(self) -> list[IssueRow]:
        """The current phase's issues in phase order."""
        rows = await self.conn.execute(
            sa.select(issues.c.id, issues.c.position, issues.c.status, issues.c.fail_count).order_by(
                issues.c.position
            )
        )
        return [IssueRow(r.id, r.position, r.status, r.fail_count) for r in rows]

    async def replace_issues(self, ids: Iterable[str]) -> None:
        """Drop the previous phase's issues and store ``ids``, all ``todo``."""
        await self.conn.execute(sa.delete(issues))
        rows = [
            {"id": issue, "position": i, "status": "todo", "fail_count": 0} for i, issue in enumerate(ids)
        ]
        if rows:
            await self.conn.execute(sa.insert(issues), rows)

    async def set_issue(
        self, issue: str, *, status: str | None = None, fail_count: int | None = None
    ) -> None:
        """Update one issue's status and/or fail count."""
        values: dict[str, Any] = {}
        if status is not None:
            values["status"] = status
        if fail_count is not None:
            values["fail_count"] = fail_count
        if values:
            await self.conn.execute(sa.update(issues).where(issues.c.id == issue).values(**values))

    async def reopen_issues(self) -> None:
        """Every issue back to ``todo``, the first ``in_progress``; fail counts kept."""
        await self.conn.execute(sa.update(issues).values(status="todo"))
        first = sa.select(sa.func.min(issues.c.position)).scalar_subquery()
        await self.conn.execute(
            sa.update(issues).where(issues.c.position == first).values(status="in_progress")
        )

    # plan -------------------------------------------------------------------------------------

    async def plan(self) -> PlanRow | None:
        """The phase plan, or None before ``set_phase_plan``."""
        r = (
            await self.conn.execute(
                sa.select(
                    plan.c.plan_id, plan.c.phases, plan.c.cooldown_minutes, plan.c.completed_phases
                ).where(plan.c.id == 1)
            )
        ).first()
        if r is None:
            return None
        return PlanRow(r.plan_id, json.loads(r.phases), r.cooldown_minutes, json.loads(r.completed_phases))

    async def save_plan(self, row: PlanRow, now: str) -> None:
        """Insert or replace the plan."""
        values = {
            "plan_id": row.plan_id,
            "phases": json.dumps(row.phases),
            "cooldown_minutes": row.cooldown_minutes,
            "completed_phases": json.dumps(row.completed_phases),
            "updated_at": now,
        }
        done = await self.conn.execute(sa.update(plan).where(plan.c.id == 1).values(**values))
        if done.rowcount == 0:
            await self.conn.execute(sa.insert(plan).values(id=1, **values))
