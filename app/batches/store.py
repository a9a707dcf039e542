"""A batch's state in the database, where every process (web, workers on any machine) sees the same thing.

Work is split into chunks of series. A worker claims a chunk with a lease (an UPDATE that only succeeds on a
pending chunk whose lease is free or has run out), renews the lease while it works, and writes the chunk's
results in the same transaction that marks it done, on condition that it still holds the lease. A worker that
dies leaves a lease that runs out, and the chunk is taken again; one that lost its lease cannot write. So each
series' result is stored exactly once, whatever the engine lost or ran twice.
"""

from __future__ import annotations

import json
import secrets
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Any

from sqlalchemy import Connection, String, Table, and_, case, cast, delete, func, insert, literal, or_, select, update

from app.batches.records import batch_chunks_table, batch_uploads_table, batches_table
from app.db import Database, UTCDateTime

UNFINISHED = ("uploading", "queued", "running")
RUNNABLE = ("queued", "running")
# A CSV upload abandoned mid-way (the web process died) is deleted after this long.
ABANDONED_UPLOAD = timedelta(hours=24)

_batches = batches_table.c
_chunks = batch_chunks_table.c
_uploads = batch_uploads_table.c


def new_batch_id() -> str:
    return "bat_" + secrets.token_hex(12)


def now_utc() -> datetime:
    return datetime.now(UTC)


def pack(value: Any) -> bytes:
    # json, not orjson: a NaN in a submitted value must reach the series check as NaN (orjson writes null).
    return zlib.compress(json.dumps(value, separators=(",", ":")).encode(), 1)


def unpack(data: bytes) -> Any:
    return json.loads(zlib.decompress(data))


@dataclass(frozen=True)
class Batch:
    id: str
    account_id: str
    kind: str
    source: str
    status: str
    parameters: dict[str, Any]
    series_total: int
    series_done: int
    series_failed: int
    chunks_total: int
    error: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    expires_at: datetime | None

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> Batch:
        """The batch of a row's mapping (``row._mapping``) or of the values it was stored with."""
        return cls(
            id=record["id"],
            account_id=record["account_id"],
            kind=record["kind"],
            source=record["source"],
            status=record["status"],
            parameters=json.loads(record["parameters"]),
            series_total=record["series_total"],
            series_done=record["series_done"],
            series_failed=record["series_failed"],
            chunks_total=record["chunks_total"],
            error=json.loads(record["error"]) if record["error"] else None,
            created_at=record["created_at"],
            updated_at=record["updated_at"],
            finished_at=record["finished_at"],
            expires_at=record["expires_at"],
        )


def _new_record(*, key_id: str, account_id: str, kind: str, source: str, parameters: dict[str, Any], status: str,
                series_total: int, now: datetime) -> dict[str, Any]:
    """A new batch's row, every column given (so Batch.of reads it as stored)."""
    return {
        "id": new_batch_id(), "account_id": account_id, "key_id": key_id, "kind": kind, "source": source,
        "parameters": json.dumps(parameters, separators=(",", ":")), "status": status, "series_total": series_total,
        "series_done": 0, "series_failed": 0, "chunks_total": 0, "chunks_done": 0, "upload_bytes": 0,
        "prepared": False, "lease_token": None, "lease_until": None, "error": None, "created_at": now,
        "updated_at": now, "finished_at": None, "expires_at": None,
    }


def chunk_sizes(chunk_series: int) -> Iterator[int]:
    """How many series each chunk of a batch holds, in order: 1, 2, 4, ... up to ``chunk_series``, then
    ``chunk_series`` each. The first results are stored within one series' time of a worker taking the batch,
    and every worker gets a chunk at once; the later chunks are full, so their per-chunk cost (a claim and a
    result write) stays small beside their series'."""
    size = 1
    while size < chunk_series:
        yield size
        size *= 2
    while True:
        yield chunk_series


def new_chunk(batch_id: str, seq: int, first: int, part: list[dict[str, Any]],
              queued_until: datetime) -> dict[str, Any]:
    """A chunk's row, to insert into batch_chunks_table."""
    # lease_until without a holder: the time until which the chunk's task may still be waiting in the queue;
    # a chunk nobody has taken by then is queued again (requeue_stalled), since the engine may have lost it.
    return {"batch_id": batch_id, "seq": seq, "status": "pending", "first_index": first, "series_count": len(part),
            "input": pack(part), "attempts": 0, "lease_until": queued_until}


def add_chunks(connection: Connection, batch_id: str, series: Iterable[dict[str, Any]], chunk_series: int,
               queued_until: datetime) -> int:
    """Adds the series as chunks (sized by chunk_sizes); each chunk's series are packed (compressed) as soon as
    they are read, so an iterator that lets go of what it handed over keeps only the packed form alive."""
    remaining = iter(series)
    count = first = 0
    sizes = chunk_sizes(chunk_series)
    rows: list[dict[str, Any]] = []
    while part := list(islice(remaining, next(sizes))):
        rows.append(new_chunk(batch_id, count, first, part, queued_until))
        count, first = count + 1, first + len(part)
    if rows:
        connection.execute(insert(batch_chunks_table), rows)
    return count


def create_batch(database: Database, *, key_id: str, account_id: str, kind: str, parameters: dict[str, Any],
                 series: list[dict[str, Any]], chunk_series: int, lease_seconds: float,
                 body_bytes: int = 0) -> Batch:
    """A JSON batch, stored whole and already split into chunks, in one transaction."""
    now = now_utc()
    with database.transaction() as connection:
        record = _new_record(key_id=key_id, account_id=account_id, kind=kind, source="json", parameters=parameters,
                             status="queued", series_total=len(series), now=now)
        record["prepared"], record["upload_bytes"] = True, body_bytes
        # The batch first: its chunks refer to it.
        connection.execute(insert(batches_table).values(**record))
        record["chunks_total"] = add_chunks(connection, record["id"], series, chunk_series,
                                            now + timedelta(seconds=lease_seconds))
        connection.execute(update(batches_table).where(_batches.id == record["id"])
                           .values(chunks_total=record["chunks_total"]))
    return Batch.of(record)


def start_upload(database: Database, *, key_id: str, account_id: str, kind: str,
                 parameters: dict[str, Any]) -> str:
    """A CSV batch whose upload is about to arrive; it is invisible to the account until finish_upload."""
    with database.transaction() as connection:
        record = _new_record(key_id=key_id, account_id=account_id, kind=kind, source="csv", parameters=parameters,
                             status="uploading", series_total=0, now=now_utc())
        connection.execute(insert(batches_table).values(**record))
    return record["id"]


def add_upload_piece(database: Database, batch_id: str, seq: int, data: bytes) -> None:
    # One short transaction per piece: SQLite has one writer, and an upload may take minutes to arrive. The
    # batch's size grows with each piece, so the account's quota counts uploads still arriving.
    with database.transaction() as connection:
        connection.execute(insert(batch_uploads_table).values(batch_id=batch_id, seq=seq, data=data))
        connection.execute(update(batches_table).where(_batches.id == batch_id)
                           .values(upload_bytes=_batches.upload_bytes + len(data)))


def stored_bytes(database: Database, account_id: str) -> int:
    """The size of the account's stored batch submissions (app.batches.quota): a batch whose data is deleted
    (cancelled, or an upload that could not be read) counts nothing."""
    with database.transaction() as connection:
        return int(connection.scalar(select(func.coalesce(func.sum(_batches.upload_bytes), 0))
                                     .where(_batches.account_id == account_id)) or 0)


def first_expiry(database: Database, account_id: str) -> datetime | None:
    """When the first of the account's stored batches expires, freeing its share of the quota."""
    with database.transaction() as connection:
        return connection.scalar(select(func.min(_batches.expires_at))
                                 .where(_batches.account_id == account_id, _batches.upload_bytes > 0))


def finish_upload(database: Database, batch_id: str, *, series_total: int, upload_bytes: int,
                  lease_seconds: float) -> Batch:
    now = now_utc()
    with database.transaction() as connection:
        row = connection.execute(select(batches_table).where(_batches.id == batch_id)).first()
        assert row is not None
        # As for a chunk: the split's task is given one lease to be taken before it is queued again.
        changes = {"status": "queued", "series_total": series_total, "upload_bytes": upload_bytes,
                   "updated_at": now, "lease_until": now + timedelta(seconds=lease_seconds)}
        connection.execute(update(batches_table).where(_batches.id == batch_id).values(**changes))
    return Batch.of({**row._mapping, **changes})


def _delete_data(connection: Connection, batch_id: str) -> None:
    connection.execute(delete(batch_chunks_table).where(_chunks.batch_id == batch_id))
    connection.execute(delete(batch_uploads_table).where(_uploads.batch_id == batch_id))


def discard(database: Database, batch_id: str) -> None:
    with database.transaction() as connection:
        _delete_data(connection, batch_id)
        connection.execute(delete(batches_table).where(_batches.id == batch_id))


def get_batch(database: Database, account_id: str, batch_id: str) -> Batch | None:
    with database.transaction() as connection:
        record = connection.execute(select(batches_table).where(_batches.id == batch_id)).first()
        if record is None or record.account_id != account_id or record.status == "uploading":
            return None
        return Batch.of(record._mapping)


def list_batches(database: Database, account_id: str, *, limit: int) -> list[Batch]:
    with database.transaction() as connection:
        records = connection.execute(
            select(batches_table)
            .where(_batches.account_id == account_id, _batches.status != "uploading")
            .order_by(_batches.created_at.desc(), _batches.id)
            .limit(limit)
        ).all()
        return [Batch.of(record._mapping) for record in records]


def cancel(database: Database, account_id: str, batch_id: str, *, ttl: timedelta) -> bool:
    """Deletes the batch's series and results. An unfinished batch is kept as "cancelled" (its record only)
    until it expires, so its owner sees what happened; a finished one goes entirely. False when not found."""
    now = now_utc()
    with database.transaction() as connection:
        record = connection.execute(select(batches_table).where(_batches.id == batch_id).with_for_update()).first()
        if record is None or record.account_id != account_id or record.status == "uploading":
            return False
        _delete_data(connection, batch_id)
        if record.status in RUNNABLE:
            connection.execute(update(batches_table).where(_batches.id == batch_id).values(
                status="cancelled", updated_at=now, finished_at=now, expires_at=now + ttl, lease_token=None,
                lease_until=None, upload_bytes=0))
        elif record.status != "cancelled":
            connection.execute(delete(batches_table).where(_batches.id == batch_id))
    return True


# ------------------------------------------------------------------------------------------------ workers


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


def all_failed(count: Any) -> Any:
    """The error of a batch whose every series failed, as SQL text: the envelope, with the count."""
    head = json.dumps({"code": "DATA_VALIDATION_ERROR",
                       "message": "Every series of the batch failed; each one's error is in its results."})
    return literal(head[:-1] + ', "details": {"field": "series", "issue": "every series failed", "failed": ') + \
        cast(count, String) + literal("}}")


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


# ------------------------------------------------------------------------------------------- the sweep


def free(table: Table, now: datetime) -> Any:
    """Claimable (a row of batches_table or batch_chunks_table): no worker holds it (never taken, or queued
    again), or its worker's lease ran out."""
    return or_(table.c.lease_token.is_(None), table.c.lease_until < now)


def _done_chunks(database: Database, batch_id: str) -> Iterator[bytes]:
    """The compressed results of the batch's finished chunks in submission order, one chunk at a time."""
    with database.transaction() as connection:
        sequence = connection.scalars(
            select(_chunks.seq).where(_chunks.batch_id == batch_id, _chunks.status == "done").order_by(_chunks.seq)
        ).all()
    for seq in sequence:
        with database.transaction() as connection:
            output = connection.scalar(select(_chunks.output).where(_chunks.batch_id == batch_id,
                                                                    _chunks.seq == seq))
        if output is None:  # deleted meanwhile (cancelled or expired)
            return
        yield output


def done_outputs(database: Database, batch_id: str) -> Iterator[bytes]:
    """The stored results of the batch's finished chunks in submission order, one chunk in memory at a time."""
    for output in _done_chunks(database, batch_id):
        yield zlib.decompress(output)


def done_lines(database: Database, batch_id: str) -> Iterator[bytes]:
    """The stored results in submission order, one series' JSON line at a time: each chunk is inflated as its
    lines are handed on, so what is held is the chunk's compressed form and one line, never a chunk's results
    whole (a chunk of long series is tens of megabytes inflated)."""
    for output in _done_chunks(database, batch_id):
        yield from _inflated_lines(output)


# How much inflated text is made at a time while looking for a line's end.
_INFLATE_BYTES = 256 * 1024


def _inflated_lines(compressed: bytes) -> Iterator[bytes]:
    inflate = zlib.decompressobj()
    data = compressed
    parts: list[bytes] = []
    while True:
        piece = inflate.decompress(data, _INFLATE_BYTES)
        data = inflate.unconsumed_tail
        if not piece:
            if not data:
                break
            continue
        start = 0
        while (end := piece.find(b"\n", start)) >= 0:
            parts.append(piece[start:end + 1])
            yield b"".join(parts)
            parts, start = [], end + 1
        if start < len(piece):
            parts.append(piece[start:])
    if parts:
        yield b"".join(parts)

