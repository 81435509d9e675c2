"""Confirmations recorded for every replica (one answer, one action), and live tasks counted per caller.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "confirmations",
        sa.Column("key_hash", sa.Text, primary_key=True),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("created", sa.Float, nullable=False),
        sa.Column("expires", sa.Float, nullable=False),
        sa.Column("ticket", sa.Text, unique=True),
        sa.Column("agent", sa.Text),
        sa.Column("tool", sa.Text),
        sa.Column("what", sa.Text),
        sa.Column("why", sa.Text),
        sa.Column("decided_by", sa.Text),
        sa.Column("decided_at", sa.Float),
        sa.Column("note", sa.Text),
    )
    op.create_index("confirmations_by_expiry", "confirmations", ["expires"])
    op.create_index("confirmations_by_status", "confirmations", ["status"])
    op.create_index("tasks_by_owner", "tasks", ["owner_hash", "status"])


def downgrade() -> None:
    op.drop_index("tasks_by_owner", "tasks")
    op.drop_index("confirmations_by_status", "confirmations")
    op.drop_index("confirmations_by_expiry", "confirmations")
    op.drop_table("confirmations")
