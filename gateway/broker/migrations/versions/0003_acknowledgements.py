"""Acknowledgements: agents that acknowledge the messages they processed (``wait_for_message``'s ``ack``).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("agents", sa.Column("acknowledges", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    op.drop_column("agents", "acknowledges")
