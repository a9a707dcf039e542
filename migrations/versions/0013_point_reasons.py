"""monitors: why each anomalous point was flagged

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-29

An anomaly keeps the detector's reason (which signal flagged it, and its numbers), so the points listing, the
dashboard, webhooks and Alertmanager say why. Points stored before have none (null), as normal points do.
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("monitor_points") as batch:
        batch.add_column(sa.Column("reason", sa.String(400), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("monitor_points") as batch:
        batch.drop_column("reason")
