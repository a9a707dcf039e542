"""A POST /forecast body read into a checked request: one typed pass when the body is well-formed, else
the general path of app.forecast.schemas, which finds and names every defect.

A 100,000-point body is 3 MB. Parsing it into Python objects, then joining 100,000 timestamp strings
back into one text to check them as an array, builds 200,000 objects only to discard them in the web
process. A well-formed body needs none of that: msgspec decodes it against the request's own shape in
one pass, handing back the timestamps array as its undecoded JSON text (checked as an array of
characters by regular_axis_from_json) and the values as numbers.

The typed pass only ever says "valid, and here is the request" or steps aside:

- Any body it does not take whole (another encoding, an unknown field, a value of another type,
  NaN or Infinity, a number out of the float range, a timestamp or value that is not valid) goes to
  the general path, which answers exactly as before (400 or 422 with every problem listed). So errors,
  and their order, are the general path's alone.
- What it takes, it reads as :mod:`json` reads it: msgspec reads the same JSON grammar, takes the last
  of duplicate keys as json does, and gives int for integer literals and float for the others (so a
  ``-0`` value is 0.0 and a ``-0.0`` is -0.0, as with json). Its number parsing is correctly rounded,
  as json's is. ``tests/unit/web/test_fast_paths.py`` puts random and hand-picked bodies through both paths.
- Unknown fields are refused rather than skipped: the standard library gives up on deep nesting that
  a skipping parser would walk through, and only the general path answers that as json does. So a body
  with covariates, holidays or calendar features (fields the typed shape does not have) always takes the
  general path, and the typed pass costs a body without them nothing more.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from app.forecast.schemas import (
    CONFIDENCE_RANGE,
    DEFAULT_CONFIDENCE,
    HORIZON_RANGE,
    MIN_POINTS,
    ForecastRequest,
    SeriesData,
    asks_for_covariates,
    check_covariates,
    check_series,
    load_request,
    model_id_from_headers,
)
from app.series.regular import regular_axis, regular_axis_from_json
from app.series.timestamps import FREQUENCIES
from app.web.fields import all_in_range
from app.web.validation import parse_json_body


class _Series(msgspec.Struct, forbid_unknown_fields=True):
    timestamps: msgspec.Raw
    # int | float keeps json's distinction between 1 and 1.0 (and between -0 and -0.0)
    values: list[int | float]


class _Body(msgspec.Struct, forbid_unknown_fields=True):
    series: list[_Series]
    forecast_horizon: int
    data_frequency: str
    forecast_frequency: str
    confidence: int | float | msgspec.UnsetType = msgspec.UNSET


_decoder = msgspec.json.Decoder(_Body)
_timestamps_decoder = msgspec.json.Decoder(list[str])


def read_forecast_request(raw: bytes, headers: Mapping[str, str], *, max_points: int) -> tuple[ForecastRequest,
                                                                                                 SeriesData]:
    """The checked request, or the first stage's error (400, then 422) exactly as the general path raises it."""
    typed = _read_well_formed(raw, headers, max_points=max_points)
    if typed is not None:
        return typed
    forecast_request, submitted = load_request(parse_json_body(raw), headers)
    series = check_series(submitted, forecast_request.data_frequency, max_points=max_points)
    if asks_for_covariates(forecast_request, submitted):
        series = check_covariates(forecast_request, submitted, series)
    return forecast_request, series


def _read_well_formed(raw: bytes, headers: Mapping[str, str], *, max_points: int) -> tuple[ForecastRequest,
                                                                                             SeriesData] | None:
    """The checked request of a body with nothing to report, read in one typed pass; None for anything else."""
    try:
        body = _decoder.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None
    problems: list[dict[str, Any]] = []
    model_id = model_id_from_headers(headers, problems)
    confidence = DEFAULT_CONFIDENCE if body.confidence is msgspec.UNSET else body.confidence
    if problems or len(body.series) != 1 or not _fields_valid(body, confidence):
        return None

    series = body.series[0]
    if not MIN_POINTS <= len(series.values) <= max_points:
        return None
    import numpy as np

    try:
        floats = np.fromiter(series.values, dtype=np.float64, count=len(series.values))
    except OverflowError:  # an integer past the float range: the general path names it
        return None
    # 100,000 number objects (3 MB) are not needed past this point: not kept through the timestamp check.
    series.values = []
    if not all_in_range(floats):
        return None

    timestamps = series.timestamps
    axis = regular_axis_from_json(memoryview(timestamps), body.data_frequency)  # a view into `raw`
    if axis is None:  # another spelling of the array (indented, escaped): decoded, then checked as a list
        try:
            decoded = _timestamps_decoder.decode(timestamps)
        except (msgspec.DecodeError, UnicodeDecodeError):
            return None
        axis = regular_axis(decoded, body.data_frequency)
    if axis is None or axis.count != len(floats):
        return None
    forecast_request = ForecastRequest(
        forecast_horizon=body.forecast_horizon,
        data_frequency=body.data_frequency,
        confidence=confidence,
        model_id=model_id,
    )
    return forecast_request, SeriesData(axis=axis, values=floats)


def _fields_valid(body: _Body, confidence: int | float) -> bool:
    """The request-shape stage's rules for the scalar fields (ForecastRequestSchema), on values msgspec has
    already typed: an int horizon (never a bool), frequencies of the list and equal, a float confidence
    (an int is never within the range). tests/unit/web/test_fast_paths.py holds the two to the same answers."""
    return (
        HORIZON_RANGE[0] <= body.forecast_horizon <= HORIZON_RANGE[1]
        and body.data_frequency in FREQUENCIES
        and body.forecast_frequency == body.data_frequency
        and type(confidence) is float
        and CONFIDENCE_RANGE[0] <= confidence <= CONFIDENCE_RANGE[1]
    )
