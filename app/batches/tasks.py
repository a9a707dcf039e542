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
import os
import tempfile
import time
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import IO, TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from app.batches import preparation, store, sweep
from app.batches.backtest import BacktestRunner
from app.batches.one_series import BACKTEST, SeriesRunner
from app.jobs.resources import WorkerResources
from app.settings import Settings

if TYPE_CHECKING:
    from huey import Huey
    from huey.api import TaskWrapper


log = logging.getLogger("app.batches")

CSV_COLUMNS = ("unique_id", "timestamp", "value")
NIXTLA_COLUMNS = {"ds": "timestamp", "y": "value"}


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

    def enqueue_stalled(self, stalled: sweep.Stalled) -> None:
        for batch_id in stalled.preparations:
            self.enqueue_preparation(batch_id)
        self.enqueue_chunks(stalled.chunks)


_TASKS: WeakKeyDictionary[Huey, BatchTasks] = WeakKeyDictionary()


def batch_tasks(engine: Huey) -> BatchTasks:
    """The batch tasks registered on ``engine`` (create_app hands register to app.jobs.engine.build_engine)."""
    return _TASKS[engine]


def register(engine: Huey, settings: Settings) -> None:
    from huey import crontab  # Huey loads with the engine, not with this module

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

    @engine.on_startup(name="warm-up")
    def warm_up() -> None:
        # Each job worker process loads the numeric stack and fits once before it takes tasks: else the first
        # series it computes pays seconds for that, and a new batch's first progress waits for it.
        from app.compute.forecast.work import warm_up

        warm_up()

    tasks = _TASKS[engine] = BatchTasks(engine=engine, chunk=chunk, prepare=prepare)


def _ttl(settings: Settings) -> timedelta:
    return timedelta(hours=settings.batch_result_ttl_hours)


def process_chunk(resources: WorkerResources, tasks: BatchTasks, batch_id: str, seq: int) -> None:
    """Computes one chunk: the fairest waiting now (store.claim_fairest_chunk), which is this task's own
    (``batch_id``, ``seq``) only when no other account waits for less."""
    settings, database = resources.settings, resources.database
    lease = settings.batch_lease_seconds
    chunk = store.claim_fairest_chunk(database, lease_seconds=lease)
    if chunk is None:
        return
    lines: list[bytes] = []
    succeeded = failed = 0
    renewed = time.monotonic()
    runner: SeriesRunner | BacktestRunner
    if chunk.kind == BACKTEST:
        runner = BacktestRunner(chunk.parameters, max_points=settings.max_points)
    else:
        runner = SeriesRunner(chunk.kind, chunk.parameters, max_points=settings.max_points)
    for offset, series in enumerate(chunk.series):
        if time.monotonic() - renewed > lease / 3:
            if not store.renew(database, chunk, lease_seconds=lease):
                return  # cancelled, or another worker took over after this one stalled
            renewed = time.monotonic()
        ok, line = runner.run(series, index=chunk.first_index + offset)
        lines.append(line)
        succeeded, failed = succeeded + ok, failed + (not ok)
    store.complete_chunk(database, chunk, lines, succeeded=succeeded, failed=failed, ttl=_ttl(settings))
    # A worker that died left its lease; whoever finishes next puts it back in the queue without waiting for
    # the minute's sweep. (Only leases held: work never taken is the sweep's, once a minute, not every chunk's.)
    tasks.enqueue_stalled(sweep.requeue_stalled(database, held_only=True, lease_seconds=lease))


def sweep_batches(resources: WorkerResources, tasks: BatchTasks) -> None:
    settings, database = resources.settings, resources.database
    purged = sweep.purge_expired(database)
    if purged:
        log.info("deleted %d expired batch(es)", purged)
    stalled = sweep.requeue_stalled(database, lease_seconds=settings.batch_lease_seconds)
    if stalled.chunks or stalled.preparations:
        log.info("enqueued again: %d chunk(s), %d upload(s) to split", len(stalled.chunks),
                 len(stalled.preparations))
    tasks.enqueue_stalled(stalled)


class UploadError(Exception):
    def __init__(self, message: str, issue: str, provided: Any = "") -> None:
        super().__init__(message)
        self.envelope = {"code": "INVALID_REQUEST", "message": message,
                         "details": {"field": "body", "issue": issue, "provided": provided}}


class NotGrouped(Exception):
    """A series' rows are not all in one run: the upload cannot be split as it is read."""


class _Lease:
    """The split's lease, renewed when a third of it has passed (a split of a large upload outlasts a lease)."""

    def __init__(self, resources: WorkerResources, batch_id: str, token: str) -> None:
        self._database, self._batch_id, self._token = resources.database, batch_id, token
        self.seconds = resources.settings.batch_lease_seconds
        self._renewed = time.monotonic()

    def renewed(self) -> None:
        self._renewed = time.monotonic()

    def kept(self) -> bool:
        """False when the lease is lost (cancelled, or taken over): the caller stops."""
        if time.monotonic() - self._renewed < self.seconds / 3:
            return True
        self._renewed = time.monotonic()
        return preparation.renew_preparation(self._database, self._batch_id, self._token, lease_seconds=self.seconds)


def prepare_upload(resources: WorkerResources, tasks: BatchTasks, batch_id: str) -> None:
    """Splits the upload into chunks. When each series' rows are contiguous (as forecast_client writes them),
    as it is read: each chunk is stored and queued as soon as its series are complete, so the first results
    come while the rest is parsed, and the worker holds one parser frame and one chunk's series at a time.
    Otherwise the whole file is split at once as before, with the same series, results and messages (a series
    met again further on: whatever was stored of the file is dropped first)."""
    settings, database = resources.settings, resources.database
    token = preparation.claim_preparation(database, batch_id, lease_seconds=settings.batch_lease_seconds)
    if token is None:
        return
    lease = _Lease(resources, batch_id, token)
    # The series the web process counted (and charged to the key's rate limits) are all that is computed:
    # an upload the parser finds more in fails whole, before any series past the count is stored.
    counted = preparation.counted_series(database, batch_id)
    limit = min(settings.batch_max_series, counted) if counted else settings.batch_max_series
    with tempfile.TemporaryFile() as spool:
        for piece in preparation.upload_pieces(database, batch_id):
            spool.write(piece)
            if not lease.kept():
                return
        # A split that an earlier worker began (and died in) starts again from nothing.
        if not preparation.restart_preparation(database, batch_id, token):
            return
        spool.seek(0)
        try:
            try:
                total = _split_streaming(resources, tasks, batch_id, token, spool, lease, limit)
            except NotGrouped:
                if not preparation.restart_preparation(database, batch_id, token):
                    return
                spool.seek(0)
                series = split_whole(spool, max_series=limit)
                chunks = preparation.store_preparation(database, batch_id, token, series, total=len(series),
                                                 chunk_series=settings.batch_chunk_series,
                                                 lease_seconds=settings.batch_lease_seconds, ttl=_ttl(settings))
                if chunks is not None:
                    tasks.enqueue_chunks((batch_id, seq) for seq in range(chunks))
                return
        except UploadError as error:
            preparation.fail_batch(database, batch_id, token, error.envelope, ttl=_ttl(settings))
            return
    if total is not None:
        preparation.finish_preparation(database, batch_id, token, total=total, ttl=_ttl(settings))


def _split_streaming(resources: WorkerResources, tasks: BatchTasks, batch_id: str, token: str, spool: IO[bytes],
                     lease: _Lease, max_series: int) -> int | None:
    """Stores and queues the upload's chunks as their series are read; the number of series, or None when the
    lease was lost (the caller stops)."""
    settings, database = resources.settings, resources.database
    sizes = store.chunk_sizes(settings.batch_chunk_series)
    part: list[dict[str, Any]] = []
    want, seq, first = next(sizes), 0, 0

    def flush() -> bool:
        nonlocal part, want, seq, first
        if not preparation.add_prepared_chunk(database, batch_id, token, seq=seq, first_index=first, series=part,
                                        lease_seconds=lease.seconds):
            return False
        lease.renewed()
        tasks.enqueue_chunks([(batch_id, seq)])
        seq, first, part, want = seq + 1, first + len(part), [], next(sizes)
        return True

    for one in grouped_series(spool, max_series=max_series):
        part.append(one)
        if len(part) == want and not flush():
            return None
        if not lease.kept():
            return None
    if part and not flush():
        return None
    return first


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


# Rows per parser frame. The whole-file split keeps large frames (every series is held anyway); the streamed
# one reads a small first frame, so the first series reach a worker at once, then frames that bound what it
# holds (about 150 bytes of Python objects a row).
WHOLE_FRAME_ROWS = 500_000
FIRST_FRAME_ROWS = 10_000
FRAME_ROWS = 100_000


def _read_errors() -> tuple[type[BaseException], ...]:
    import pandas as pd

    return (pd.errors.ParserError, pd.errors.ParserWarning, pd.errors.EmptyDataError, UnicodeDecodeError,
            ValueError)


def _unreadable(exc: BaseException) -> UploadError:
    return UploadError("The CSV could not be read.", f"invalid CSV: {str(exc)[:120]}")


def _reader(spool: IO[bytes], rows: int) -> Any:
    import pandas as pd

    # pandas closes the file it reads (through its text wrapper) when it is done or dropped: it reads a
    # duplicate of the spool's descriptor, so the spool stays open for a second reading.
    handle = os.fdopen(os.dup(spool.fileno()), "rb")
    try:
        # index_col=False: pandas would otherwise take a first row with extra fields as a sign that the leading
        # columns are an index, and shift every column; a row too long is an error either way (a warning,
        # made one, for the first row).
        return pd.read_csv(handle, dtype=str, keep_default_na=False, na_filter=False, chunksize=rows,
                           encoding="utf-8-sig", index_col=False)
    except BaseException:
        handle.close()
        raise


def _checked(frame: Any) -> Any:
    if "timestamp" not in frame.columns and "value" not in frame.columns:
        frame = frame.rename(columns=NIXTLA_COLUMNS)  # unique_id,ds,y: the same columns under Nixtla's names
    missing = [column for column in CSV_COLUMNS if column not in frame.columns]
    if missing:
        raise UploadError("The CSV must have the columns unique_id,timestamp,value (or unique_id,ds,y).",
                          "missing column " + missing[0], ",".join(map(str, frame.columns))[:64])
    return frame


def _values(frame: Any) -> list[Any]:
    import numpy as np

    texts = frame["value"].to_numpy(dtype=object)
    try:
        # Python's float() on each text, correctly rounded as JSON numbers are read (pandas' own parsers may
        # differ in the last digit).
        values: list[Any] = texts.astype(np.float64).tolist()
    except ValueError:
        values = [_cell_value(text) for text in texts.tolist()]
    return values


def _too_many(max_series: int) -> UploadError:
    return UploadError(f"The upload holds more than {max_series:,} series: more than were counted when it "
                       f"arrived, or than a batch may hold.", "too many series", f"more than {max_series}")


def _spool(pieces: Iterator[bytes]) -> IO[bytes]:
    spool = tempfile.TemporaryFile()
    for piece in pieces:
        spool.write(piece)
    spool.seek(0)
    return spool


def series_from_csv(pieces: Iterator[bytes], *, max_series: int) -> SplitUpload:
    """The series of a long-format CSV (unique_id,timestamp,value), in order of first appearance, each row in
    file order, the whole file at once (split_whole)."""
    with _spool(pieces) as spool:
        return split_whole(spool, max_series=max_series)


def split_whole(spool: IO[bytes], *, max_series: int) -> SplitUpload:
    """The series of a long-format CSV (unique_id,timestamp,value), in order of first appearance, each row in
    file order, with every series held until the end (any row order is accepted). Values are numbers where
    the text is one; other text is handed on as it is (and an empty cell as null), so the series check names
    it exactly as it names such a value in JSON."""
    import pandas as pd

    found: dict[str, tuple[list[list[str]], list[list[Any]]]] = {}
    with warnings.catch_warnings():
        try:
            warnings.simplefilter("error", pd.errors.ParserWarning)
            with _reader(spool, WHOLE_FRAME_ROWS) as reader:
                for frame in reader:
                    frame = _checked(frame)
                    values = _values(frame)
                    stamps = frame["timestamp"].to_numpy(dtype=object)
                    for unique_id, rows in frame.groupby("unique_id", sort=False).indices.items():
                        entry = found.get(unique_id)
                        if entry is None:
                            if len(found) >= max_series:
                                raise _too_many(max_series)
                            entry = found[unique_id] = ([], [])
                        entry[0].append(stamps[rows].tolist())
                        entry[1].append([values[row] for row in rows.tolist()])
        except _read_errors() as exc:
            raise _unreadable(exc) from exc
    return SplitUpload(found)


def _frames(spool: IO[bytes]) -> Iterator[Any]:
    """The parser's frames, a small one first; a read error as the UploadError the whole-file split gives (the
    parser's messages name lines of the file, whatever the frame)."""
    import pandas as pd

    rows = FIRST_FRAME_ROWS
    with warnings.catch_warnings():
        # The filter holds only while the parser runs: the caller may compute series between frames.
        warnings.simplefilter("error", pd.errors.ParserWarning)
        try:
            reader = _reader(spool, FRAME_ROWS)
        except _read_errors() as exc:
            raise _unreadable(exc) from exc
    with reader:
        while True:
            with warnings.catch_warnings():
                warnings.simplefilter("error", pd.errors.ParserWarning)
                try:
                    frame = reader.get_chunk(rows)
                except StopIteration:
                    return
                except _read_errors() as exc:
                    raise _unreadable(exc) from exc
            rows = FRAME_ROWS
            yield _checked(frame)


def grouped_series(spool: IO[bytes], *, max_series: int) -> Iterator[dict[str, Any]]:
    """The series of a CSV whose series' rows are contiguous, each handed out as soon as the next series
    starts: the same series, values and errors as split_whole, in the same order. Raises NotGrouped on
    meeting a series again after another (before handing out anything of that frame), and UploadError where
    split_whole would (possibly after handing out the series before the error)."""
    import numpy as np

    finished: set[str] = set()
    current: str | None = None
    stamps: list[Any] = []
    values: list[Any] = []
    count = 0
    for frame in _frames(spool):
        ids = frame["unique_id"].to_numpy(dtype=object)
        if not len(ids):
            continue
        bounds = [0, *(np.flatnonzero(ids[1:] != ids[:-1]) + 1).tolist(), len(ids)]
        runs = [ids[start] for start in bounds[:-1]]
        if len(set(runs)) != len(runs) or any(run in finished or (run == current and index) for index, run in
                                               enumerate(runs)):
            raise NotGrouped
        frame_values = _values(frame)
        frame_stamps = frame["timestamp"].to_numpy(dtype=object)
        for index, run in enumerate(runs):
            if run != current:
                if current is not None:
                    finished.add(current)
                    yield {"id": current, "timestamps": stamps, "values": values}
                if count >= max_series:
                    raise _too_many(max_series)
                count += 1
                current, stamps, values = run, [], []
            start, end = bounds[index], bounds[index + 1]
            stamps.extend(frame_stamps[start:end].tolist())
            values.extend(frame_values[start:end])
    if current is not None:
        yield {"id": current, "timestamps": stamps, "values": values}


def _cell_value(text: str) -> Any:
    """A value cell that is not a plain number: NaN and the infinities as floats (reported as not finite), an
    empty cell as null (reported as missing), anything else as the text (reported as not a number)."""
    if not text.strip():
        return None
    try:
        return float(text)
    except ValueError:
        return text
