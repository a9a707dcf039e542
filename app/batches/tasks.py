"""The batch tasks on the job engine, and what a worker process does for each.

- ``batches.prepare(batch_id)``: splits an uploaded CSV into chunks of series (app.batches.csv_split: pandas,
  in the worker only).
- ``batches.chunk(batch_id, seq)``: checks and computes one chunk's series and stores their results.
- ``batches.sweep()`` every minute: enqueues work whose lease ran out, work never taken when the queue is
  empty, and deletes expired batches. Idempotent: any number of consumers may run it at once.

The engine does not acknowledge tasks, so a task is only a nudge: the database says what is left to do, and a
task for work that is done, gone or held by another worker does nothing (app.batches.leases).
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import IO, TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from app.batches import leases, preparation, store, sweep
from app.batches.backtest import BacktestRunner
from app.batches.csv_split import NotGrouped, UploadError, grouped_series, split_whole
from app.batches.one_series import BACKTEST, SeriesRunner
from app.jobs.resources import WorkerResources
from app.settings import Settings

if TYPE_CHECKING:
    from huey import Huey
    from huey.api import TaskWrapper


log = logging.getLogger("app.batches")


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
    """Computes one chunk: the fairest waiting now (leases.claim_fairest_chunk), which is this task's own
    (``batch_id``, ``seq``) only when no other account waits for less."""
    settings, database = resources.settings, resources.database
    lease = settings.batch_lease_seconds
    chunk = leases.claim_fairest_chunk(database, lease_seconds=lease)
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
            if not leases.renew(database, chunk, lease_seconds=lease):
                return  # cancelled, or another worker took over after this one stalled
            renewed = time.monotonic()
        ok, line = runner.run(series, index=chunk.first_index + offset)
        lines.append(line)
        succeeded, failed = succeeded + ok, failed + (not ok)
    leases.complete_chunk(database, chunk, lines, succeeded=succeeded, failed=failed, ttl=_ttl(settings))
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

