"""The leases under which workers compute a batch's chunks.

A worker claims a chunk with a lease (an UPDATE that only succeeds on a pending chunk whose lease is free or has
run out), renews the lease while it works, and writes the chunk's results in the same transaction that marks it
done, on condition that it still holds the lease. A worker that dies leaves a lease that runs out, and the chunk
is taken again; one that lost its lease cannot write. So each series' result is stored exactly once, whatever
the engine lost or ran twice.
"""

from __future__ import annotations

import json
import secrets
import zlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Table, and_, case, func, literal, or_, select, update

from app.batches.records import batch_chunks_table, batches_table
from app.batches.store import RUNNABLE, all_failed, now_utc, unpack
from app.db import Database, UTCDateTime

_batches = batches_table.c
_chunks = batch_chunks_table.c


def free(table: Table, now: datetime) -> Any:
    """Claimable (a row of batches_table or batch_chunks_table): no worker holds it (never taken, or queued
    again), or its worker's lease ran out."""
    return or_(table.c.lease_token.is_(None), table.c.lease_until < now)


@dataclass(frozen=True)
class ClaimedChunk:
    batch_id: str
    seq: int
    token: str
    first_index: int
    kind: str
    parameters: dict[str, Any]
    series: list[dict[str, Any]]


def claim_chunk(database: Database, batch_id: str, seq: int, *, lease_seconds: float) -> ClaimedChunk | None:
    """The chunk, leased to the caller; None when it is done, gone, or leased to another worker."""
    now, token = now_utc(), secrets.token_hex(16)
    with database.transaction() as connection:
        claimed = connection.execute(
            update(batch_chunks_table)
            .where(_chunks.batch_id == batch_id, _chunks.seq == seq, _chunks.status == "pending",
                   free(batch_chunks_table, now))
            .values(lease_token=token, lease_until=now + timedelta(seconds=lease_seconds),
                    attempts=_chunks.attempts + 1)
        ).rowcount
        if claimed != 1:
            return None
        batch = connection.execute(
            select(_batches.status, _batches.kind, _batches.parameters).where(_batches.id == batch_id)).first()
        if batch is None or batch.status not in RUNNABLE:
            return None
        if batch.status == "queued":
            connection.execute(update(batches_table).where(_batches.id == batch_id)
                               .values(status="running", updated_at=now))
        chunk = connection.execute(select(_chunks.first_index, _chunks.input)
                                   .where(_chunks.batch_id == batch_id, _chunks.seq == seq)).first()
        assert chunk is not None
        return ClaimedChunk(batch_id=batch_id, seq=seq, token=token, first_index=chunk.first_index, kind=batch.kind,
                            parameters=json.loads(batch.parameters), series=unpack(chunk.input))


def claim_fairest_chunk(database: Database, *, lease_seconds: float) -> ClaimedChunk | None:
    """The next chunk by fair share between accounts, leased to the caller; None when no chunk waits.

    Chunk tasks are queued first come, first served, so a small batch waited behind every chunk of a large one
    queued before it (another account's one series behind thousands). Each chunk task therefore computes the
    chunk that is fairest now, not the one it was queued for (every chunk still has a task, so none is left):
    a chunk of the account with the fewest chunks being computed, among those the one served least recently
    (an account never served first: with one process free at a time, the large batch's account, its last
    chunk just done, tied at zero with a newcomer and won by its older batch), and within it of its oldest
    batch."""
    for _ in range(_CLAIM_TRIES):
        picked = _fairest_pending(database)
        if picked is None:
            return None
        chunk = claim_chunk(database, *picked, lease_seconds=lease_seconds)
        if chunk is not None:
            return chunk
    return None


# Another worker may take the chunk picked between the pick and the claim; a few picks settle it.
_CLAIM_TRIES = 5


def _fairest_pending(database: Database) -> tuple[str, int] | None:
    now = now_utc()
    chunks, batches = _chunks, _batches
    runnable = and_(chunks.status == "pending", batches.status.in_(RUNNABLE))
    with database.transaction() as connection:
        # Per account, in one pass over its runnable batches' chunks: chunks being computed, when it was last
        # served (its latest chunk done or leased: a done chunk keeps its completion time), its oldest batch with
        # a chunk free to take.
        accounts = connection.execute(
            select(batches.account_id,
                   func.count(case((and_(chunks.status == "pending", chunks.lease_token.is_not(None),
                                         chunks.lease_until >= now), 1))),
                   func.max(case((or_(chunks.status == "done", chunks.lease_token.is_not(None)),
                                  chunks.lease_until))),
                   func.min(case((and_(chunks.status == "pending", free(batch_chunks_table, now)),
                                  batches.created_at))))
            .select_from(batch_chunks_table).join(batches_table, batches.id == chunks.batch_id)
            .where(batches.status.in_(RUNNABLE))
            .group_by(batches.account_id)
        ).all()
        waiting = [row for row in accounts if row[3] is not None]
        if not waiting:
            return None
        account = min(waiting, key=lambda row: (row[1], row[2] is not None, row[2] or row[3], row[3]))[0]
        row = connection.execute(
            select(chunks.batch_id, chunks.seq)
            .select_from(batch_chunks_table).join(batches_table, batches.id == chunks.batch_id)
            .where(runnable, free(batch_chunks_table, now), batches.account_id == account)
            .order_by(batches.created_at, chunks.seq).limit(1)
        ).first()
    return None if row is None else (row[0], row[1])


def renew(database: Database, chunk: ClaimedChunk, *, lease_seconds: float) -> bool:
    """Extends the caller's lease; False when it no longer holds it (another worker took over, or the batch
    was cancelled), and the caller stops."""
    with database.transaction() as connection:
        return connection.execute(
            update(batch_chunks_table)
            .where(_chunks.batch_id == chunk.batch_id, _chunks.seq == chunk.seq,
                   _chunks.lease_token == chunk.token, _chunks.status == "pending")
            .values(lease_until=now_utc() + timedelta(seconds=lease_seconds))
        ).rowcount == 1


def complete_chunk(database: Database, chunk: ClaimedChunk, lines: list[bytes], *, succeeded: int, failed: int,
                   ttl: timedelta) -> bool:
    """Stores the chunk's results and counts them, in one transaction, if the caller still holds the lease.
    The batch is done when its last chunk is (counted in the same UPDATE, so two workers finishing the last
    two chunks at once cannot both miss it), once its upload is split whole: while a CSV is still being split,
    its chunks so far may all be done before the next is stored, and finish_preparation decides then."""
    now = now_utc()
    with database.transaction() as connection:
        stored = connection.execute(
            update(batch_chunks_table)
            .where(_chunks.batch_id == chunk.batch_id, _chunks.seq == chunk.seq,
                   _chunks.lease_token == chunk.token, _chunks.status == "pending")
            # lease_until of a done chunk is when it was done: when its account was last served (fair share).
            .values(status="done", output=zlib.compress(b"".join(lines), 1), lease_token=None, lease_until=now)
        ).rowcount
        if stored != 1:
            return False
        last = and_(_batches.chunks_done + 1 >= _batches.chunks_total, _batches.prepared.is_(True))
        # Every series failed: the batch did nothing, and says so (its results hold each series' error).
        none = and_(last, _batches.series_done + succeeded == 0)
        connection.execute(
            update(batches_table)
            .where(_batches.id == chunk.batch_id, _batches.status.in_(RUNNABLE))
            .values(
                series_done=_batches.series_done + succeeded,
                series_failed=_batches.series_failed + failed,
                chunks_done=_batches.chunks_done + 1,
                updated_at=now,
                status=case((none, literal("failed")), (last, literal("done")), else_=literal("running")),
                error=case((none, all_failed(_batches.series_failed + failed)), else_=_batches.error),
                finished_at=case((last, literal(now, UTCDateTime())), else_=_batches.finished_at),
                expires_at=case((last, literal(now + ttl, UTCDateTime())), else_=_batches.expires_at),
            )
        )
    return True
