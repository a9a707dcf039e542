"""New points in: judged, stored with their events, answered (POST /monitors/{id}/points and the Prometheus reader)."""

from __future__ import annotations

from bisect import bisect_right
from contextlib import nullcontext
from typing import Any

from app.compute.detect.results import DEFAULT_DETECTOR
from app.compute.pool import WorkerPool
from app.db import Database
from app.monitors import incidents, sources, store
from app.monitors.answers import points_answer
from app.monitors.cache import History, JudgeState
from app.monitors.judge import JudgeSlot, Verdict, judge_on_worker, judge_state, judge_streaming
from app.monitors.runtime import MonitorRuntime
from app.monitors.schemas import IncomingPoints
from app.monitors.store import StaleRevision, owned_state, stored_rows, tail_rows
from app.web.errors import ApiError, InternalError

APPEND_ATTEMPTS = 5


def append_points(
    *,
    database: Database,
    pool: WorkerPool,
    runtime: MonitorRuntime,
    account_id: str,
    monitor_id: str,
    points: IncomingPoints,
    from_source: bool = False,
    lenient: bool = False,
) -> dict[str, Any]:
    """Judges and stores new points; ``from_source`` is the Prometheus reader's call (a Prometheus-backed
    monitor takes points from nothing else). ``lenient`` (remote write) drops the points that conflict with
    stored ones or come too late instead of refusing them all, and counts them in ``dropped_points``."""
    for _ in range(APPEND_ATTEMPTS):
        try:
            return _append_once(
                database=database, pool=pool, runtime=runtime, account_id=account_id, monitor_id=monitor_id,
                points=points, from_source=from_source, lenient=lenient,
            )
        except StaleRevision:
            runtime.cache.drop(monitor_id)
    raise InternalError("The monitor kept changing under concurrent writes; retry the request.")


def _append_once(
    *,
    database: Database,
    pool: WorkerPool,
    runtime: MonitorRuntime,
    account_id: str,
    monitor_id: str,
    points: IncomingPoints,
    from_source: bool,
    lenient: bool = False,
) -> dict[str, Any]:
    events_added = False
    dropped: dict[str, int] | None = None
    # The judge slot is taken before a database connection, so appends queued for the worker pool never
    # hold connections (on PostgreSQL, a burst of writers would otherwise drain the connection pool).
    with runtime.locks.lock_for(monitor_id), JudgeSlot(runtime):
        try:
            # A Core connection, one transaction: committed below with the points, rolled back on closing
            # otherwise. The ORM session's unit of work would have nothing to track here but costs as much.
            with database.engine.connect() as connection:
                connection.begin()
                monitor = owned_state(connection, account_id=account_id, monitor_id=monitor_id)
                if monitor.prometheus_query is not None and not from_source:
                    raise sources.pushed_to_reader(monitor_id)
                last = monitor.last_epoch
                split = 0 if last is None else bisect_right(points.epochs, last)
                if lenient and split:
                    old_records, dropped = store.stored_or_dropped(connection, monitor, points, split)
                else:
                    old_records = stored_rows(connection, monitor, points, split) if split else []
                new_epochs = points.epochs[split:]
                new_values = points.values[split:]
                new_texts = points.texts[split:]
                verdicts: list[Verdict] = []
                period: int | None = None
                judged: History | JudgeState | None = None
                if new_epochs:
                    if (monitor.model or DEFAULT_DETECTOR) == DEFAULT_DETECTOR:
                        judged = judge_state(connection, runtime, monitor)
                        verdicts, period = judge_streaming(monitor, judged, new_epochs, new_values)
                    else:
                        judged = runtime.cache.get(monitor.id, monitor.revision)
                        if not isinstance(judged, History) or not judged.usable(tail_rows(monitor)):
                            judged = store.load_history(connection, monitor)
                        verdicts, period = judge_on_worker(pool, monitor, judged, new_epochs, new_values)
                    with runtime.write_lock or nullcontext():
                        plan = incidents.plan_events(
                            monitor, new_epochs, new_texts, new_values, verdicts,
                            anomalies_since=lambda epoch: store.anomalies_since(connection, monitor.id, epoch),
                            started_text=lambda epoch: store.timestamp_at(connection, monitor.id, epoch, new_epochs,
                                                                          new_texts),
                            stored_point=lambda epoch: store.alert_point(connection, monitor.id, epoch),
                        )
                        store.write_judged(connection, monitor, new_epochs, new_texts, new_values, verdicts, judged,
                                           plan)
                        connection.commit()
                    events_added = bool(plan.events)
        except BaseException:
            # Judging and writing change the cached state in place; a transaction that did not commit leaves it
            # wrong.
            runtime.cache.drop(monitor_id)
            raise
        if judged is not None:
            runtime.cache.put(monitor_id, judged)
    if events_added:
        runtime.sender.notify()
    answer = points_answer(monitor, old_records, new_texts, new_values, verdicts, period)
    if lenient:
        answer["dropped_points"] = dropped or {"out_of_order": 0, "conflict": 0}
    return answer


def append_many(
    *,
    database: Database,
    pool: WorkerPool,
    runtime: MonitorRuntime,
    account_id: str,
    batches: dict[str, IncomingPoints],
) -> dict[str, dict[str, Any] | ApiError]:
    """Each monitor's points appended as append_points would (its own transaction: a monitor's points succeed or
    fail together, and one monitor's refusal is no other's); per monitor, its answer or the error it raised."""
    out: dict[str, dict[str, Any] | ApiError] = {}
    for monitor_id, points in batches.items():
        try:
            out[monitor_id] = append_points(database=database, pool=pool, runtime=runtime, account_id=account_id,
                                            monitor_id=monitor_id, points=points)
        except ApiError as exc:
            out[monitor_id] = exc
    return out
