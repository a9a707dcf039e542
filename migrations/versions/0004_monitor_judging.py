"""monitors: sensitivity and minimum deviations; monitor points: the user's feedback

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("monitors") as batch:
        batch.add_column(sa.Column("sensitivity", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("min_deviation", sa.Float(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("min_relative_deviation", sa.Float(), nullable=False, server_default="0"))
    with op.batch_alter_table("monitor_points") as batch:
        batch.add_column(sa.Column("feedback", sa.String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("monitor_points") as batch:
        batch.drop_column("feedback")
    with op.batch_alter_table("monitors") as batch:
        batch.drop_column("min_relative_deviation")
        batch.drop_column("min_deviation")
        batch.drop_column("sensitivity")
