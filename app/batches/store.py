"""A batch's record in the database, where every process (web, workers on any machine) sees the same thing: its
submission (a JSON batch stored whole with its chunks, a CSV upload arriving in pieces), what its owner reads of
it, its cancellation, and the sums the account's quota counts.

Workers take the chunks under leases (app.batches.leases); the results they store are read back in order by
app.batches.stored_results.
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

from sqlalchemy import Connection, String, cast, delete, func, insert, literal, select, update

from app.batches.records import batch_chunks_table, batch_uploads_table, batches_table
from app.db import Database

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


def all_failed(count: Any) -> Any:
    """The error of a batch whose every series failed, as SQL text: the envelope, with the count."""
    head = json.dumps({"code": "DATA_VALIDATION_ERROR",
                       "message": "Every series of the batch failed; each one's error is in its results."})
    return literal(head[:-1] + ', "details": {"field": "series", "issue": "every series failed", "failed": ') + \
        cast(count, String) + literal("}}")
