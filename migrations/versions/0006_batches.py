"""batches: a batch, its CSV upload in pieces, its chunks of series with their results

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "batches",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("account_id", sa.String(64), nullable=False),
        sa.Column("key_id", sa.String(32), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("source", sa.String(8), nullable=False),
        sa.Column("parameters", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("series_total", sa.Integer(), nullable=False),
        sa.Column("series_done", sa.Integer(), nullable=False),
        sa.Column("series_failed", sa.Integer(), nullable=False),
        sa.Column("chunks_total", sa.Integer(), nullable=False),
        sa.Column("chunks_done", sa.Integer(), nullable=False),
        sa.Column("upload_bytes", sa.BigInteger(), nullable=False),
        sa.Column("prepared", sa.Boolean(), nullable=False),
        sa.Column("lease_token", sa.String(32), nullable=True),
        sa.Column("lease_until", sa.DateTime(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("expires_at", sa.DateTime(), nullable=True),
    )
    op.create_index("ix_batches_account_created", "batches", ["account_id", "created_at"])
    op.create_index("ix_batches_status", "batches", ["status"])
    op.create_index("ix_batches_expires_at", "batches", ["expires_at"])
    op.create_table(
        "batch_uploads",
        sa.Column("batch_id", sa.String(40), sa.ForeignKey("batches.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("seq", sa.Integer(), primary_key=True),
        sa.Column("data", sa.LargeBinary(), nullable=False),
    )
    op.create_table(
        "batch_chunks",
        sa.Column("batch_id", sa.String(40), sa.ForeignKey("batches.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("seq", sa.Integer(), primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("first_index", sa.Integer(), nullable=False),
        sa.Column("series_count", sa.Integer(), nullable=False),
        sa.Column("input", sa.LargeBinary(), nullable=False),
        sa.Column("output", sa.LargeBinary(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("lease_token", sa.String(32), nullable=True),
        sa.Column("lease_until", sa.DateTime(), nullable=True),
    )
    op.create_index("ix_batch_chunks_status_lease", "batch_chunks", ["status", "lease_until"])


def downgrade() -> None:
    op.drop_index("ix_batch_chunks_status_lease", table_name="batch_chunks")
    op.drop_table("batch_chunks")
    op.drop_table("batch_uploads")
    op.drop_index("ix_batches_expires_at", table_name="batches")
    op.drop_index("ix_batches_status", table_name="batches")
    op.drop_index("ix_batches_account_created", table_name="batches")
    op.drop_table("batches")
