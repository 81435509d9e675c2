"""The first schema (the SQLite store's ``PRAGMA user_version`` 1).

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pipeline",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("phase", sa.Integer),
        sa.Column("fix_count", sa.Integer, nullable=False, server_default="0"),
        sa.Column("auto_advance", sa.Integer, nullable=False, server_default="0"),
        sa.Column("aa_stage", sa.Text),
        sa.Column("aa_deadline", sa.Float),
        sa.Column("aa_next_phase", sa.Integer),
        sa.Column("human_origin", sa.Text),
        sa.Column("human_reason", sa.Text),
        sa.Column("human_by", sa.Text),
        sa.Column("human_at", sa.Text),
        sa.Column("stopped_by", sa.Text),
        sa.Column("stopped_at", sa.Text),
        sa.Column("updated_at", sa.Text, nullable=False),
        sa.CheckConstraint("id = 1", name="pipeline_single_row"),
        sa.CheckConstraint("aa_stage IN ('cooldown', 'session_reset')", name="pipeline_aa_stage"),
    )
    op.execute(
        sa.text("INSERT INTO pipeline (id, state, updated_at) VALUES (1, 'IDLE', :now)").bindparams(
            now="1970-01-01T00:00:00Z"
        )
    )
    op.create_table(
        "issues",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("position", sa.Integer, nullable=False, unique=True),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("fail_count", sa.Integer, nullable=False, server_default="0"),
        sa.CheckConstraint("status IN ('todo', 'in_progress', 'done')", name="issues_status"),
    )
    op.create_table(
        "plan",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("plan_id", sa.Text, nullable=False),
        sa.Column("phases", sa.Text, nullable=False),
        sa.Column("cooldown_minutes", sa.Float, nullable=False),
        sa.Column("completed_phases", sa.Text, nullable=False, server_default="[]"),
        sa.Column("updated_at", sa.Text, nullable=False),
        sa.CheckConstraint("id = 1", name="plan_single_row"),
    )
    op.create_table(
        "messages",
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("id", sa.Text, nullable=False, unique=True),
        sa.Column("sender", sa.Text, nullable=False),
        sa.Column("recipient", sa.Text, nullable=False),
        sa.Column("subject", sa.Text, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("reply_to", sa.Text),
        sa.Column("thread_id", sa.Text, nullable=False),
        sa.Column("created_at", sa.Text, nullable=False),
        sa.Column("delivered_at", sa.Text),
        sa.Column("delivery_attempts", sa.Integer, nullable=False, server_default="0"),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "messages_queue",
        "messages",
        ["recipient", "priority", "seq"],
        sqlite_where=sa.text("delivered_at IS NULL"),
        postgresql_where=sa.text("delivered_at IS NULL"),
    )
    op.create_table("agents", sa.Column("id", sa.Text, primary_key=True), sa.Column("last_seen", sa.Text))
    op.create_table(
        "transitions",
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("at", sa.Text, nullable=False),
        sa.Column("from_state", sa.Text, nullable=False),
        sa.Column("to_state", sa.Text, nullable=False),
        sa.Column("event", sa.Text, nullable=False),
        sa.Column("agent", sa.Text),
        sqlite_autoincrement=True,
    )


def downgrade() -> None:
    for table in ("transitions", "agents", "messages", "plan", "issues", "pipeline"):
        op.drop_table(table)
