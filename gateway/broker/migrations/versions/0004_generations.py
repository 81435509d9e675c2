"""Starting over: a pipeline generation number, and archive tables for stopped pipelines.

An operator who starts over after ``stop_pipeline`` (the console at ``/broker`` or
``gitlab-mcp-gateway broker reset``) moves the stopped pipeline's messages, transitions and
activity logs into these tables, tagged with its generation, instead of deleting them.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("pipeline", sa.Column("generation", sa.Integer, nullable=False, server_default="1"))
    op.create_table(
        "archived_pipelines",
        sa.Column("generation", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("archived_at", sa.Text, nullable=False),
        sa.Column("archived_by", sa.Text, nullable=False),
        sa.Column("final_state", sa.Text, nullable=False),
        sa.Column("snapshot", sa.Text, nullable=False),
    )
    op.create_table(
        "archived_messages",
        sa.Column("generation", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("id", sa.Text, nullable=False),
        sa.Column("sender", sa.Text, nullable=False),
        sa.Column("recipient", sa.Text, nullable=False),
        sa.Column("subject", sa.Text, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("reply_to", sa.Text),
        sa.Column("thread_id", sa.Text, nullable=False),
        sa.Column("created_at", sa.Text, nullable=False),
        sa.Column("delivered_at", sa.Text),
        sa.Column("delivery_attempts", sa.Integer, nullable=False),
        sa.Column("issue", sa.Text),
    )
    op.create_table(
        "archived_transitions",
        sa.Column("generation", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("at", sa.Text, nullable=False),
        sa.Column("from_state", sa.Text, nullable=False),
        sa.Column("to_state", sa.Text, nullable=False),
        sa.Column("event", sa.Text, nullable=False),
        sa.Column("agent", sa.Text),
    )
    op.create_table(
        "archived_activity_log",
        sa.Column("generation", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("at", sa.Text, nullable=False),
        sa.Column("who", sa.Text, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("archived_activity_log")
    op.drop_table("archived_transitions")
    op.drop_table("archived_messages")
    op.drop_table("archived_pipelines")
    op.drop_column("pipeline", "generation")
