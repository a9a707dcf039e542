"""The batch tables: a batch, its CSV upload in pieces, and its chunks (the unit of work and of results)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Boolean, Column, ForeignKey, Index, Integer, LargeBinary, String, Table, Text

from app.db import UTCDateTime, metadata

batches_table = Table(
    "batches", metadata,
    Column("id", String(40), primary_key=True),
    Column("account_id", String(64), nullable=False),
    Column("key_id", String(32), nullable=False),
    Column("kind", String(16), nullable=False),  # forecast | anomalies | backtest
    Column("source", String(8), nullable=False),  # json | csv
    # The checked request fields every series is judged with (JSON), and the model header.
    Column("parameters", Text, nullable=False),
    # uploading (a CSV still arriving) | queued | running | done | failed | cancelled
    Column("status", String(16), nullable=False),
    Column("series_total", Integer, nullable=False),
    Column("series_done", Integer, default=0, nullable=False),
    Column("series_failed", Integer, default=0, nullable=False),
    Column("chunks_total", Integer, default=0, nullable=False),
    Column("chunks_done", Integer, default=0, nullable=False),
    Column("upload_bytes", BigInteger, default=0, nullable=False),
    # A CSV batch is split into chunks by a worker under this lease; JSON batches are split on submission.
    Column("prepared", Boolean, default=False, nullable=False),
    Column("lease_token", String(32), nullable=True),
    Column("lease_until", UTCDateTime(), nullable=True),
    Column("error", Text, nullable=True),  # the envelope of a batch that failed whole
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    Column("finished_at", UTCDateTime(), nullable=True),
    Column("expires_at", UTCDateTime(), nullable=True),
    Index("ix_batches_account_created", "account_id", "created_at"),
    # The periodic sweep: unfinished batches, and finished ones past their expiry.
    Index("ix_batches_status", "status"),
    Index("ix_batches_expires_at", "expires_at"),
)


# A piece of an uploaded CSV, in arrival order; deleted once a worker has split the upload into chunks.
batch_uploads_table = Table(
    "batch_uploads", metadata,
    Column("batch_id", String(40), ForeignKey("batches.id", ondelete="CASCADE"), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("data", LargeBinary, nullable=False),
)


# Some series of a batch: their input, and once done their results, written in the transaction that marks the chunk
# done (so each series' result exists once, whoever computed it).
batch_chunks_table = Table(
    "batch_chunks", metadata,
    Column("batch_id", String(40), ForeignKey("batches.id", ondelete="CASCADE"), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("status", String(16), nullable=False),  # pending | done
    Column("first_index", Integer, nullable=False),  # position of its first series in the batch
    Column("series_count", Integer, nullable=False),
    Column("input", LargeBinary, nullable=False),  # zlib-compressed JSON array of series
    Column("output", LargeBinary, nullable=True),  # zlib-compressed JSON lines
    Column("attempts", Integer, default=0, nullable=False),
    Column("lease_token", String(32), nullable=True),
    Column("lease_until", UTCDateTime(), nullable=True),
    Index("ix_batch_chunks_status_lease", "status", "lease_until"),
)
