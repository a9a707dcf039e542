"""monitors: the threshold as false alarms per week; confidence becomes optional

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25

A monitor's threshold now comes from how many false alarms a normal stream may raise per week (null: one).
confidence 0.99 was the default every monitor got when none was given, and meant "the detector's standard
range": those monitors (without a sensitivity) move to the default budget. Any other confidence is kept and
still sets the threshold.
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("monitors") as batch:
        batch.add_column(sa.Column("false_alarms_per_week", sa.Float(), nullable=True))
        batch.alter_column("confidence", existing_type=sa.Float(), nullable=True)
    op.execute("UPDATE monitors SET confidence = NULL WHERE confidence = 0.99 AND sensitivity IS NULL")


def downgrade() -> None:
    op.execute("UPDATE monitors SET confidence = 0.99 WHERE confidence IS NULL")
    with op.batch_alter_table("monitors") as batch:
        batch.alter_column("confidence", existing_type=sa.Float(), nullable=False)
        batch.drop_column("false_alarms_per_week")
