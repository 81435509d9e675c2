"""Replica heartbeats: each running gateway's row, and which replica saw each agent last.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "replicas",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("host", sa.Text, nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("version", sa.Text, nullable=False),
        sa.Column("started", sa.Float, nullable=False),
        sa.Column("last_seen", sa.Float, nullable=False),
        sa.Column("every", sa.Float, nullable=False),
    )
    op.add_column("agents", sa.Column("replica", sa.Text))


def downgrade() -> None:
    op.drop_column("agents", "replica")
    op.drop_table("replicas")
