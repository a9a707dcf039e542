"""hourly usage buckets per key, the key's last four characters, and dashboard sessions

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("last4", sa.String(4), nullable=True))
    op.create_table(
        "key_usage_buckets",
        sa.Column("key_id", sa.String(32), sa.ForeignKey("api_keys.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("hour", sa.DateTime(), primary_key=True),
        sa.Column("ok", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("client_error", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("rate_limited", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("server_error", sa.BigInteger(), nullable=False, server_default="0"),
    )
    # Retention deletes by age across all keys.
    op.create_index("ix_key_usage_buckets_hour", "key_usage_buckets", ["hour"])
    op.create_table(
        "dashboard_sessions",
        sa.Column("token_hash", sa.String(64), primary_key=True),
        sa.Column("key_id", sa.String(32), sa.ForeignKey("api_keys.id", ondelete="CASCADE"), nullable=False),
        sa.Column("account_id", sa.String(64), nullable=False),
        sa.Column("csrf_token", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.Column("revoked_at", sa.DateTime(), nullable=True),
    )
    op.create_index("ix_dashboard_sessions_key_id", "dashboard_sessions", ["key_id"])
    op.create_index("ix_dashboard_sessions_expires_at", "dashboard_sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_dashboard_sessions_expires_at", table_name="dashboard_sessions")
    op.drop_index("ix_dashboard_sessions_key_id", table_name="dashboard_sessions")
    op.drop_table("dashboard_sessions")
    op.drop_index("ix_key_usage_buckets_hour", table_name="key_usage_buckets")
    op.drop_table("key_usage_buckets")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("last4")
