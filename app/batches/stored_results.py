"""A batch's stored results read back in submission order, one chunk in memory at a time (the results endpoint
streams them; workers store them with app.batches.leases.complete_chunk)."""

from __future__ import annotations

import zlib
from collections.abc import Iterator

from sqlalchemy import select

from app.batches.records import batch_chunks_table
from app.db import Database

_chunks = batch_chunks_table.c


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
