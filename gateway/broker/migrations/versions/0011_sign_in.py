"""Sign-in through GitLab: registered clients, sign-ins under way, codes, grants, the gateway's tokens
and named agent tokens.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sign_in_clients",
        sa.Column("client_id", sa.Text, primary_key=True),
        sa.Column("secret_hash", sa.Text),
        sa.Column("name", sa.Text),
        sa.Column("redirect_uris", sa.Text, nullable=False),
        sa.Column("auth_method", sa.Text, nullable=False),
        sa.Column("created", sa.Float, nullable=False),
    )
    op.create_table(
        "sign_in_transactions",
        sa.Column("id_hash", sa.Text, primary_key=True),
        sa.Column("client_id", sa.Text, nullable=False),
        sa.Column("redirect_uri", sa.Text, nullable=False),
        sa.Column("state", sa.Text),
        sa.Column("code_challenge", sa.Text, nullable=False),
        sa.Column("scopes", sa.Text, nullable=False),
        sa.Column("browser_hash", sa.Text, nullable=False),
        sa.Column("role", sa.Text),
        sa.Column("gitlab_state_hash", sa.Text, unique=True),
        sa.Column("gitlab_verifier", sa.Text),
        sa.Column("expires", sa.Float, nullable=False),
    )
    op.create_index("sign_in_transactions_by_expiry", "sign_in_transactions", ["expires"])
    op.create_table(
        "sign_in_codes",
        sa.Column("code_hash", sa.Text, primary_key=True),
        sa.Column("grant_id", sa.Text, nullable=False),
        sa.Column("client_id", sa.Text, nullable=False),
        sa.Column("redirect_uri", sa.Text, nullable=False),
        sa.Column("code_challenge", sa.Text, nullable=False),
        sa.Column("expires", sa.Float, nullable=False),
    )
    op.create_table(
        "sign_in_grants",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("client_id", sa.Text, nullable=False),
        sa.Column("gitlab_user_id", sa.BigInteger, nullable=False),
        sa.Column("gitlab_username", sa.Text, nullable=False),
        sa.Column("role", sa.Text),
        sa.Column("scopes", sa.Text, nullable=False),
        sa.Column("gitlab_tokens", sa.Text, nullable=False),
        sa.Column("gitlab_expires", sa.Float, nullable=False),
        sa.Column("created", sa.Float, nullable=False),
        sa.Column("expires", sa.Float, nullable=False),
        sa.Column("revoked", sa.Float),
    )
    op.create_index("sign_in_grants_by_user", "sign_in_grants", ["gitlab_user_id"])
    op.create_table(
        "sign_in_access_tokens",
        sa.Column("token_hash", sa.Text, primary_key=True),
        sa.Column("grant_id", sa.Text, nullable=False),
        sa.Column("scopes", sa.Text, nullable=False),
        sa.Column("expires", sa.Float, nullable=False),
    )
    op.create_index("sign_in_access_tokens_by_grant", "sign_in_access_tokens", ["grant_id"])
    op.create_table(
        "sign_in_refresh_tokens",
        sa.Column("token_hash", sa.Text, primary_key=True),
        sa.Column("grant_id", sa.Text, nullable=False),
        sa.Column("scopes", sa.Text, nullable=False),
        sa.Column("expires", sa.Float, nullable=False),
        sa.Column("predecessor", sa.Text),
        sa.Column("successor", sa.Text),
    )
    op.create_index("sign_in_refresh_tokens_by_grant", "sign_in_refresh_tokens", ["grant_id"])
    op.create_table(
        "sign_in_agent_tokens",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("token_hash", sa.Text, nullable=False, unique=True),
        sa.Column("grant_id", sa.Text, nullable=False),
        sa.Column("gitlab_user_id", sa.BigInteger, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("role", sa.Text),
        sa.Column("scopes", sa.Text, nullable=False),
        sa.Column("created", sa.Float, nullable=False),
        sa.Column("expires", sa.Float, nullable=False),
    )
    op.create_index("sign_in_agent_tokens_by_user", "sign_in_agent_tokens", ["gitlab_user_id"])


def downgrade() -> None:
    op.drop_index("sign_in_agent_tokens_by_user", "sign_in_agent_tokens")
    op.drop_table("sign_in_agent_tokens")
    op.drop_index("sign_in_refresh_tokens_by_grant", "sign_in_refresh_tokens")
    op.drop_index("sign_in_access_tokens_by_grant", "sign_in_access_tokens")
    op.drop_index("sign_in_grants_by_user", "sign_in_grants")
    op.drop_index("sign_in_transactions_by_expiry", "sign_in_transactions")
    op.drop_table("sign_in_refresh_tokens")
    op.drop_table("sign_in_access_tokens")
    op.drop_table("sign_in_grants")
    op.drop_table("sign_in_codes")
    op.drop_table("sign_in_transactions")
    op.drop_table("sign_in_clients")
