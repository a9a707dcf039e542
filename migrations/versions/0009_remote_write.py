"""monitors: the series selector that routes Prometheus remote-written samples to a monitor

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("monitors") as batch:
        batch.add_column(sa.Column("remote_write_selector", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("monitors") as batch:
        batch.drop_column("remote_write_selector")
