"""The batch tasks on the job engine, and what a worker process does for each.

- ``batches.prepare(batch_id)``: splits an uploaded CSV into chunks of series (pandas, in the worker only).
- ``batches.chunk(batch_id, seq)``: checks and computes one chunk's series and stores their results.
- ``batches.sweep()`` every minute: enqueues work whose lease ran out, work never taken when the queue is
  empty, and deletes expired batches. Idempotent: any number of consumers may run it at once.

The engine does not acknowledge tasks, so a task is only a nudge: the database says what is left to do, and a
task for work that is done, gone or held by another worker does nothing (app.batches.store).
"""

from __future__ import annotations

import logging
import tempfile
import time
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from weakref import WeakKeyDictionary

from huey import Huey, crontab
from huey.api import TaskWrapper

from app.batches import store
from app.batches.compute import run_series
from app.jobs.resources import WorkerResources
from app.settings import Settings

log = logging.getLogger("app.batches")

CSV_COLUMNS = ("unique_id", "timestamp", "value")


@dataclass(frozen=True)
class BatchTasks:
    engine: Huey
    chunk: TaskWrapper
    prepare: TaskWrapper

    def enqueue_chunks(self, chunks: Iterable[tuple[str, int]]) -> None:
        for batch_id, seq in chunks:
            self.chunk(batch_id, seq)

    def enqueue_preparation(self, batch_id: str) -> None:
        self.prepare(batch_id)

    def enqueue_stalled(self, stalled: store.Stalled) -> None:
        for batch_id in stalled.preparations:
            self.enqueue_preparation(batch_id)
        self.enqueue_chunks(stalled.chunks)


_TASKS: WeakKeyDictionary[Huey, BatchTasks] = WeakKeyDictionary()


def batch_tasks(engine: Huey) -> BatchTasks:
    """The batch tasks registered on ``engine`` (by app.jobs.engine.build_engine)."""
    return _TASKS[engine]


def register(engine: Huey, settings: Settings) -> None:
    resources = WorkerResources(settings)

    @engine.task(name="batches.chunk")
    def chunk(batch_id: str, seq: int) -> None:
        process_chunk(resources, tasks, batch_id, seq)

    @engine.task(name="batches.prepare")
    def prepare(batch_id: str) -> None:
        prepare_upload(resources, tasks, batch_id)

    @engine.periodic_task(crontab(minute="*"), name="batches.sweep")
    def sweep() -> None:
        sweep_batches(resources, tasks)

    tasks = _TASKS[engine] = BatchTasks(engine=engine, chunk=chunk, prepare=prepare)


def _ttl(settings: Settings) -> timedelta:
    return timedelta(hours=settings.batch_result_ttl_hours)


def process_chunk(resources: WorkerResources, tasks: BatchTasks, batch_id: str, seq: int) -> None:
    settings, database = resources.settings, resources.database
    lease = settings.batch_lease_seconds
    chunk = store.claim_chunk(database, batch_id, seq, lease_seconds=lease)
    if chunk is None:
        return
    lines: list[bytes] = []
    succeeded = failed = 0
    renewed = time.monotonic()
    for offset, series in enumerate(chunk.series):
        if time.monotonic() - renewed > lease / 3:
            if not store.renew(database, chunk, lease_seconds=lease):
                return  # cancelled, or another worker took over after this one stalled
            renewed = time.monotonic()
        ok, line = run_series(chunk.kind, chunk.parameters, series, index=chunk.first_index + offset,
                              max_points=settings.max_points)
        lines.append(line)
        succeeded, failed = succeeded + ok, failed + (not ok)
    store.complete_chunk(database, chunk, lines, succeeded=succeeded, failed=failed, ttl=_ttl(settings))
    # A worker that died left its lease; whoever finishes next puts it back in the queue without waiting for
    # the minute's sweep. (Only leases held: work never taken is the sweep's, once a minute, not every chunk's.)
    tasks.enqueue_stalled(store.requeue_stalled(database, held_only=True, lease_seconds=lease))


def sweep_batches(resources: WorkerResources, tasks: BatchTasks) -> None:
    settings, database = resources.settings, resources.database
    purged = store.purge_expired(database)
    if purged:
        log.info("deleted %d expired batch(es)", purged)
    stalled = store.requeue_stalled(database, lease_seconds=settings.batch_lease_seconds)
    if stalled.chunks or stalled.preparations:
        log.info("enqueued again: %d chunk(s), %d upload(s) to split", len(stalled.chunks),
                 len(stalled.preparations))
    tasks.enqueue_stalled(stalled)


class UploadError(Exception):
    def __init__(self, message: str, issue: str, provided: Any = "") -> None:
        super().__init__(message)
        self.envelope = {"code": "INVALID_REQUEST", "message": message,
                         "details": {"field": "body", "issue": issue, "provided": provided}}


def prepare_upload(resources: WorkerResources, tasks: BatchTasks, batch_id: str) -> None:
    settings, database = resources.settings, resources.database
    token = store.claim_preparation(database, batch_id, lease_seconds=settings.batch_lease_seconds)
    if token is None:
        return
    try:
        series = series_from_csv(store.upload_pieces(database, batch_id), max_series=settings.batch_max_series)
    except UploadError as error:
        store.fail_batch(database, batch_id, token, error.envelope, ttl=_ttl(settings))
        return
    total = len(series)
    chunks = store.store_preparation(database, batch_id, token, series, total=total,
                                     chunk_series=settings.batch_chunk_series,
                                     lease_seconds=settings.batch_lease_seconds, ttl=_ttl(settings))
    if chunks is not None:
        tasks.enqueue_chunks((batch_id, seq) for seq in range(chunks))


class SplitUpload:
    """The series found in an upload, handed out once each in order of first appearance: each is let go of
    as it is handed out, so the worker never holds the rows twice (as rows and as series)."""

    def __init__(self, found: dict[str, tuple[list[list[str]], list[list[Any]]]]) -> None:
        self._found = found
        self._count = len(found)

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[dict[str, Any]]:
        while self._found:
            unique_id = next(iter(self._found))
            stamps, values = self._found.pop(unique_id)
            yield {"id": unique_id, "timestamps": [t for part in stamps for t in part],
                   "values": [v for part in values for v in part]}


def series_from_csv(pieces: Iterator[bytes], *, max_series: int) -> SplitUpload:
    """The series of a long-format CSV (unique_id,timestamp,value), in order of first appearance, each row in
    file order. Values are numbers where the text is one; other text is handed on as it is (and an empty cell
    as null), so the series check names it exactly as it names such a value in JSON."""
    import numpy as np
    import pandas as pd

    with tempfile.TemporaryFile() as spool, warnings.catch_warnings():
        for piece in pieces:
            spool.write(piece)
        spool.seek(0)
        found: dict[str, tuple[list[list[str]], list[list[Any]]]] = {}
        try:
            # index_col=False: pandas would otherwise take a first row with extra fields as a sign that the
            # leading columns are an index, and shift every column; a row too long is an error either way
            # (a warning, made one, for the first row).
            warnings.simplefilter("error", pd.errors.ParserWarning)
            reader = pd.read_csv(spool, dtype=str, keep_default_na=False, na_filter=False, chunksize=500_000,
                                 encoding="utf-8-sig", index_col=False)
            for frame in reader:
                missing = [column for column in CSV_COLUMNS if column not in frame.columns]
                if missing:
                    raise UploadError("The CSV must have the columns unique_id,timestamp,value.",
                                      "missing column " + missing[0], ",".join(map(str, frame.columns))[:64])
                texts = frame["value"].to_numpy(dtype=object)
                try:
                    # Python's float() on each text, correctly rounded as JSON numbers are read (pandas' own
                    # parsers may differ in the last digit).
                    values: list[Any] = texts.astype(np.float64).tolist()
                except ValueError:
                    values = [_cell_value(text) for text in texts.tolist()]
                stamps = frame["timestamp"].to_numpy(dtype=object)
                for unique_id, rows in frame.groupby("unique_id", sort=False).indices.items():
                    entry = found.get(unique_id)
                    if entry is None:
                        if len(found) >= max_series:
                            raise UploadError(f"The upload holds more than {max_series:,} series.",
                                              "too many series", f"more than {max_series}")
                        entry = found[unique_id] = ([], [])
                    entry[0].append(stamps[rows].tolist())
                    entry[1].append([values[row] for row in rows.tolist()])
        except (pd.errors.ParserError, pd.errors.ParserWarning, pd.errors.EmptyDataError, UnicodeDecodeError,
                ValueError) as exc:
            raise UploadError("The CSV could not be read.", f"invalid CSV: {str(exc)[:120]}") from exc
    return SplitUpload(found)


def _cell_value(text: str) -> Any:
    """A value cell that is not a plain number: NaN and the infinities as floats (reported as not finite), an
    empty cell as null (reported as missing), anything else as the text (reported as not a number)."""
    if not text.strip():
        return None
    try:
        return float(text)
    except ValueError:
        return text
