"""api_keys: the key that created each key, so that revoking a key revokes the keys it created

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Keys made before this revision have no recorded creator: revoking a key never reaches them.
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("created_by", sa.String(length=32), nullable=True))
        batch.create_index("ix_api_keys_created_by", ["created_by"])


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_index("ix_api_keys_created_by")
        batch.drop_column("created_by")
