"""Ended MCP sessions: a session ended by DELETE is refused by every replica and after a restart.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ended_sessions",
        sa.Column("id_hash", sa.Text, primary_key=True),
        sa.Column("expires", sa.Float, nullable=False),
    )
    op.create_index("ended_sessions_by_expiry", "ended_sessions", ["expires"])


def downgrade() -> None:
    op.drop_index("ended_sessions_by_expiry", "ended_sessions")
    op.drop_table("ended_sessions")
