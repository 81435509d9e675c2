"""Replicas: message leases, ``body.issue`` as a column, activity logs in the database.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("messages", sa.Column("lease_until", sa.Float))
    op.add_column("messages", sa.Column("lease_token", sa.Text))
    op.add_column("messages", sa.Column("issue", sa.Text))
    if op.get_bind().dialect.name == "sqlite":
        # Messages of a database written before this column: the filter used to be this expression.
        op.execute("UPDATE messages SET issue = CAST(json_extract(body, '$.issue') AS TEXT)")
    op.create_index("messages_by_issue", "messages", ["issue", "seq"])
    op.create_table(
        "activity_log",
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("at", sa.Text, nullable=False),
        sa.Column("who", sa.Text, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_index("activity_log_by_name", "activity_log", ["name", "seq"])


def downgrade() -> None:
    op.drop_table("activity_log")
    op.drop_index("messages_by_issue", "messages")
    for column in ("issue", "lease_token", "lease_until"):
        op.drop_column("messages", column)
