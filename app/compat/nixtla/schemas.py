"""Nixtla's request bodies (what ``nixtla.NixtlaClient`` 0.9 sends) read into this service's terms, with the
checks and refusals of the Nixtla-compatible routes (docs/nixtla.md).

The client sends every series in one body: the values of all series end to end (``series.y``), each series'
length (``series.sizes``), its first timestamp (``series.start_datetime``) and one pandas frequency
(``freq``). Each series is rebuilt as timestamps and values and then judged exactly as POST /forecast (or POST
/anomalies) judges a series, so both doors refuse and answer the same data alike."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.compute.detect.results import DEFAULT_DETECTOR, DETECTOR_IDS
from app.compute.forecast.catalog import DEFAULT_MODEL_ID, MODEL_IDS
from app.forecast.schemas import CONFIDENCE_RANGE, HORIZON_RANGE
from app.web.errors import ApiError

if TYPE_CHECKING:
    from app.compat.nixtla.exogenous import Exogenous

URL_PREFIX = "/v2"
# What the client names TimeGPT's models: any of these (and no model at all) means this service's default.
TIMEGPT_NAME = re.compile(r"(timegpt|azureai)[A-Za-z0-9._-]{0,60}", re.IGNORECASE)
# What the client writes for a series' start (numpy's or isoformat's text); pandas alone would read more.
START_FORM = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?)?(?:Z|[+-]\d{2}:?\d{2})?",
                        re.ASCII)
LEVEL_RANGE = (round(CONFIDENCE_RANGE[0] * 100), round(CONFIDENCE_RANGE[1] * 100))
N_WINDOWS_RANGE = (1, 50)
# What one call may ask, so that a single counted request cannot hold the web process and the pool for
# minutes: its series, and its model fits (series x windows; every level of a fit comes from that one fit).
MAX_SERIES_PER_CALL = 1_000
MAX_FITS_PER_CALL = 1_000


class NixtlaError(ApiError):
    """An answer in Nixtla's error shape, ``{"detail": message}``: the client raises it as an ApiError whose
    body is this, so the message names what was wrong. The domain's errors reach the same shape through the
    routes' handler (app.web.errors maps them)."""

    code = "INVALID_REQUEST"

    def __init__(self, message: str, *, status: int = 400, code: str = "INVALID_REQUEST") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def unsupported(feature: str, hint: str = "") -> NixtlaError:
    return NixtlaError(f"{feature} is not supported by this service (a self-hosted forecasting service, not "
                       f"TimeGPT).{(' ' + hint) if hint else ''}", code="UNSUPPORTED_FEATURE")


@contextmanager
def in_series(index: int) -> Iterator[None]:
    """A front door's error for one series of the call, naming the series by its place in the request (the client
    sorts series by unique_id). The front doors' checks are schemas and the pool's runner is the web package's, so
    what they raise is the HTTP edge's; the domain's own errors pass as they are."""
    try:
        yield
    except NixtlaError:
        raise
    except ApiError as error:
        raise NixtlaError(f"series {index}: {error.message}", status=error.status, code=error.code) from error


# pandas offset names -> this service's data frequency; a multiple (2h, 15min) is a step of several units.
_OFFSET_FREQUENCIES = {
    "Second": "Seconds",
    "Minute": "Minutes",
    "Hour": "Hours",
    "Day": "Daily",
    "Week": "Weekly",
    "MonthBegin": "Monthly",
    "MonthEnd": "Monthly",
    "QuarterBegin": "Quarterly",
    "QuarterEnd": "Quarterly",
    "YearBegin": "Yearly",
    "YearEnd": "Yearly",
}


@dataclass(frozen=True)
class SubmittedSeries:
    timestamps: list[str]
    values: list[Any]


@dataclass(frozen=True)
class NixtlaRequest:
    series: list[SubmittedSeries]
    offsets: list[int]  # each series' first row in the body's y
    data_frequency: str
    model_id: str
    body: Mapping[str, Any]
    exogenous: Exogenous | None = None


def model_of(body: Mapping[str, Any], headers: Mapping[str, str], *, detection: bool = False) -> str:
    """The client's ``model`` (also sent as the nixtla-model header): one of this service's model ids (its
    detectors' on the anomaly routes), or a TimeGPT name (or none), which means the default."""
    ids, default = (DETECTOR_IDS, DEFAULT_DETECTOR) if detection else (MODEL_IDS, DEFAULT_MODEL_ID)
    chosen = body.get("model", headers.get("nixtla-model"))
    if chosen is None or chosen == "":
        return default
    if isinstance(chosen, str) and chosen in ids:
        return chosen
    if isinstance(chosen, str) and TIMEGPT_NAME.fullmatch(chosen):
        return default
    raise NixtlaError(f"Unknown model {str(chosen)[:64]!r}: use one of {', '.join(ids)}, or a TimeGPT name "
                      f"for the default ({default}).")


def refuse_unsupported(body: Mapping[str, Any], *, detection: bool = False) -> None:
    """Every option this service does not offer is refused by name, never ignored."""
    series = body.get("series") if isinstance(body.get("series"), dict) else {}
    steps = body.get("finetune_steps")
    if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool) or steps < 0):
        raise NixtlaError(f"finetune_steps must be a non-negative integer; got {str(steps)[:32]!r}.")
    if steps or body.get("finetuned_model_id") not in (None, ""):
        raise unsupported("Fine-tuning (finetune_steps, finetuned_model_id)", "Use finetune_steps=0.")
    # The client sends these defaults with every call; anything else asks for a fine-tuning this service lacks.
    if body.get("finetune_loss") not in (None, "default"):
        raise unsupported("Fine-tuning (finetune_loss)", "Leave finetune_loss at 'default'.")
    if body.get("finetune_depth") not in (None, 1) or isinstance(body.get("finetune_depth"), bool):
        raise unsupported("Fine-tuning (finetune_depth)", "Leave finetune_depth at 1.")
    if body.get("quantiles") is not None:
        raise NixtlaError("quantiles is not read by this route: send level (NixtlaClient turns quantiles=[0.1, 0.9] "
                          "into level=[80] itself and names the columns by quantile).")
    if body.get("feature_contributions") or body.get("feature_contributions_type"):
        raise unsupported("Feature contributions (feature_contributions=True)",
                          "Forecasts with exogenous variables are answered without a per-column breakdown: "
                          "leave feature_contributions=False.")
    if body.get("multivariate") or body.get("threshold_method") == "multivariate":
        raise unsupported("Multivariate forecasting and detection (multivariate=True, threshold_method="
                          "'multivariate')")
    if detection and (any(series.get(name) not in (None, []) for name in ("X", "X_future", "categorical_exog"))
                      or body.get("hist_exog") not in (None, [])):
        raise unsupported("Exogenous variables in anomaly detection (hist_exog_list, categorical_exog_list, "
                          "date_features)", "Send the target column only; forecasts take exogenous variables.")
    if body.get("model_parameters"):
        raise unsupported("Model parameters (model_parameters)")


def integer(body: Mapping[str, Any], name: str, low: int, high: int, default: int | None = None) -> int:
    value = body.get(name, default)
    if value is None and default is not None:
        value = default
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise NixtlaError(f"{name} must be an integer between {low} and {high}; got {str(value)[:32]}.")
    return value


def horizon(body: Mapping[str, Any]) -> int:
    return integer(body, "h", *HORIZON_RANGE)


def levels(value: Any, *, name: str = "level") -> list[float]:
    """Interval levels in percent, each as this service's confidence allows (level 0, the client's way of
    asking for the median as quantile 0.5, needs no interval)."""
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    out: list[float] = []
    for item in items:
        if not isinstance(item, int | float) or isinstance(item, bool) or not math.isfinite(item):
            raise NixtlaError(f"{name} must be numbers between {LEVEL_RANGE[0]} and {LEVEL_RANGE[1]}.")
        if item != 0 and not LEVEL_RANGE[0] <= item <= LEVEL_RANGE[1]:
            raise NixtlaError(f"{name} {item:g} is outside the levels this service offers ({LEVEL_RANGE[0]} to "
                              f"{LEVEL_RANGE[1]}; quantiles from 0.005 to 0.45 and 0.55 to 0.995).")
        if item not in out:
            out.append(item)
    return out


def level_name(level: float) -> str:
    """As the client names its interval columns: "80" for 80 and 80.0, "97.5" for 97.5."""
    return f"{level:g}"


def frequency_of(freq: Any) -> tuple[str, Any]:
    """(this service's data frequency, the pandas offset) of the client's ``freq``."""
    import pandas as pd

    if not isinstance(freq, str) or not freq:
        raise NixtlaError("freq must be a pandas frequency string such as 'D', 'h', 'W-SUN', 'MS' or 'QS-OCT'.")
    try:
        offset = pd.tseries.frequencies.to_offset(freq)
    except ValueError as exc:
        raise NixtlaError(f"freq {freq[:32]!r} is not a pandas frequency.") from exc
    frequency = _OFFSET_FREQUENCIES.get(type(offset).__name__)
    if frequency is None or offset.n < 1:
        raise NixtlaError(f"freq {freq[:32]!r} is not supported: use seconds, minutes, hours, days, weeks, month, "
                          "quarter or year starts or ends (for instance 's', 'min', 'h', 'D', 'W', 'MS', 'ME', "
                          "'QS', 'YS'), or a multiple of one.")
    return frequency, offset


def read_series(body: Any, headers: Mapping[str, str], *, max_points: int, detection: bool = False,
                forecast: bool = False, before_rebuild: Callable[[int], None] | None = None) -> NixtlaRequest:
    """The body's series rebuilt (timestamps from each start, the frequency and the size), its model and its
    frequency; 400 for a body that is not the client's shape or over MAX_SERIES_PER_CALL. ``before_rebuild``
    hears the number of series once the cheap checks passed and before any timestamp is built (the caller's
    rate limit and work caps: rebuilding is what costs)."""
    import pandas as pd

    if not isinstance(body, dict):
        raise NixtlaError("The request body must be a JSON object.")
    refuse_unsupported(body, detection=detection)
    model_id = model_of(body, headers, detection=detection)
    frequency, offset = frequency_of(body.get("freq"))
    series = body.get("series")
    if not isinstance(series, dict):
        raise NixtlaError("series must be an object with y, sizes and start_datetime.")
    y, sizes, starts = series.get("y"), series.get("sizes"), series.get("start_datetime")
    if not isinstance(y, list) or not isinstance(sizes, list) or not sizes or \
            not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes):
        raise NixtlaError("series.y must be a list of numbers and series.sizes a non-empty list of positive "
                          "integers.")
    if len(sizes) > MAX_SERIES_PER_CALL:
        raise NixtlaError(f"A call may hold at most {MAX_SERIES_PER_CALL:,} series; this one holds {len(sizes):,}. "
                          "Split it (NixtlaClient's num_partitions) or send a batch (POST /batches).",
                          code="TOO_MANY_SERIES")
    if sum(sizes) != len(y):
        raise NixtlaError(f"series.sizes add up to {sum(sizes)} but series.y holds {len(y)} values.")
    if not isinstance(starts, list) or len(starts) != len(sizes) or not all(isinstance(s, str) for s in starts):
        raise NixtlaError("series.start_datetime must give each series' first timestamp: this service needs "
                          "datetimes in the time column (integer time columns are not supported).")
    if max(sizes) > max_points:
        raise NixtlaError(f"A series holds {max(sizes)} points; at most {max_points} are accepted.", status=422,
                          code="DATA_VALIDATION_ERROR")
    # numpy loads with the first call that carries a body, not with the app (the web process stays slim)
    from app.compat.nixtla.exogenous import read as read_exogenous

    exogenous = None if detection else read_exogenous(body, sizes, h=horizon(body) if forecast else None)
    if before_rebuild is not None:
        before_rebuild(len(sizes))
    out: list[SubmittedSeries] = []
    offsets: list[int] = []
    position = 0
    for index, (start, size) in enumerate(zip(starts, sizes, strict=True)):
        if not START_FORM.fullmatch(start):
            raise NixtlaError(f"series {index}: start_datetime {start[:40]!r} is not an ISO 8601 date or time.")
        try:
            first = pd.Timestamp(start)
            stamps = pd.date_range(first, periods=size, freq=offset)
        except (ValueError, OverflowError, pd.errors.OutOfBoundsDatetime) as exc:
            raise NixtlaError(f"series {index}: start_datetime {start[:40]!r} with freq {body['freq']!r} does not "
                              f"give valid timestamps.") from exc
        if stamps[0] != first:  # pandas would move it to the frequency's next anchor, shifting the series
            raise NixtlaError(f"series {index}: start_datetime {start[:40]!r} is not on freq {body['freq']!r}.")
        if first.tzinfo is None:
            texts = stamps.strftime("%Y-%m-%dT%H:%M:%S").tolist()
        else:
            texts = [stamp.isoformat() for stamp in stamps]
        out.append(SubmittedSeries(timestamps=texts, values=y[position:position + size]))
        offsets.append(position)
        position += size
    return NixtlaRequest(series=out, offsets=offsets, data_frequency=frequency, model_id=model_id, body=body,
                         exogenous=exogenous)
