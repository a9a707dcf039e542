"""Request and response shapes of POST /forecast and its checks, stage by stage (docs/contract.md, Errors).

Stage 3 (request shape) answers 400 through marshmallow; stage 4 (series data) answers 422.
Both list every problem found in details.errors and the first one in field/issue/provided.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from app.compute.forecast.catalog import DEFAULT_MODEL_ID, MODEL_IDS
from app.compute.forecast.work import CovariateMatrix
from app.forecast.calendar import CALENDAR_FEATURES, walls_from_texts
from app.forecast.covariate_fields import CovariatesAnswerSchema, CovariateSchema, HolidaysSchema
from app.forecast.covariates import (
    MAX_COVARIATES,
    MAX_DESIGN_COLUMNS,
    CovariateInput,
    HolidayInHorizon,
    HolidaySpec,
    design_matrix,
)
from app.series.regular import regular_axis
from app.series.timestamps import (
    FREQUENCIES,
    TIMESTAMP_FORM,
    TimeAxis,
    TimestampError,
    future_timestamps,
    parse_axis,
)
from app.web.errors import DataValidationError, sentence
from app.web.fields import JsonArray, StrictFloat, values_array
from app.web.validation import envelope, load_object, problem

if TYPE_CHECKING:  # numpy loads on the first series, so the admin CLI never pays for it
    import numpy as np

MIN_POINTS = 10
HORIZON_RANGE = (1, 100)
CONFIDENCE_RANGE = (0.1, 0.99)
DEFAULT_CONFIDENCE = 0.95
# The data-preparation guide's advice; shorter series still get a forecast, with a warning header.
RECOMMENDED_POINTS = {
    "Seconds": 100,
    "Minutes": 100,
    "Hours": 100,
    "Daily": 30,
    "Weekly": 30,
    "Monthly": 12,
    "Quarterly": 12,
    "Yearly": 5,
}
FREQUENCY_ISSUE = "Must be one of: " + ", ".join(FREQUENCIES)


class SeriesSchema(Schema):
    class Meta:
        unknown = "exclude"  # unknown fields are ignored (docs/contract.md)

    timestamps = JsonArray(
        required=True,
        metadata={
            "description": "YYYY-MM-DDTHH:MM:SS, optionally with fractional seconds and Z or ±HH:MM; "
            "strictly increasing, evenly spaced at a whole number of data_frequency units.",
            "items": {"type": "string", "format": "date-time", "example": "2026-01-01T00:00:00"},
            "minItems": MIN_POINTS,
        },
    )
    values = JsonArray(
        required=True,
        metadata={
            "description": "Finite numbers, one per timestamp; null for a missing value (at least "
            f"{MIN_POINTS} must be numbers).",
            "items": {"type": "number", "nullable": True},
            "minItems": MIN_POINTS,
        },
    )


class ForecastSeriesSchema(SeriesSchema):
    covariates = fields.List(
        fields.Nested(CovariateSchema),
        allow_none=True,
        metadata={"description": f"At most {MAX_COVARIATES} covariates, at most {MAX_DESIGN_COLUMNS} design "
                  "columns in all (docs/covariates.md)."},
    )


class ForecastRequestSchema(Schema):
    class Meta:
        unknown = "exclude"  # unknown fields are ignored (docs/contract.md)

    series = fields.List(
        fields.Nested(ForecastSeriesSchema),
        required=True,
        validate=validate.Length(equal=1, error="Must contain exactly one series."),
    )
    forecast_horizon = fields.Integer(
        required=True, strict=True, validate=validate.Range(*HORIZON_RANGE, error="Must be between {min} and {max}")
    )
    data_frequency = fields.String(required=True, validate=validate.OneOf(FREQUENCIES, error=FREQUENCY_ISSUE))
    forecast_frequency = fields.String(required=True, validate=validate.OneOf(FREQUENCIES, error=FREQUENCY_ISSUE))
    confidence = StrictFloat(
        load_default=DEFAULT_CONFIDENCE,
        allow_nan=False,
        validate=validate.Range(*CONFIDENCE_RANGE, error="Must be between {min} and {max}"),
    )

    holidays = fields.Nested(HolidaysSchema, allow_none=True,
                             metadata={"description": "Holiday columns from the holidays package."})
    calendar_features = fields.List(fields.String(metadata={"enum": list(CALENDAR_FEATURES)}), allow_none=True,
                                    metadata={"description": "One-hot calendar columns of the timestamps."})

    @validates_schema
    def _frequencies_match(self, data: dict[str, Any], **kwargs: Any) -> None:
        data_frequency, forecast_frequency = data.get("data_frequency"), data.get("forecast_frequency")
        if data_frequency and forecast_frequency and data_frequency != forecast_frequency:
            raise ValidationError("Must equal data_frequency", field_name="forecast_frequency")

    @validates_schema(pass_original=True)
    def _covariates_in_the_series(self, data: dict[str, Any], original: Any, **kwargs: Any) -> None:
        # Unknown fields are ignored, but covariates sent beside the series instead of in it would be a forecast
        # without them that looks like one with them.
        if isinstance(original, dict) and "covariates" in original:
            raise ValidationError("Covariates belong to the series: send them as series[0].covariates",
                                  field_name="covariates")


class ForecastResponseSchema(Schema):
    forecast_timestamps = fields.List(fields.String(), required=True)
    lower_bound = fields.List(fields.Float(), required=True)
    median = fields.List(fields.Float(), required=True)
    upper_bound = fields.List(fields.Float(), required=True)
    missing_values = fields.Integer(metadata={"description": "Only when some values were null: how many."})
    covariates = fields.Nested(
        CovariatesAnswerSchema,
        metadata={"description": "Only when covariates, holidays or calendar_features were sent."},
    )


_request_schema = ForecastRequestSchema()


@dataclass(frozen=True)
class ForecastRequest:
    forecast_horizon: int
    data_frequency: str
    confidence: float
    model_id: str
    holidays: HolidaySpec | None = None
    calendar_features: tuple[str, ...] = ()


@dataclass(frozen=True)
class SubmittedSeries:
    """The series as the body holds it, before the series-data stage has judged it."""

    timestamps: list[Any]
    values: list[Any]
    covariates: tuple[CovariateInput, ...] = ()


def load_request(body: Any, headers: Mapping[str, str]) -> tuple[ForecastRequest, SubmittedSeries]:
    """The request-shape stage: everything about the request's shape, answered 400 with every problem listed."""
    problems: list[dict[str, Any]] = []
    model_id = model_id_from_headers(headers, problems)
    data = load_object(_request_schema, body, problems)
    series = data["series"][0]
    holidays = data.get("holidays")
    return ForecastRequest(
        forecast_horizon=data["forecast_horizon"],
        data_frequency=data["data_frequency"],
        confidence=data["confidence"],
        model_id=model_id,
        holidays=None if holidays is None else HolidaySpec(**holidays),
        calendar_features=tuple(data.get("calendar_features") or ()),
    ), SubmittedSeries(
        timestamps=series["timestamps"],
        values=series["values"],
        covariates=tuple(CovariateInput(**covariate) for covariate in series.get("covariates") or ()),
    )


def model_id_from_headers(headers: Mapping[str, str], problems: list[dict[str, Any]]) -> str:
    """X-Model-Id, else its alias X-Model-Selector, else the default; both and different is an error."""
    primary, alias = headers.get("X-Model-Id"), headers.get("X-Model-Selector")
    if primary is not None and alias is not None and primary.strip() != alias.strip():
        problems.append(problem("X-Model-Selector", "Must equal X-Model-Id when both are sent", alias))
    chosen = primary if primary is not None else alias
    if chosen is None:
        return DEFAULT_MODEL_ID
    chosen = chosen.strip()
    if chosen not in MODEL_IDS:
        header = "X-Model-Id" if primary is not None else "X-Model-Selector"
        problems.append(problem(header, "Must be one of: " + ", ".join(MODEL_IDS), chosen))
    return chosen


@dataclass(frozen=True)
class SeriesData:
    axis: TimeAxis
    # float64, sent to the worker pool as one buffer: the values that are not null, in order
    values: np.ndarray
    # Values sent as null: those rows are missing, as a missing timestamp is where holes are taken (a monitor's
    # stored points); the axis is still the timestamps sent.
    missing_values: int = 0
    # Design columns when covariates, holidays or calendar features were sent; rows align with ``values``.
    covariates: CovariateMatrix | None = None
    holidays_in_horizon: tuple[HolidayInHorizon, ...] = ()


def missing_rows(values: list[Any]) -> list[int]:
    """The indices of null values (a null is a missing value, not a defect)."""
    if None not in values:
        return []
    return [index for index, value in enumerate(values) if value is None]


def present_values(timestamps: list[Any], values: list[Any], minimum: int,
                   problems: list[dict[str, Any]]) -> tuple[np.ndarray, int]:
    """values_array of the values that are not null and how many were, with the too-short problem (counting
    values: a series of nulls is as short as one without points) where the length checks put theirs. Nulls
    are looked for only once the one-pass check has found a defect, so a series without any costs nothing."""
    at = len(problems)
    floats = values_array(values, problems)
    missing: list[int] = []
    if any(found.get("issue") == _NULL_ISSUE for found in problems[at:]):
        del problems[at:]
        missing = missing_rows(values)
        skip = set(missing)
        kept = [index for index in range(len(values)) if index not in skip]
        floats = values_array([values[index] for index in kept], problems)
        for found in problems[at:]:  # a defect's index is the one in the series as sent
            if found.get("field") == "series[0].values" and isinstance(found.get("index"), int):
                found["index"] = kept[found["index"]]
    shortest = min(len(timestamps), len(values) - len(missing))
    if shortest < minimum:
        provided = f"{shortest} points" if not missing else f"{shortest} points with a value ({len(missing)} null)"
        problems.insert(at, problem("series[0]", "insufficient data points", provided, minimum=minimum))
    return floats, len(missing)


_NULL_ISSUE = "missing value (null)"


def check_series(submitted: SubmittedSeries, frequency: str, *, max_points: int) -> SeriesData:
    """The series-data stage: the series data itself, answered 422 with every defect found."""
    timestamps, values = submitted.timestamps, submitted.values
    problems: list[dict[str, Any]] = []
    if len(timestamps) != len(values):
        problems.append(
            problem(
                "series[0]",
                "arrays must have equal length",
                f"{len(timestamps)} timestamps, {len(values)} values",
                timestamps=len(timestamps),
                values=len(values),
            )
        )
    longest = max(len(timestamps), len(values))
    if longest > max_points:
        if min(len(timestamps), len(values)) < MIN_POINTS:
            problems.append(problem("series[0]", "insufficient data points",
                                    f"{min(len(timestamps), len(values))} points", minimum=MIN_POINTS))
        problems.append(problem("series[0]", "too many data points", f"{longest} points", maximum=max_points))
        raise DataValidationError(sentence(f"Invalid series data: {problems[0]['issue']}"), details=envelope(problems))

    floats, missing = present_values(timestamps, values, MIN_POINTS, problems)
    # The whole series in one pass when it is regular; item by item only to find and name a defect.
    axis = regular_axis(timestamps, frequency)
    if axis is None:
        axis = _axis_item_by_item(timestamps, frequency, problems)
    if problems or axis is None:
        first = problems[0]
        raise DataValidationError(sentence(f"Invalid series data: {first['issue']}"), details=envelope(problems))
    return SeriesData(axis=axis, values=floats, missing_values=missing)


def asks_for_covariates(forecast_request: ForecastRequest, submitted: SubmittedSeries) -> bool:
    """Whether the request sends any covariate, holiday or calendar feature (an empty list sends none)."""
    return bool(submitted.covariates or forecast_request.holidays or forecast_request.calendar_features)


def check_covariates(forecast_request: ForecastRequest, submitted: SubmittedSeries, series: SeriesData
                     ) -> SeriesData:
    """The series-data stage for covariates, holidays and calendar features, after the series itself: the
    checked series with its design columns, or the 422 of the first problem (app.forecast.covariates)."""
    horizon = forecast_request.forecast_horizon
    try:
        future = future_timestamps(series.axis, horizon)
    except TimestampError as exc:
        raise invalid_future_timestamps(exc) from exc
    needs_walls = forecast_request.holidays is not None or bool(forecast_request.calendar_features)
    matrix, in_horizon = design_matrix(
        submitted.covariates,
        holidays=forecast_request.holidays,
        calendar=forecast_request.calendar_features,
        history_timestamps=walls_from_texts(submitted.timestamps) if needs_walls else submitted.timestamps,
        future_timestamps=walls_from_texts(future) if needs_walls else future,
        horizon=horizon,
        missing_rows=missing_rows(submitted.values) if series.missing_values else (),
        covariates_field="series[0].covariates",
    )
    return replace(series, covariates=matrix, holidays_in_horizon=tuple(in_horizon))


def _axis_item_by_item(timestamps: list[Any], frequency: str, problems: list[dict[str, Any]]) -> TimeAxis | None:
    bad_type = _first_non_string(timestamps)
    if bad_type is not None:
        problems.append(
            problem("series[0].timestamps", "invalid timestamp format", timestamps[bad_type], index=bad_type,
                    expected=TIMESTAMP_FORM)
        )
    elif len(timestamps) >= 2:
        try:
            return parse_axis(timestamps, frequency)
        except TimestampError as exc:
            extra: dict[str, Any] = {"index": exc.index}
            if exc.expected is not None:
                extra["expected"] = exc.expected
            problems.append(problem("series[0].timestamps", exc.issue, exc.provided, **extra))
    return None


def _first_non_string(items: list[Any]) -> int | None:
    try:
        "".join(items)  # one C pass that refuses any element that is not a string
    except TypeError:
        return next(i for i, item in enumerate(items) if not isinstance(item, str))
    return None


def invalid_future_timestamps(exc: TimestampError) -> DataValidationError:
    """A series whose forecast timestamps cannot be written (past year 9999): a 422 on its timestamps."""
    return DataValidationError(
        sentence(f"Invalid series data: {exc.issue}"),
        details={"field": "series[0].timestamps", "issue": exc.issue, "provided": exc.provided, "index": exc.index},
    )
