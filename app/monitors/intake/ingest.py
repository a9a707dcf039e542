"""New points in: judged, stored with their events, answered. One engine for every path a point takes (POST
/monitors/{id}/points, bulk points, remote write, the Prometheus reader): the points of any number of series in one
transaction, one statement for their states, one compare-and-set and one insert for them all; a series' events only
when its verdicts open or close an incident. Bodies of many points are cut into such transactions by
app.monitors.intake.transactions."""

from __future__ import annotations

import logging
import time
from bisect import bisect_right
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from app.compute.detect.results import DEFAULT_DETECTOR
from app.compute.detect.streaming import StreamingDetector
from app.compute.pool import WorkerPool
from app.db import Database
from app.errors import InvalidInput, ServiceError
from app.monitors import label_sets, sources, store
from app.monitors.alerts import incidents
from app.monitors.intake.points import IncomingPoints
from app.monitors.judge import JudgeSlot, judge_on_worker, judge_state, judge_streaming
from app.monitors.label_sets import NO_LABELS, Labels
from app.monitors.payloads.views import points_answer
from app.monitors.state import snapshots
from app.monitors.state.cache import History, JudgeState
from app.monitors.state.runtime import MonitorRuntime
from app.monitors.store import JudgedPoints, StaleRevision, epoch_text, stored_rows, tail_rows, utc_now
from app.monitors.types import SeriesState, Verdict
from app.series.frequencies import UNIT_SECONDS

log = logging.getLogger("app.monitors.ingest")

APPEND_ATTEMPTS = 5
# A point dated further ahead of the server's clock than this (or than one unit of its monitor's data frequency, if
# longer: a day's total may be stamped at the day's end) is refused: stored, it would make every later current point
# of its series older than the newest one, and so dropped as out of order.
LEAST_AHEAD_SECONDS = 3_600
_LONGEST_UNIT = {"Monthly": 31 * 86_400, "Quarterly": 92 * 86_400, "Yearly": 366 * 86_400}


def latest_epoch(data_frequency: str, now: float) -> int:
    """The latest time a new point of a monitor with ``data_frequency`` may be dated at, in epoch seconds."""
    unit = UNIT_SECONDS.get(data_frequency) or _LONGEST_UNIT.get(data_frequency, 0)
    return int(now) + max(LEAST_AHEAD_SECONDS, unit)


class PointsNotJudged(InvalidInput):
    """A series whose points the detector failed on: refused for that series alone (the other series of the same
    body are stored), and its detector state forgotten, so its next points are judged by a state rebuilt from what
    is stored. The caller's to change, not the service's to retry: a sender that retried the same points would only
    fail again."""


@dataclass
class SeriesPoints:
    """One series' incoming points, by monitor and label set."""

    monitor_id: str
    labels: Labels
    points: IncomingPoints


@dataclass
class Appended:
    """What became of one series' points: the stored rows it repeated, the new points' verdicts, and (lenient) the
    points dropped by outcome."""

    series: SeriesState
    old_records: list[Any]
    texts: list[str]
    values: list[float]
    verdicts: list[Verdict]
    period: int | None
    dropped: dict[str, int] = field(default_factory=dict)

    def answer(self) -> dict[str, Any]:
        return points_answer(self.series, self.old_records, self.texts, self.values, self.verdicts, self.period)


Outcome = Appended | ServiceError


def append_points(
    *,
    database: Database,
    pool: WorkerPool,
    runtime: MonitorRuntime,
    account_id: str,
    monitor_id: str,
    points: IncomingPoints,
    labels: Labels = NO_LABELS,
    from_source: bool = False,
    lenient: bool = False,
) -> dict[str, Any]:
    """Judges and stores one series' new points and answers as POST /monitors/{id}/points does; ``from_source``
    is the Prometheus reader's call (a Prometheus-backed monitor takes points from nothing else). ``lenient``
    (remote write) drops the points that conflict with stored ones or come too late instead of refusing them all,
    and counts them in ``dropped_points``."""
    outcome = append_many(database=database, pool=pool, runtime=runtime, account_id=account_id,
                          batch=[SeriesPoints(monitor_id, labels, points)], from_source=from_source,
                          lenient=lenient)[0]
    if isinstance(outcome, ServiceError):
        raise outcome
    answer = outcome.answer()
    if lenient:
        answer["dropped_points"] = outcome.dropped
    return answer


def append_many(
    *,
    database: Database,
    pool: WorkerPool,
    runtime: MonitorRuntime,
    account_id: str,
    batch: Sequence[SeriesPoints],
    from_source: bool = False,
    lenient: bool = False,
) -> list[Outcome]:
    """Each series' points judged and stored, all in one transaction; per entry of ``batch`` (one per series), what
    became of its points or the error that refused them (a series' points succeed or fail together, and one
    series' refusal is no other's). A series new to its monitor is created, or refused beyond the monitor's cap."""
    outcomes: list[Outcome | None] = [None] * len(batch)
    max_series = database.settings.max_series_per_monitor
    wanted: dict[str, list[Labels]] = {}
    for entry in batch:
        wanted.setdefault(entry.monitor_id, []).append(entry.labels)
    for _ in range(APPEND_ATTEMPTS):
        resolved = label_sets.resolve(database, runtime.series_ids, account_id=account_id, wanted=wanted,
                                  max_series=max_series, from_source=from_source, batch=batch, now=utc_now())
        pending: list[tuple[int, int, IncomingPoints]] = []  # (entry, series id, points)
        for index, entry in enumerate(batch):
            if outcomes[index] is not None:
                continue
            key = (entry.monitor_id, entry.labels)
            if entry.monitor_id in resolved.errors:
                outcomes[index] = resolved.errors[entry.monitor_id]
            elif key in resolved.over_cap:
                outcomes[index] = label_sets.over_cap_error(max_series, entry.labels)
            else:
                pending.append((index, resolved.ids[key], entry.points))
        if not pending:
            break
        try:
            done, gone = _append_once(database=database, pool=pool, runtime=runtime, account_id=account_id,
                                      pending=pending, from_source=from_source, lenient=lenient)
        except StaleRevision:
            continue
        for index, outcome in done.items():
            outcomes[index] = outcome
        if not gone:
            break
        # Series retired (or a monitor deleted) since their ids were remembered: found again, or created anew.
        wanted = {}
        for index in gone:
            runtime.series_ids.forget(batch[index].monitor_id, batch[index].labels)
            wanted.setdefault(batch[index].monitor_id, []).append(batch[index].labels)
    if any(outcome is None for outcome in outcomes):
        raise ServiceError("The monitor kept changing under concurrent writes; retry the request.")
    return outcomes  # type: ignore[return-value]


@dataclass
class _Judging:
    """One series' points on their way through a transaction."""

    index: int
    state: SeriesState
    points: IncomingPoints
    split: int
    old_records: list[Any]
    dropped: dict[str, int]
    judged: History | JudgeState | None = None
    verdicts: list[Verdict] = field(default_factory=list)
    period: int | None = None


def _append_once(
    *,
    database: Database,
    pool: WorkerPool,
    runtime: MonitorRuntime,
    account_id: str,
    pending: list[tuple[int, int, IncomingPoints]],
    from_source: bool,
    lenient: bool,
) -> tuple[dict[int, Outcome], list[int]]:
    """One transaction over the pending series: (outcome by batch index, batch indexes whose series is gone)."""
    done: dict[int, Outcome] = {}
    gone: list[int] = []
    judging: list[_Judging] = []
    failed: dict[int, PointsNotJudged] = {}
    events_added = False
    series_ids = [series_id for _, series_id, _ in pending]
    # The judge slot is taken before a database connection, so appends queued for the worker pool never
    # hold connections (on PostgreSQL, a burst of writers would otherwise drain the connection pool).
    with runtime.locks.held(series_ids), JudgeSlot(runtime):
        try:
            # One transaction: committed below with the points, rolled back on closing otherwise.
            with database.engine.connect() as connection:
                connection.begin()
                states = store.series_states(connection, series_ids)
                for index, series_id, points in pending:
                    state = states.get(series_id)
                    if state is None:
                        gone.append(index)
                        continue
                    if state.account_id != account_id:
                        done[index] = label_sets.not_found(state.monitor_id)
                        continue
                    if state.prometheus_query is not None and not from_source:
                        done[index] = sources.pushed_to_reader(state.monitor_id)
                        continue
                    try:
                        judging.append(_checked(connection, state, index, points, lenient))
                    except ServiceError as exc:
                        done[index] = exc
                detectors: dict[str, StreamingDetector] = {}
                writes: list[JudgedPoints] = []
                for item in judging:
                    if item.split < len(item.points.epochs):
                        try:
                            writes.append(_judge(connection, pool, runtime, item, detectors))
                        except (ServiceError, SQLAlchemyError):  # the pool's or the database's: every series'
                            raise
                        except Exception as exc:  # noqa: BLE001 - one series' failure stays that series'
                            failed[item.index] = _not_judged(runtime, item, exc)
                if writes:
                    with runtime.write_lock or nullcontext():
                        store.write_judged(connection, writes)
                        connection.commit()
                    events_added = any(w.plan.events for w in writes)
        except BaseException:
            # Judging and writing change the cached states in place; a transaction that did not commit leaves
            # them wrong.
            for item in judging:
                runtime.cache.drop(item.state.series_id)
            raise
        for item in judging:
            if item.judged is not None:
                runtime.cache.put(item.state.series_id, item.judged)
    if events_added:
        runtime.sender.notify()
    if failed:
        with database.engine.begin() as connection:
            for item in judging:
                if item.index in failed:
                    snapshots.forget(connection, item.state.series_id)
    done.update(failed)
    for item in judging:
        if item.index in failed:
            continue
        points, split = item.points, item.split
        done[item.index] = Appended(series=item.state, old_records=item.old_records, texts=points.texts[split:],
                                    values=points.values[split:], verdicts=item.verdicts, period=item.period,
                                    dropped=item.dropped)
    return done, gone


def _not_judged(runtime: MonitorRuntime, item: _Judging, exc: Exception) -> PointsNotJudged:
    runtime.cache.drop(item.state.series_id)  # judging changes a held state in place: this one may be half-changed
    log.exception("the detector failed on a series' points; they are refused and its state is rebuilt",
                  extra={"fields": {"monitor_id": item.state.monitor_id, "series_id": item.state.series_id}})
    return PointsNotJudged(
        f"These points could not be judged ({type(exc).__name__}); none of this series' points in this request were "
        "stored, and its detector will be rebuilt from its stored points for the next ones.",
        details={"monitor_id": item.state.monitor_id, "labels": item.state.label_map()})


def _checked(connection: Any, state: SeriesState, index: int, points: IncomingPoints, lenient: bool) -> _Judging:
    """The series' points split at its newest stored one: those before it must repeat stored points (a 422
    otherwise, or dropped and counted when ``lenient``)."""
    dropped = {"out_of_order": 0, "conflict": 0, "too_far_ahead": 0}
    latest = latest_epoch(state.data_frequency, time.time())
    if points.epochs and points.epochs[-1] > latest:  # strictly increasing: those too far ahead are the last ones
        keep = bisect_right(points.epochs, latest)
        if not lenient:
            raise InvalidInput(
                "Invalid points: a timestamp is too far ahead of the server's clock (at most "
                f"{epoch_text(latest)}, one unit of the monitor's data frequency or an hour, whichever is longer).",
                details={"field": "timestamps", "index": keep, "issue": "too far ahead of the server's clock",
                         "provided": points.texts[keep], "maximum": epoch_text(latest)})
        dropped["too_far_ahead"] = len(points.epochs) - keep
        points = IncomingPoints(epochs=points.epochs[:keep], texts=points.texts[:keep], values=points.values[:keep])
    last = state.last_epoch
    split = 0 if last is None else bisect_right(points.epochs, last)
    old_records: list[Any] = []
    if split and lenient:
        old_records, late = store.stored_or_dropped(connection, state, points, split)
        dropped.update(late)
    elif split:
        old_records = stored_rows(connection, state, points, split)
    return _Judging(index=index, state=state, points=points, split=split, old_records=old_records, dropped=dropped)


def _judge(connection: Any, pool: WorkerPool, runtime: MonitorRuntime, item: _Judging,
           detectors: dict[str, StreamingDetector]) -> JudgedPoints:
    state, split = item.state, item.split
    epochs, values = item.points.epochs[split:], item.points.values[split:]
    texts = item.points.texts[split:]
    if (state.model or DEFAULT_DETECTOR) == DEFAULT_DETECTOR:
        judged: History | JudgeState = judge_state(connection, runtime, state)
        detector = detectors.get(state.monitor_id)
        if detector is None:  # one per monitor per batch: its series share the settings
            detector = detectors[state.monitor_id] = state.detector()
        item.verdicts, item.period = judge_streaming(state, judged, epochs, values, detector)
    else:
        cached = runtime.cache.get(state.series_id, state.revision)
        judged = cached if isinstance(cached, History) and cached.usable(tail_rows(state)) else \
            store.load_history(connection, state)
        item.verdicts, item.period = judge_on_worker(pool, state, judged, epochs, values)
    item.judged = judged
    plan = incidents.plan_events(
        state, epochs, texts, values, item.verdicts,
        anomalies_since=_bound(store.anomalies_since, connection, state),
        started_text=lambda epoch: store.timestamp_at(connection, state, epoch, epochs, texts),
        stored_point=_bound(store.alert_point, connection, state),
        peak_since=_bound(store.peak_since, connection, state),
    )
    return JudgedPoints(series=state, epochs=epochs, texts=texts, values=values, verdicts=item.verdicts,
                        judged=judged, plan=plan)


def _bound(lookup: Callable[[Any, SeriesState, int], Any], connection: Any, state: SeriesState
           ) -> Callable[[int], Any]:
    return lambda epoch: lookup(connection, state, epoch)
