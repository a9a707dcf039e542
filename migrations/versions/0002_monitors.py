"""monitors, their points, and the alert event queue with its delivery log

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "monitors",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("account_id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("data_frequency", sa.String(16), nullable=False),
        sa.Column("confidence", sa.Float(), nullable=False),
        sa.Column("model", sa.String(64), nullable=True),
        sa.Column("retention_points", sa.Integer(), nullable=False),
        sa.Column("webhook_url", sa.String(2048), nullable=True),
        sa.Column("webhook_secret", sa.String(128), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("point_count", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("first_epoch", sa.BigInteger(), nullable=True),
        sa.Column("last_epoch", sa.BigInteger(), nullable=True),
        sa.Column("revision", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("event_seq", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("open_anomaly_epoch", sa.BigInteger(), nullable=True),
    )
    op.create_index("ix_monitors_account_id", "monitors", ["account_id"])
    op.create_table(
        "monitor_points",
        sa.Column("monitor_id", sa.String(32), sa.ForeignKey("monitors.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("epoch", sa.BigInteger(), primary_key=True),
        sa.Column("timestamp", sa.String(40), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("expected", sa.Float(), nullable=False),
        sa.Column("lower", sa.Float(), nullable=False),
        sa.Column("upper", sa.Float(), nullable=False),
        sa.Column("score", sa.Float(), nullable=False),
        sa.Column("is_anomaly", sa.Boolean(), nullable=False),
        sa.Column("direction", sa.String(8), nullable=True),
        sa.Column("warmup", sa.Boolean(), nullable=False),
    )
    op.create_table(
        "monitor_events",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("monitor_id", sa.String(32), sa.ForeignKey("monitors.id", ondelete="CASCADE"), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("webhook_url", sa.String(2048), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(), nullable=False),
        sa.Column("last_attempt_at", sa.DateTime(), nullable=True),
        sa.Column("delivered_at", sa.DateTime(), nullable=True),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.String(500), nullable=True),
        sa.UniqueConstraint("monitor_id", "seq", name="uq_monitor_events_monitor_seq"),
    )
    op.create_index("ix_monitor_events_status_next", "monitor_events", ["status", "next_attempt_at"])
    op.create_table(
        "monitor_delivery_attempts",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("event_id", sa.String(40), sa.ForeignKey("monitor_events.id", ondelete="CASCADE"), nullable=False),
        sa.Column("monitor_id", sa.String(32), sa.ForeignKey("monitors.id", ondelete="CASCADE"), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("attempted_at", sa.DateTime(), nullable=False),
        sa.Column("duration_ms", sa.Float(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.String(500), nullable=True),
        sa.Column("sender", sa.String(64), nullable=False),
    )
    op.create_index("ix_monitor_delivery_attempts_monitor", "monitor_delivery_attempts", ["monitor_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_monitor_delivery_attempts_monitor", table_name="monitor_delivery_attempts")
    op.drop_table("monitor_delivery_attempts")
    op.drop_index("ix_monitor_events_status_next", table_name="monitor_events")
    op.drop_table("monitor_events")
    op.drop_table("monitor_points")
    op.drop_index("ix_monitors_account_id", table_name="monitors")
    op.drop_table("monitors")
