"""A forecast of a monitor's next steps from its stored points, through the forecast service and the pool."""

from __future__ import annotations

import re
import statistics
from datetime import datetime
from typing import Any

from app.compute.pool import WorkerPool
from app.errors import InvalidInput
from app.forecast import service
from app.forecast.schemas import ForecastRequest, SeriesData
from app.series.frequencies import UNIT_SECONDS
from app.series.instants import utc_text
from app.series.timestamps import TimeAxis, TimestampError, parse_axis
from app.web.pool_work import compute_on_pool

# The most recent points a forecast fits on: two cycles of the longest season /forecast looks for at
# minute spacing (a day), with room to spare, while keeping the fit's cost bounded.
FORECAST_HISTORY_POINTS = 4000
MIN_FORECAST_POINTS = 10
MAX_FORECAST_CONFIDENCE = 0.99  # /forecast's own upper bound
DEFAULT_FORECAST_CONFIDENCE = 0.99

_CALENDAR_MONTHS = {"Monthly": 1, "Quarterly": 3, "Yearly": 12}
_SUFFIX_RE = re.compile(r"(Z|[+-][0-9]{2}:[0-9]{2})$")


def _axis(frequency: str, epochs: list[int], texts: list[str]) -> TimeAxis:
    """The axis to continue: the stored timestamps' own when they are on a regular grid, else one built
    from the median spacing (monitors accept holes and jitter, /forecast's axis does not)."""
    try:
        return parse_axis(texts[-400:], frequency)
    except (TimestampError, ValueError):
        pass
    last_text = texts[-1]
    last = datetime.fromisoformat(last_text)
    suffix_match = _SUFFIX_RE.search(last_text)
    suffix = suffix_match.group(1) if suffix_match else ""
    fraction = re.search(r"\.([0-9]+)", last_text)
    if frequency in UNIT_SECONDS:
        gaps = [b - a for a, b in zip(epochs[-400:], epochs[-399:], strict=False)]
        step = max(1, round(statistics.median(gaps) / UNIT_SECONDS[frequency])) if gaps else 1
    else:
        walls = [datetime.fromisoformat(t) for t in texts[-400:]]
        months = [(b.year - a.year) * 12 + b.month - a.month for a, b in zip(walls, walls[1:], strict=False)]
        unit = _CALENDAR_MONTHS[frequency]
        step = max(1, round(statistics.median(months) / unit)) if months else 1
    return TimeAxis(
        frequency=frequency,
        step=step,
        count=1,
        first=last.replace(tzinfo=None) if frequency in _CALENDAR_MONTHS else last,
        last=last,
        last_text=last_text,
        suffix=suffix,
        fraction_digits=len(fraction.group(1)) if fraction else 0,
        month_end=False,
    )


def forecast(
    *,
    pool: WorkerPool,
    model_id: str,
    data_frequency: str,
    confidence: float | None,
    horizon: int,
    epochs: list[int],
    texts: list[str],
    values: list[float],
) -> dict[str, Any]:
    if len(values) < MIN_FORECAST_POINTS:
        raise InvalidInput(
            "A forecast needs more stored points.",
            details={"field": "horizon", "issue": "insufficient data points", "provided": f"{len(values)} points",
                     "minimum": MIN_FORECAST_POINTS},
        )
    import numpy as np

    # A monitor whose threshold is an alarm budget forecasts at the service's usual 0.99.
    confidence = min(DEFAULT_FORECAST_CONFIDENCE if confidence is None else confidence, MAX_FORECAST_CONFIDENCE)
    forecast_request = ForecastRequest(forecast_horizon=horizon, data_frequency=data_frequency,
                                       confidence=confidence, model_id=model_id)
    series = SeriesData(axis=_axis(data_frequency, epochs, texts), values=np.asarray(values, dtype=np.float64))
    try:
        answer = service.forecast(forecast_request, series, run=lambda work: compute_on_pool(pool, work))
    except TimestampError as exc:
        raise InvalidInput(f"Invalid forecast: {exc.issue}.", details=exc.details("horizon")) from exc
    return {
        "model": model_id,
        "confidence": confidence,
        "forecast_timestamps": [utc_text(text) for text in answer.forecast_timestamps],  # the monitor's one form
        "lower_bound": answer.lower_bound,
        "median": answer.median,
        "upper_bound": answer.upper_bound,
    }
