"""The checks on incoming points, whichever way they come (one monitor's append, bulk rows, the dashboard's
feedback): a problem in the points themselves is an InvalidInput (a 422) naming the field and index."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from app.errors import InvalidInput
from app.series.forms import TIMESTAMP_RE
from app.series.timestamps import TIMESTAMP_FORM, UTC_RANGE_ISSUE, outside_utc_range
from app.web.fields import MAX_ABS_VALUE
from app.web.validation import problem

# The timestamp forms /forecast accepts (app.series.forms): YYYY-MM-DD[T or space]HH:MM:SS[.ffffff][Z|±HH:MM], or
# a date alone (midnight). Group 2 is the zone.
_TIMESTAMP_RE = TIMESTAMP_RE


@dataclass(frozen=True)
class IncomingPoints:
    epochs: list[int]  # whole seconds since the Unix epoch, UTC
    texts: list[str]
    values: list[float]
    missing: int = 0  # points sent with a null value: left out, as a point not sent is


def _epoch_seconds(text: str) -> int:
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # a timestamp without an offset is UTC, as everywhere in the API
    return math.floor(moment.timestamp())


def point_epoch(text: Any) -> int:
    """The whole second that identifies a stored point, from a timestamp in the points' form; 422 otherwise."""
    if not isinstance(text, str) or not _TIMESTAMP_RE.fullmatch(text):
        raise _reject("invalid timestamp format", "timestamp", text,
                      expected="YYYY-MM-DDTHH:MM:SS[.ffffff][Z|±HH:MM]")
    if outside_utc_range(text):  # as for the points: no stored point is there, and no date could name it
        raise _reject(UTC_RANGE_ISSUE, "timestamp", text)
    try:
        return _epoch_seconds(text)
    except (ValueError, OverflowError):
        raise _reject("invalid timestamp", "timestamp", text) from None


def _reject(issue: str, field: str, provided: Any, **extra: Any) -> InvalidInput:
    return InvalidInput(f"Invalid points: {issue}.", details=problem(field, issue, provided, **extra))


def check_points(timestamps: list[Any], values: list[Any], *, max_points: int) -> IncomingPoints:
    """The points themselves: equal lengths, 1..max_points, valid strictly increasing timestamps, finite values or
    null (a missing value: that point is left out and counted)."""
    if len(timestamps) != len(values):
        raise _reject("arrays must have equal length", "points", f"{len(timestamps)} timestamps, {len(values)} "
                      "values", timestamps=len(timestamps), values=len(values))
    if not timestamps:
        raise _reject("at least one point is needed", "points", "0 points", minimum=1)
    if len(timestamps) > max_points:
        raise _reject("too many data points", "points", f"{len(timestamps)} points", maximum=max_points)
    epochs: list[int] = []
    texts: list[str] = []
    floats: list[float] = []
    form: str | None = None
    last: int | None = None
    for index, (text, value) in enumerate(zip(timestamps, values, strict=True)):
        match = _TIMESTAMP_RE.fullmatch(text) if isinstance(text, str) else None
        if match is None:
            raise _reject("invalid timestamp format", "timestamps", text, index=index, expected=TIMESTAMP_FORM)
        suffix = match.group(2) or ""
        this_form = "Z" if suffix == "Z" else ("offset" if suffix else "naive")
        if form is None:
            form = this_form
        elif this_form != form:
            raise _reject("mixed timestamp forms", "timestamps", text, index=index)
        try:
            epoch = _epoch_seconds(text)
        except (ValueError, OverflowError):
            raise _reject("invalid timestamp format", "timestamps", text, index=index, expected=TIMESTAMP_FORM) \
                from None
        if outside_utc_range(text):  # stored as epoch seconds, it could never be written back as a date
            raise _reject(UTC_RANGE_ISSUE, "timestamps", text, index=index)
        if last is not None and epoch <= last:
            raise _reject("timestamps must be strictly increasing (whole seconds identify a point)", "timestamps",
                          text, index=index)
        last = epoch
        if value is None:
            continue
        if type(value) not in (int, float):
            raise _reject("value must be a number", "values", value, index=index)
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise _reject("value must be a finite number", "values", str(value)[:64], index=index)
        if abs(number) > MAX_ABS_VALUE:
            raise _reject(f"value out of range: magnitude must be at most {MAX_ABS_VALUE:g}", "values", value,
                          index=index, maximum=MAX_ABS_VALUE)
        epochs.append(epoch)
        texts.append(text)
        floats.append(number)
    if not epochs:
        raise _reject("missing value (null): every value is null, so there is no point to store", "values", None,
                      index=0)
    return IncomingPoints(epochs=epochs, texts=texts, values=floats, missing=len(timestamps) - len(epochs))
