"""Input during a task: the questions a task waits on and the answers it has, by key.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tasks", sa.Column("input_requests", sa.Text))
    op.add_column("tasks", sa.Column("answers", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("answers")
        batch.drop_column("input_requests")
