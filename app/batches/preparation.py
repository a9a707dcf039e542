"""An uploaded CSV split into chunks by a job worker, in the database: the split's lease, the chunks it stores
as it goes, and its end (the batch runnable with its series counted, or failed with the reason)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import Any

from sqlalchemy import Connection, and_, case, delete, insert, literal, select, update

from app.batches.leases import free
from app.batches.records import batch_chunks_table, batch_uploads_table, batches_table
from app.batches.store import RUNNABLE, add_chunks, all_failed, new_chunk, now_utc
from app.db import Database, UTCDateTime

_batches = batches_table.c
_chunks = batch_chunks_table.c
_uploads = batch_uploads_table.c


def claim_preparation(database: Database, batch_id: str, *, lease_seconds: float) -> str | None:
    """A lease on splitting a CSV batch's upload into chunks; None when done already or leased to another."""
    now, token = now_utc(), secrets.token_hex(16)
    with database.transaction() as connection:
        claimed = connection.execute(
            update(batches_table)
            .where(_batches.id == batch_id, _batches.status.in_(RUNNABLE), _batches.prepared.is_(False),
                   free(batches_table, now))
            .values(lease_token=token, lease_until=now + timedelta(seconds=lease_seconds))
        ).rowcount
    return token if claimed == 1 else None


def counted_series(database: Database, batch_id: str) -> int:
    """The series the web process counted in the batch's upload (0 when the batch is gone)."""
    with database.transaction() as connection:
        return connection.scalar(select(_batches.series_total).where(_batches.id == batch_id)) or 0


def upload_pieces(database: Database, batch_id: str) -> Iterator[bytes]:
    """The uploaded CSV, one stored piece at a time."""
    with database.transaction() as connection:
        sequence = connection.scalars(
            select(_uploads.seq).where(_uploads.batch_id == batch_id).order_by(_uploads.seq)).all()
    for seq in sequence:
        with database.transaction() as connection:
            data = connection.scalar(select(_uploads.data).where(_uploads.batch_id == batch_id, _uploads.seq == seq))
        if data is None:  # cancelled meanwhile
            return
        yield data


def renew_preparation(database: Database, batch_id: str, token: str, *, lease_seconds: float) -> bool:
    """Extends the caller's lease on splitting the upload; False when it no longer holds it (cancelled, or
    another worker took over after this one stalled), and the caller stops."""
    with database.transaction() as connection:
        return connection.execute(
            update(batches_table)
            .where(_batches.id == batch_id, _batches.lease_token == token, _batches.prepared.is_(False),
                   _batches.status.in_(RUNNABLE))
            .values(lease_until=now_utc() + timedelta(seconds=lease_seconds))
        ).rowcount == 1


def _unsplit(connection: Connection, batch_id: str, token: str, **values: Any) -> bool:
    """Deletes the chunks an unfinished split stored (and any results of them) and zeroes their counts, with
    ``values``, if the caller holds the split's lease. The chunks go first: a worker storing a chunk's results
    locks that chunk and then the batch, so the batch's counts are updated after its last such write and a
    later one finds its chunk gone (it writes nothing)."""
    connection.execute(delete(batch_chunks_table).where(_chunks.batch_id == batch_id))
    if connection.execute(
        update(batches_table)
        .where(_batches.id == batch_id, _batches.lease_token == token, _batches.prepared.is_(False),
               _batches.status.in_(RUNNABLE))
        .values(chunks_total=0, chunks_done=0, series_done=0, series_failed=0, updated_at=now_utc(), **values)
    ).rowcount != 1:
        connection.rollback()
        return False
    return True


def restart_preparation(database: Database, batch_id: str, token: str) -> bool:
    """Back to no chunks, before a split starts (an earlier attempt may have stored some before its worker
    died) or when a streamed split finds the upload's series are not grouped and splits it whole instead: the
    series stored so far are dropped with their results, and the batch is queued again. False when the caller
    no longer holds the lease."""
    with database.transaction() as connection:
        return _unsplit(connection, batch_id, token, status="queued")


def add_prepared_chunk(database: Database, batch_id: str, token: str, *, seq: int, first_index: int,
                       series: list[dict[str, Any]], lease_seconds: float) -> bool:
    """One more chunk of a split still under way (the next, ``seq``), which a worker may take at once; the
    split's lease is extended in the same transaction. False when the caller no longer holds the lease."""
    now = now_utc()
    until = now + timedelta(seconds=lease_seconds)
    with database.transaction() as connection:
        if connection.execute(
            update(batches_table)
            .where(_batches.id == batch_id, _batches.lease_token == token, _batches.prepared.is_(False),
                   _batches.status.in_(RUNNABLE), _batches.chunks_total == seq)
            .values(chunks_total=seq + 1, lease_until=until, updated_at=now)
        ).rowcount != 1:
            connection.rollback()
            return False
        connection.execute(insert(batch_chunks_table).values(**new_chunk(batch_id, seq, first_index, series, until)))
    return True


def finish_preparation(database: Database, batch_id: str, token: str, *, total: int, ttl: timedelta) -> bool:
    """The end of a streamed split: the batch holds ``total`` series in the chunks stored so far, and is done
    now if those are all done already (else with its last chunk, complete_chunk); the upload is dropped. One
    UPDATE decides, so a worker finishing the last chunk meanwhile cannot leave the batch running. False when
    the caller no longer holds the lease."""
    now = now_utc()
    with database.transaction() as connection:
        all_done = _batches.chunks_done >= _batches.chunks_total
        none = and_(all_done, _batches.series_done == 0, _batches.series_failed > 0)
        if connection.execute(
            update(batches_table)
            .where(_batches.id == batch_id, _batches.lease_token == token, _batches.prepared.is_(False),
                   _batches.status.in_(RUNNABLE))
            .values(
                prepared=True, series_total=total, lease_token=None, lease_until=None, updated_at=now,
                status=case((none, literal("failed")), (all_done, literal("done")), else_=_batches.status),
                error=case((none, all_failed(_batches.series_failed)), else_=_batches.error),
                finished_at=case((all_done, literal(now, UTCDateTime())), else_=_batches.finished_at),
                expires_at=case((all_done, literal(now + ttl, UTCDateTime())), else_=_batches.expires_at),
            )
        ).rowcount != 1:
            connection.rollback()
            return False
        connection.execute(delete(batch_uploads_table).where(_uploads.batch_id == batch_id))
    return True


def store_preparation(database: Database, batch_id: str, token: str, series: Iterable[dict[str, Any]], *,
                      total: int, chunk_series: int, lease_seconds: float, ttl: timedelta) -> int | None:
    """The upload's ``total`` series as chunks, in one transaction with the end of the lease; the upload is
    dropped. The number of chunks, or None when the caller no longer holds the lease. (A split of the whole
    file at once: restart_preparation has removed any chunks of an earlier attempt.)"""
    now = now_utc()
    with database.transaction() as connection:
        record = connection.execute(select(_batches.lease_token, _batches.prepared, _batches.status)
                                    .where(_batches.id == batch_id).with_for_update()).first()
        if record is None or record.lease_token != token or record.prepared or record.status not in RUNNABLE:
            return None
        chunks = add_chunks(connection, batch_id, series, chunk_series, now + timedelta(seconds=lease_seconds))
        done = {} if total else {"status": "done", "finished_at": now, "expires_at": now + ttl}
        connection.execute(update(batches_table).where(_batches.id == batch_id).values(
            chunks_total=chunks, series_total=total, prepared=True, updated_at=now, lease_token=None,
            lease_until=None, **done))
        connection.execute(delete(batch_uploads_table).where(_uploads.batch_id == batch_id))
    return chunks


def fail_batch(database: Database, batch_id: str, token: str, error: dict[str, Any], *, ttl: timedelta) -> bool:
    """A CSV batch whose upload cannot be read: failed, with the reason, and its upload dropped. A streamed
    split may have stored (and workers computed) its first chunks before it met the error: they are deleted
    with their results and counts, so the batch reads exactly as if the error had been found first."""
    now = now_utc()
    with database.transaction() as connection:
        if not _unsplit(connection, batch_id, token, status="failed", error=json.dumps(error), finished_at=now,
                        expires_at=now + ttl, lease_token=None, lease_until=None, upload_bytes=0):
            return False
        connection.execute(delete(batch_uploads_table).where(_uploads.batch_id == batch_id))
    return True
