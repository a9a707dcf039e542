"""A caller's many points (a bulk or remote-write body, a Prometheus read) cut into transactions of a bounded
size, each stored and judged by app.monitors.intake.ingest.append_many, and each series' outcomes put together."""

from __future__ import annotations

from collections.abc import Sequence

from app.compute.pool import WorkerPool
from app.db import Database
from app.errors import ServiceError
from app.monitors.intake import ingest
from app.monitors.intake.ingest import Appended, Outcome, SeriesPoints
from app.monitors.intake.points import IncomingPoints
from app.monitors.state.runtime import MonitorRuntime

# Points one transaction stores at most when a caller brings more (a bulk or remote-write body, a Prometheus read).
INGEST_POINTS = 5_000
# The same on SQLite. There a transaction holds the database's one writer while it writes, and every other append
# waits for it: a smaller transaction keeps a single append's wait behind a fleet's body short, while a larger one
# shares each commit among more points; this size is where the wait was short and the commits still a small share
# of the work (bench/results/remote-write.md).
SQLITE_INGEST_POINTS = 250


def transaction_points(database: Database) -> int:
    return SQLITE_INGEST_POINTS if database.settings.sqlite_path is not None else INGEST_POINTS


def append_chunked(
    *,
    database: Database,
    pool: WorkerPool,
    runtime: MonitorRuntime,
    account_id: str,
    batch: Sequence[SeriesPoints],
    from_source: bool = False,
    lenient: bool = False,
    most_points: int | None = None,
) -> list[Outcome]:
    """append_many in transactions of at most ``most_points`` points (and at most the database's
    transaction_points); per entry of ``batch``, its outcome. A series' points that are more than that are split in
    time order into successive transactions when ``lenient`` (its parts' outcomes together, or the first error);
    else its points stay in one (they succeed or fail together)."""
    bound = transaction_points(database)
    most_points = bound if most_points is None else min(most_points, bound)
    chunks: list[list[tuple[int, SeriesPoints]]] = [[]]
    room = most_points
    for index, entry in enumerate(batch):
        points, start = entry.points, 0
        if len(points.epochs) <= room:  # the common case: the whole series fits, as it came
            chunks[-1].append((index, entry))
            room -= len(points.epochs)
            continue
        while start < len(points.epochs):
            if room == 0 or (not lenient and chunks[-1] and len(points.epochs) > room):
                chunks.append([])
                room = most_points
            end = len(points.epochs) if not lenient else start + min(room, len(points.epochs) - start)
            chunks[-1].append((index, SeriesPoints(entry.monitor_id, entry.labels, IncomingPoints(
                epochs=points.epochs[start:end], texts=points.texts[start:end], values=points.values[start:end]))))
            room = max(0, room - (end - start))
            start = end
    merged: list[Outcome | None] = [None] * len(batch)
    for chunk in chunks:
        if not chunk:
            continue
        outcomes = ingest.append_many(database=database, pool=pool, runtime=runtime, account_id=account_id,
                                      batch=[entry for _, entry in chunk], from_source=from_source, lenient=lenient)
        for (index, _), outcome in zip(chunk, outcomes, strict=True):
            merged[index] = _merged(merged[index], outcome)
    return [outcome if outcome is not None else ServiceError("no points") for outcome in merged]


def _merged(before: Outcome | None, after: Outcome) -> Outcome:
    if before is None or isinstance(before, ServiceError):
        return before or after
    if isinstance(after, ServiceError):
        return after
    dropped = {k: before.dropped.get(k, 0) + after.dropped.get(k, 0) for k in {*before.dropped, *after.dropped}}
    return Appended(series=after.series, old_records=before.old_records + after.old_records,
                    texts=before.texts + after.texts, values=before.values + after.values,
                    verdicts=before.verdicts + after.verdicts, period=after.period or before.period, dropped=dropped)
