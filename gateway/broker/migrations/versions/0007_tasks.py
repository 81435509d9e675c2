"""Tasks of the MCP tasks extension: a long ``tools/call`` answered by any replica, after a restart too.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tasks",
        sa.Column("id_hash", sa.Text, primary_key=True),
        sa.Column("owner_hash", sa.Text, nullable=False),
        sa.Column("tool", sa.Text, nullable=False),
        sa.Column("arguments", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("status_message", sa.Text),
        sa.Column("outcome", sa.Text),
        sa.Column("created", sa.Float, nullable=False),
        sa.Column("updated", sa.Float, nullable=False),
        sa.Column("deadline", sa.Float, nullable=False),
        sa.Column("expires", sa.Float, nullable=False),
        sa.Column("poll_ms", sa.Integer, nullable=False),
        sa.Column("lease_owner", sa.Text),
        sa.Column("lease_until", sa.Float, nullable=False, server_default="0"),
    )
    op.create_index("tasks_by_expiry", "tasks", ["expires"])


def downgrade() -> None:
    op.drop_index("tasks_by_expiry", "tasks")
    op.drop_table("tasks")
