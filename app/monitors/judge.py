"""Verdicts for a series' new points: the streaming detector from a state this process keeps (caught up on what
other processes stored, or rebuilt from the stored points), or another detector on the worker pool."""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Row

from app.anomalies import service as detection
from app.compute.detect.reasons import reason
from app.compute.detect.results import DetectionResult
from app.compute.detect.state import POINT
from app.compute.detect.streaming import WARMUP, StreamingDetector, Verdicts
from app.compute.detect.work import DetectionWork
from app.compute.pool import PoolBusy, PoolError, WorkerPool
from app.errors import Unavailable
from app.monitors import store
from app.monitors.state import snapshots
from app.monitors.state.cache import History, JudgeState
from app.monitors.store import NOT_ANOMALY, REBUILD_ROWS, tail_rows
from app.monitors.types import SeriesState, Verdict, threshold_of
from app.web.metrics import REJUDGED_POINTS

if TYPE_CHECKING:
    from app.monitors.state.runtime import MonitorRuntime

# A saturated pool is a moment's queue, not a failure of the write: retry for this long before a 500.
POOL_BUSY_PATIENCE_SECONDS = 30.0


def judge_on_pool(pool: WorkerPool, work: DetectionWork) -> DetectionResult:
    deadline = time.monotonic() + POOL_BUSY_PATIENCE_SECONDS
    pause = 0.005
    while True:
        try:
            return pool.submit(work)
        except PoolBusy as exc:
            if time.monotonic() + pause > deadline:
                raise Unavailable(str(exc), retry_after=exc.retry_after or 5) from exc
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        except PoolError as exc:
            raise Unavailable(f"The points could not be judged: {exc}") from exc


class JudgeSlot:
    """A judge slot held for a with block (a class: a generator-based context manager costs more per append)."""

    __slots__ = ("_slots",)

    def __init__(self, runtime: MonitorRuntime) -> None:
        self._slots = runtime.judge_slots

    def __enter__(self) -> None:
        if not self._slots.acquire(timeout=POOL_BUSY_PATIENCE_SECONDS):
            raise Unavailable("The detector workers are saturated; retry shortly.", retry_after=5)

    def __exit__(self, *_exc: object) -> None:
        self._slots.release()


def judge_on_worker(
    pool: WorkerPool, monitor: SeriesState, history: History, epochs: list[int], values: list[float]
) -> tuple[list[Verdict], int | None]:
    import numpy as np
    hist_epochs, hist_values = history.series(tail_rows(monitor))
    confidence, false_alarms_per_week = threshold_of(monitor)
    # Through the detection front door, so a monitor's verdicts are POST /anomalies' for the same rows.
    result = detection.detect(
        np.concatenate([hist_epochs, np.asarray(epochs, dtype=np.int64)]),
        np.concatenate([hist_values, np.asarray(values, dtype=np.float64)]),
        data_frequency=monitor.data_frequency,
        confidence=confidence,
        false_alarms_per_week=false_alarms_per_week,
        detector=monitor.model,
        start=len(hist_epochs),
        run=lambda work: judge_on_pool(pool, work),
    )
    return verdicts_of(result, values, warm=result.warmup_points - len(hist_epochs)), result.period


def verdicts_of(result: DetectionResult | Verdicts, values: Sequence[float], *, warm: int) -> list[Verdict]:
    """One Verdict per judged row (one per value); the first ``warm`` of them are warm-up rows."""
    incident = result.incident if result.incident is not None else result.is_anomaly
    signal, size = result.signal, result.size
    return [
        Verdict(
            expected=result.expected[i],
            lower=result.lower[i],
            upper=result.upper[i],
            score=result.score[i],
            is_anomaly=bool(result.is_anomaly[i]),
            direction=result.direction[i],
            warmup=i < warm,
            incident=bool(incident[i]),
            reason=None if not result.is_anomaly[i] else reason(
                signal[i] if signal else POINT, size[i] if size else value - result.expected[i], value,
                result.lower[i], result.upper[i]),
        )
        for i, value in enumerate(values)
    ]

# Points judged a second time are what several processes (or a restart) cost a monitor: counted for operators.
_CAUGHT_UP, _REBUILT = REJUDGED_POINTS.labels("catch_up"), REJUDGED_POINTS.labels("rebuild")


def judge_state(connection: Connection, runtime: MonitorRuntime, series: SeriesState) -> JudgeState:
    """The detector's state after the stored points: this process's own, or the one saved in the database
    (app.monitors.state.snapshots) when this process holds none or one further behind, advanced over the points stored
    since (when nothing else changed), as if it had judged them itself; or rebuilt from the last stored points its
    step and season need (feedback included) when neither can stand for it (a "not an anomaly" since, a longer
    gap, no state saved, or one of another release)."""
    cached = runtime.cache.peek(series.series_id)
    held = cached if isinstance(cached, JudgeState) else None
    judged = held if held is not None else snapshots.restore(connection, series.series_id, series.relearn_revision)
    missed = _missed(connection, series, judged) if judged is not None else None
    if held is not None and (missed is None or len(missed) > snapshots.SNAPSHOT_ROWS):
        # Other processes judged more points since than a saved state leaves unsaved: theirs is nearer.
        saved = snapshots.restore(connection, series.series_id, series.relearn_revision, after=held.revision)
        if saved is not None:
            judged, held, missed = saved, None, _missed(connection, series, saved)
    if judged is not None and missed is not None:
        if judged.revision != series.revision:
            advance(series, judged, missed)
            _CAUGHT_UP.inc(len(missed))
        if held is not None:
            judged.unsaved += len(missed)
        else:
            judged.size = _size(judged)
            judged.unsaved = snapshots.unsaved_start(series.series_id, len(missed), judged.detector.rows)
        return judged
    rows = store.newest_points(connection, series)
    detector = series.detector()
    # Only as many as the series' own step and season need (REBUILD_ROWS is the longest season's): the state
    # replayed over them is one the series' points give, as the one that judged them was (POST /anomalies over the
    # same points gives the same verdicts).
    rows = rows[max(0, len(rows) - detector.rebuild_rows([float(row[0]) for row in rows[-WARMUP:]])):]
    judged = JudgeState(revision=series.revision, detector=detector.initial_state(), size=0)
    advance(series, judged, rows)
    judged.unsaved = snapshots.unsaved_start(series.series_id, len(rows), judged.detector.rows)
    _REBUILT.inc(len(rows))
    return judged


def _missed(connection: Connection, series: SeriesState, judged: JudgeState) -> Sequence[Row[Any]] | None:
    """The stored points ``judged`` must be advanced over to stand for the series (none when it is at the series'
    revision), or None when it cannot (a "not an anomaly" since then, or more than REBUILD_ROWS points to read)."""
    if judged.revision == series.revision:
        return []
    if judged.revision < series.relearn_revision or judged.last_epoch is None:
        return None
    rows = store.points_after(connection, series, judged.last_epoch)
    return None if len(rows) > REBUILD_ROWS else rows


def advance(monitor: SeriesState, judged: JudgeState, rows: Sequence[Row[Any]]) -> None:
    """Feeds stored (epoch, value, feedback) rows to the state; it is then the state at the monitor's revision."""
    if rows:
        monitor.detector().update(judged.detector, [float(r[0]) for r in rows], [float(r[1]) for r in rows],
                                  normal=[r[2] == NOT_ANOMALY for r in rows])
        judged.last_epoch = int(rows[-1][0])
    judged.revision = monitor.revision
    judged.checkpoint = judged.checkpoint_rows = None  # the rows it covered are no longer the last append
    judged.size = _size(judged)


def judge_streaming(
    monitor: SeriesState, judged: JudgeState, epochs: list[int], values: list[float],
    detector: StreamingDetector | None = None,
) -> tuple[list[Verdict], int | None]:
    state = judged.detector
    before = state.rows
    if monitor.relearn_revision:  # people give this monitor feedback: keep what relearning the append needs
        judged.checkpoint = copy.deepcopy(state)
        judged.checkpoint_rows = [(e, float(v), False) for e, v in zip(epochs, values, strict=True)]
    result = (detector or monitor.detector()).update(state, [float(e) for e in epochs], values)
    judged.size = _size(judged)
    return verdicts_of(result, values, warm=WARMUP - before), state.period or None


def relearn_last_append(judged: JudgeState, detector: StreamingDetector, epoch: int) -> bool:
    """Relearns the point at ``epoch`` as normal when it came in the last append: the state before that append,
    the append replayed with the point among the normal ones. False when the state cannot (then the monitor is
    rebuilt from its stored points, which costs the replay of a whole look-back window)."""
    rows = judged.checkpoint_rows
    if judged.checkpoint is None or rows is None or epoch not in {row[0] for row in rows}:
        return False
    rows = [(e, v, normal or e == epoch) for e, v, normal in rows]
    state = copy.deepcopy(judged.checkpoint)
    detector.update(state, [float(e) for e, _, _ in rows], [v for _, v, _ in rows], normal=[n for _, _, n in rows])
    judged.detector, judged.checkpoint_rows = state, rows
    judged.size = _size(judged)
    return True


def _size(judged: JudgeState) -> int:
    checkpoint = StreamingDetector.size(judged.checkpoint) if judged.checkpoint is not None else 0
    return StreamingDetector.size(judged.detector) + checkpoint
