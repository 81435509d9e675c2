"""Console sign-outs: a console session signed out on one replica is refused by every replica and
after a restart.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "console_sign_outs",
        sa.Column("nonce_hash", sa.Text, primary_key=True),
        sa.Column("expires", sa.Float, nullable=False),
    )
    op.create_index("console_sign_outs_by_expiry", "console_sign_outs", ["expires"])


def downgrade() -> None:
    op.drop_index("console_sign_outs_by_expiry", "console_sign_outs")
    op.drop_table("console_sign_outs")
