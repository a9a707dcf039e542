"""The Nixtla-compatible answers, computed through the front doors: each series' forecast is POST /forecast's
(app.forecast.service), each cross-validation window a backtest window's (the same cut-offs as a backtest
batch, app.forecast.service.cutoffs), each verdict POST /anomalies' (app.anomalies.service). The shapes are those
``nixtla.NixtlaClient`` 0.9 reads: values of all series end to end, with ``sizes`` (and ``idxs``, rows of the
request's ``y``) to split them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from app.anomalies import service as detection
from app.anomalies.schemas import check_series as check_anomaly_series
from app.anomalies.schemas import load_request as load_anomaly_request
from app.compat.nixtla.schemas import (
    N_WINDOWS_RANGE,
    NixtlaRequest,
    SubmittedSeries,
    horizon,
    in_series,
    integer,
    level_name,
    levels,
)
from app.compute.forecast.results import ForecastResult
from app.compute.forecast.work import CovariateMatrix, LevelsWork
from app.errors import InvalidInput, MalformedInput
from app.forecast import service as forecasting
from app.forecast.schemas import (
    DEFAULT_CONFIDENCE,
    MIN_POINTS,
    ForecastRequest,
    SeriesData,
    check_series,
    missing_rows,
)
from app.forecast.schemas import SubmittedSeries as ForecastSeries
from app.forecast.service import cutoffs, points_needed
from app.series.timestamps import TimestampError, future_timestamps

if TYPE_CHECKING:
    from app.compat.nixtla.exogenous import Exogenous

Runner = Callable[[Any], Any]


def _checked(series: SubmittedSeries, end: int, frequency: str, *, max_points: int) -> SeriesData:
    return check_series(ForecastSeries(timestamps=series.timestamps[:end], values=series.values[:end]),
                        frequency, max_points=max_points)


class _Intervals:
    """The answer's mean and intervals, filled series by series in the request's order, and with exogenous
    columns whether each fit used them."""

    def __init__(self, wanted: list[float], exogenous: Exogenous | None) -> None:
        self.wanted = [level for level in wanted if level]  # level 0 (quantile 0.5) is the mean itself
        self.asked = bool(wanted)
        self.mean: list[float] = []
        self.bounds: dict[str, list[float]] = {f"{side}-{level_name(level)}": [] for level in self.wanted
                                               for side in ("lo", "hi")}
        self.exogenous = exogenous
        self.used: list[bool] = []
        self.notes: list[str | None] = []

    def confidences(self) -> tuple[float, ...]:
        return tuple(level / 100 for level in self.wanted) or (DEFAULT_CONFIDENCE,)

    def add(self, results: list[ForecastResult]) -> None:
        self.mean.extend(results[0].median)
        if self.exogenous is not None:
            self.used.append(bool(results[0].covariates_used))
            self.notes.append(results[0].covariates_note if results[0].covariates_used is not None else
                              "Every exogenous column of this series is categorical with one value over its "
                              "history: nothing to weigh, forecast without covariates.")
        for level, answer in zip(self.wanted, results, strict=False):
            self.bounds[f"lo-{level_name(level)}"].extend(answer.lower)
            self.bounds[f"hi-{level_name(level)}"].extend(answer.upper)

    def body(self) -> dict[str, Any]:
        """TimeGPT's fields; weights_x and feature_contributions stay null (no per-column weights are shared by
        the series: each fit weighs its covariates on its own). ``exogenous``, this service's own field that the
        client does not read, says per fit (series, or window) whether the covariates were used and why not."""
        out: dict[str, Any] = {"mean": self.mean, "intervals": self.bounds if self.asked else None,
                               "weights_x": None, "feature_contributions": None}
        if self.exogenous is not None:
            out["exogenous"] = {"columns": list(self.exogenous.columns), "used": self.used, "notes": self.notes}
        return out


def _fit(checked: SeriesData, h: int, frequency: str, model_id: str, confidences: tuple[float, ...],
         run: Runner, covariates: CovariateMatrix | None = None) -> list[ForecastResult]:
    """POST /forecast's answer at every confidence, from one fit (its work, with the confidences asked of it)."""
    request = ForecastRequest(forecast_horizon=h, data_frequency=frequency, confidence=confidences[0],
                              model_id=model_id)
    try:
        future_timestamps(checked.axis, h)  # as POST /forecast: unwritable timestamps are refused before any work
    except TimestampError as exc:
        raise InvalidInput(f"The forecast's timestamps cannot be written: {exc.issue}.") from exc
    work = forecasting.work_for(request, checked)
    if covariates is not None:
        work = replace(work, covariates=covariates)
    results: list[ForecastResult] = run(LevelsWork(work, confidences))
    return results


def fits_of_forecast(body: Mapping[str, Any], series: int) -> int:
    return series


def fits_of_cross_validation(body: Mapping[str, Any], series: int) -> int:
    """One fit per window of each series, whatever the levels; read before anything is rebuilt or computed."""
    return series * integer(body, "n_windows", *N_WINDOWS_RANGE, default=1)


def forecast(request: NixtlaRequest, *, max_points: int, run: Runner) -> dict[str, Any]:
    h = horizon(request.body)
    exogenous = request.exogenous
    answer = _Intervals(levels(request.body.get("level")), exogenous)
    for index, series in enumerate(request.series):
        with in_series(index):
            checked = _checked(series, len(series.values), request.data_frequency, max_points=max_points)
            covariates = None if exogenous is None else exogenous.for_forecast(index, missing_rows(series.values))
            answer.add(_fit(checked, h, request.data_frequency, request.model_id, answer.confidences(), run,
                            covariates))
    return answer.body()


def _windows(index: int, length: int, h: int, n_windows: int, step: int, full_history: bool) -> tuple[int, int]:
    """(h, windows) of one series. add_history's windows (``full_history``) end with the series and tile its tail,
    as the client reads them; a series too short for them gets one window, as long as its history allows."""
    if length >= points_needed(h, n_windows, step):
        return h, n_windows
    if full_history and length > MIN_POINTS:
        return min(h, length - MIN_POINTS), 1
    if full_history:
        raise InvalidInput(f"series {index} holds {length} points; add_history needs more than {MIN_POINTS}.")
    raise InvalidInput(f"series {index} holds {length} points, too few for {n_windows} windows of h={h} every "
                       f"{step} (at least {points_needed(h, n_windows, step)}).")


def cross_validation(request: NixtlaRequest, *, max_points: int, run: Runner) -> dict[str, Any]:
    """Windows as a backtest batch cuts them, one fit per window for every level. With ``full_history`` (the
    client's add_history) the windows are those the client asks for its in-sample values (step = h): the tail of
    each series, forecast from the history before each window."""
    body = request.body
    full_history = body.get("full_history") is True
    h = horizon(body)
    n_windows = integer(body, "n_windows", *N_WINDOWS_RANGE, default=1)
    step = integer(body, "step_size", 1, 10_000, default=h)
    if full_history and step != h:
        raise MalformedInput(f"step_size must equal h ({h}) with full_history: its windows tile each series' tail.")
    exogenous = request.exogenous
    answer = _Intervals(levels(body.get("level")), exogenous)
    idxs: list[int] = []
    sizes: list[int] = []
    for index, (series, offset) in enumerate(zip(request.series, request.offsets, strict=True)):
        length = len(series.values)
        h_here, windows = _windows(index, length, h, n_windows, step, full_history)
        step_here = h_here if full_history else step
        missing = missing_rows(series.values) if exogenous is not None else []
        with in_series(index):
            for cut in cutoffs(length, h_here, windows, step_here):
                checked = _checked(series, cut, request.data_frequency, max_points=max_points)
                covariates = None if exogenous is None else exogenous.for_window(index, cut, h_here, missing)
                answer.add(_fit(checked, h_here, request.data_frequency, request.model_id, answer.confidences(),
                                run, covariates))
                idxs.extend(range(offset + cut, offset + cut + h_here))
        sizes.append(windows * h_here)
    return {**answer.body(), "idxs": idxs, "sizes": sizes}


def _detector_level(body: Any) -> float:
    level = body.get("level", 99)
    if not isinstance(level, int | float) or isinstance(level, bool) or not 50 <= level <= 99.99:
        raise MalformedInput(f"level must be a number between 50 and 99.99 for anomaly detection; got "
                             f"{str(level)[:32]}.")
    return float(level)


def _detect(request: NixtlaRequest, index: int, series: SubmittedSeries, level: float, *, max_points: int,
            run: Runner, start: int = 0) -> Any:
    with in_series(index):
        one = load_anomaly_request({"series": [{"timestamps": series.timestamps, "values": series.values}],
                                    "data_frequency": request.data_frequency, "confidence": level / 100},
                                   {"X-Model-Id": request.model_id})
        checked = check_anomaly_series(one, max_points=max_points)
    return detection.detect(checked.epoch_seconds, checked.values, data_frequency=one.data_frequency,
                            confidence=one.confidence, detector=one.detector, start=start, run=run)


def anomaly_detection(request: NixtlaRequest, *, max_points: int, run: Runner) -> dict[str, Any]:
    """Every row after the detector's warm-up, judged from every row before it (POST /anomalies)."""
    level = _detector_level(request.body)
    name = level_name(level)
    out: dict[str, Any] = {"mean": [], "anomaly": [], "anomaly_score": [], "sizes": [],
                           "intervals": {f"lo-{name}": [], f"hi-{name}": []}, "weights_x": None}
    for index, series in enumerate(request.series):
        result = _detect(request, index, series, level, max_points=max_points, run=run)
        warm = result.warmup_points
        out["mean"] += result.expected[warm:]
        out["anomaly"] += result.is_anomaly[warm:]
        out["anomaly_score"] += result.score[warm:]
        out["intervals"][f"lo-{name}"] += result.lower[warm:]
        out["intervals"][f"hi-{name}"] += result.upper[warm:]
        out["sizes"].append(len(series.values) - warm)
    return out


def online_anomaly_detection(request: NixtlaRequest, *, max_points: int, run: Runner) -> dict[str, Any]:
    """The last ``detection_size`` rows of each series, each judged from every row before it."""
    body = request.body
    level = _detector_level(body)
    horizon(body)  # required by the client; the verdicts themselves are one step ahead
    size = integer(body, "detection_size", 1, max_points)
    name = level_name(level)
    out: dict[str, Any] = {"mean": [], "anomaly": [], "anomaly_score": [], "idxs": [], "sizes": [],
                           "intervals": {f"lo-{name}": [], f"hi-{name}": []}}
    for index, (series, offset) in enumerate(zip(request.series, request.offsets, strict=True)):
        length = len(series.values)
        if size >= length:
            raise InvalidInput(f"series {index} holds {length} points; detection_size={size} leaves no history to "
                               f"judge them from.")
        start = length - size
        result = _detect(request, index, series, level, max_points=max_points, run=run, start=start)
        out["mean"] += result.expected
        out["anomaly"] += result.is_anomaly
        out["anomaly_score"] += result.score
        out["intervals"][f"lo-{name}"] += result.lower
        out["intervals"][f"hi-{name}"] += result.upper
        out["idxs"] += list(range(offset + start, offset + length))
        out["sizes"].append(size)
    return out
