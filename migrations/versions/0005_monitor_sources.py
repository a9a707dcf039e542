"""monitors: a Prometheus source (URL, query, read state) and an Alertmanager target; alert events: destination;
job leases

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("monitors") as batch:
        batch.add_column(sa.Column("prometheus_url", sa.String(2048), nullable=True))
        batch.add_column(sa.Column("prometheus_query", sa.Text(), nullable=True))
        batch.add_column(sa.Column("source_status", sa.String(16), nullable=True))
        batch.add_column(sa.Column("source_message", sa.String(500), nullable=True))
        batch.add_column(sa.Column("source_checked_at", sa.DateTime(), nullable=True))
        batch.add_column(sa.Column("source_read_until", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("source_due_at", sa.DateTime(), nullable=True))
        batch.add_column(sa.Column("source_claim", sa.String(16), nullable=True))
        batch.add_column(sa.Column("alertmanager_url", sa.String(2048), nullable=True))
        batch.add_column(sa.Column("alertmanager_refreshed_at", sa.DateTime(), nullable=True))
        batch.create_index("ix_monitors_source_due_at", ["source_due_at"])
    with op.batch_alter_table("monitor_events") as batch:
        batch.add_column(sa.Column("destination", sa.String(16), nullable=False, server_default="webhook"))
    op.create_table(
        "job_leases",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(64), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("job_leases")
    with op.batch_alter_table("monitor_events") as batch:
        batch.drop_column("destination")
    with op.batch_alter_table("monitors") as batch:
        batch.drop_index("ix_monitors_source_due_at")
        for name in ("alertmanager_refreshed_at", "alertmanager_url", "source_claim", "source_due_at", "source_read_until",
                     "source_checked_at", "source_message", "source_status", "prometheus_query", "prometheus_url"):
            batch.drop_column(name)
