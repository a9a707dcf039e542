"""The sweep, every minute in any number of workers at once: work whose lease ran out, or that no worker took
within a lease of being queued, is queued again; expired batches are deleted."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import Table, and_, or_, select, update

from app.batches.records import batch_chunks_table, batches_table
from app.batches.store import ABANDONED_UPLOAD, RUNNABLE, discard, now_utc
from app.db import Database

_batches = batches_table.c
_chunks = batch_chunks_table.c


@dataclass(frozen=True)
class Stalled:
    preparations: list[str]
    chunks: list[tuple[str, int]]


def requeue_stalled(database: Database, *, lease_seconds: float, held_only: bool = False,
                    limit: int = 10_000) -> Stalled:
    """Work to enqueue again: leases that ran out (their worker died or was stopped), and, unless
    ``held_only``, work no worker has taken within a lease of being queued (its task was lost: the engine does
    not acknowledge tasks, so a consumer killed between taking a task and claiming its chunk loses it).
    Whatever the queue holds meanwhile: a task still waiting in it only finds its chunk taken or done and does
    nothing, while a lost one is never found by waiting for the queue to empty (other periodic tasks and the
    pollers' are nearly always in it). Each is marked as queued again (no holder, and not again for one lease),
    in an UPDATE that only one of several sweepers wins, so a stalled chunk is enqueued once per lease at most.
    A row without a time (stored before chunks had one) is due at once."""
    now = now_utc()
    again = now + timedelta(seconds=lease_seconds)

    def due(table: Table) -> Any:
        expired = table.c.lease_until < now
        if held_only:
            return and_(table.c.lease_token.is_not(None), expired)
        return or_(expired, table.c.lease_until.is_(None))

    with database.transaction() as connection:
        preparations = connection.scalars(
            select(_batches.id).where(_batches.status.in_(RUNNABLE), _batches.prepared.is_(False),
                                      due(batches_table)).limit(limit)
        ).all()
        chunks = connection.execute(
            select(_chunks.batch_id, _chunks.seq)
            .join(batches_table, _batches.id == _chunks.batch_id)
            .where(_chunks.status == "pending", due(batch_chunks_table), _batches.status.in_(RUNNABLE))
            .order_by(_batches.created_at, _chunks.seq)
            .limit(limit)
        ).all()
    marked_preparations, marked_chunks = [], []
    for batch_id in preparations:
        with database.transaction() as connection:
            if connection.execute(
                update(batches_table).where(_batches.id == batch_id, _batches.prepared.is_(False),
                                            _batches.status.in_(RUNNABLE), due(batches_table))
                .values(lease_token=None, lease_until=again)
            ).rowcount == 1:
                marked_preparations.append(batch_id)
    for batch_id, seq in chunks:
        with database.transaction() as connection:
            if connection.execute(
                update(batch_chunks_table)
                .where(_chunks.batch_id == batch_id, _chunks.seq == seq, _chunks.status == "pending",
                       due(batch_chunks_table))
                .values(lease_token=None, lease_until=again)
            ).rowcount == 1:
                marked_chunks.append((batch_id, seq))
    return Stalled(marked_preparations, marked_chunks)


def purge_expired(database: Database) -> int:
    """Deletes batches past their expiry and uploads abandoned mid-way; returns how many."""
    now = now_utc()
    with database.transaction() as connection:
        ids = connection.scalars(
            select(_batches.id).where(or_(
                _batches.expires_at < now,
                (_batches.status == "uploading") & (_batches.updated_at < now - ABANDONED_UPLOAD),
            )).limit(1000)
        ).all()
    for batch_id in ids:
        discard(database, batch_id)
    return len(ids)
