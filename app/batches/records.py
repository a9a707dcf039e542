"""The batch tables: a batch, its CSV upload in pieces, and its chunks (the unit of work and of results)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, Index, Integer, LargeBinary, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base
from app.keys.records import UTCDateTime


class BatchRecord(Base):
    __tablename__ = "batches"
    __table_args__ = (
        Index("ix_batches_account_created", "account_id", "created_at"),
        # The periodic sweep: unfinished batches, and finished ones past their expiry.
        Index("ix_batches_status", "status"),
        Index("ix_batches_expires_at", "expires_at"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    account_id: Mapped[str] = mapped_column(String(64))
    key_id: Mapped[str] = mapped_column(String(32))
    kind: Mapped[str] = mapped_column(String(16))  # forecast | anomalies | backtest
    source: Mapped[str] = mapped_column(String(8))  # json | csv
    # The checked request fields every series is judged with (JSON), and the model header.
    parameters: Mapped[str] = mapped_column(Text)
    # uploading (a CSV still arriving) | queued | running | done | failed | cancelled
    status: Mapped[str] = mapped_column(String(16))
    series_total: Mapped[int] = mapped_column(Integer)
    series_done: Mapped[int] = mapped_column(Integer, default=0)
    series_failed: Mapped[int] = mapped_column(Integer, default=0)
    chunks_total: Mapped[int] = mapped_column(Integer, default=0)
    chunks_done: Mapped[int] = mapped_column(Integer, default=0)
    upload_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    # A CSV batch is split into chunks by a worker under this lease; JSON batches are split on submission.
    prepared: Mapped[bool] = mapped_column(default=False)
    lease_token: Mapped[str | None] = mapped_column(String(32), nullable=True)
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)  # the envelope of a batch that failed whole
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class BatchUploadRecord(Base):
    """A piece of an uploaded CSV, in arrival order; deleted once a worker has split the upload into chunks."""

    __tablename__ = "batch_uploads"

    batch_id: Mapped[str] = mapped_column(String(40), ForeignKey("batches.id", ondelete="CASCADE"), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class BatchChunkRecord(Base):
    """Some series of a batch: their input, and once done their results, written in the transaction that marks
    the chunk done (so each series' result exists once, whoever computed it)."""

    __tablename__ = "batch_chunks"
    __table_args__ = (Index("ix_batch_chunks_status_lease", "status", "lease_until"),)

    batch_id: Mapped[str] = mapped_column(String(40), ForeignKey("batches.id", ondelete="CASCADE"), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    status: Mapped[str] = mapped_column(String(16))  # pending | done
    first_index: Mapped[int] = mapped_column(Integer)  # position of its first series in the batch
    series_count: Mapped[int] = mapped_column(Integer)
    input: Mapped[bytes] = mapped_column(LargeBinary)  # zlib-compressed JSON array of series
    output: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)  # zlib-compressed JSON lines
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    lease_token: Mapped[str | None] = mapped_column(String(32), nullable=True)
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
