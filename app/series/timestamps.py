"""The time axis of a forecast request: validate the input timestamps and continue them (docs/contract.md).

Choices this module makes where the timestamp rules (docs/contract.md, section 7) are silent:

- A fraction has 1 to 6 digits; 7 or more are refused ("invalid timestamp format") because datetime keeps
  microseconds only, and silently dropping digits could merge two distinct timestamps into one.
- The fraction may be written with a different number of digits (or left out) from one timestamp to the
  next, since common serialisers (Python's isoformat) drop a zero fraction. All timestamps of a valid
  series have the same fractional value anyway, because every step is a whole number of seconds.
  Output uses the largest number of fraction digits seen in the input (none if no input had a fraction).
- "Z" and "+00:00" are different suffix forms: mixing them is "mixed timestamp forms".
- Seconds, Minutes, Hours, Daily and Weekly are fixed durations compared in UTC, so a Daily series at local
  midnight that crosses a DST change (offset changes) is refused. Monthly, Quarterly and Yearly are
  calendar steps taken on the wall clock the timestamps are written in (date and time of day as written,
  offset ignored), so a monthly series on month ends in +02:00 is valid; order is still checked in UTC.
- Calendar anchor rule: a series whose first timestamp is a month end is treated as a month-end series
  (preferred, as the timestamp rules say), but when the data contradicts that while fitting "day of month of the first
  timestamp, clamped", the day-of-month rule is used instead (e.g. quarterly on the 30th starting on
  11-30: 11-30, 02-28, 05-30 is valid). When a whole series fits both rules, month end wins.
- Errors name the first defective index; at one index the order of checks is: format, suffix form,
  strictly increasing, spacing. An error at index 1 about the spacing says the gap is not a whole
  number of units and gives the nearest sensible expected timestamp.
- A forecast that would pass 9999-12-31 raises TimestampError at the last index.
- A forecast works on the wall clock as written, so a series whose offset carries it past 9999-12-31 in UTC
  (9999-12-31T23:30:00-01:00) is valid here. Where a timestamp is an instant (app.series.instants, the
  monitors' stored points), outside_utc_range refuses it: no datetime holds that instant.
- A format error carries the accepted form as ``expected``, so the answer says what to send instead.
"""

from __future__ import annotations

from calendar import isleap
from collections.abc import Sequence
from datetime import datetime, timedelta, tzinfo
from itertools import islice
from operator import lt, sub

from app.series.forms import (
    CALENDAR_MONTHS,
    DAYS_IN_MONTH,
    FIXED_UNITS,
    FORM_DESCRIPTIONS,
    FORM_RES,
    MAX_YEAR,
    NAIVE,
    OFFSET_FORM,
    TIMESTAMP_RE,
    ZULU,
    TimeAxis,
    TimestampError,
    add_months,
    form_of,
    format_error,
    is_month_end,
    render,
)
from app.series.forms import (
    FREQUENCIES as FREQUENCIES,
)
from app.series.forms import (
    TIMESTAMP_FORM as TIMESTAMP_FORM,
)
from app.series.forms import (
    UTC_RANGE_ISSUE as UTC_RANGE_ISSUE,
)
from app.series.forms import (
    outside_utc_range as outside_utc_range,
)
from app.series.regular import regular_axis
from app.series.spacing import make_axis, validate_spacing


def parse_axis(timestamps: Sequence[str], frequency: str) -> TimeAxis:
    """Validate the timestamps against the timestamp rules and return the axis to continue; raises TimestampError."""
    if frequency not in FIXED_UNITS and frequency not in CALENDAR_MONTHS:
        raise ValueError(f"unknown frequency {frequency!r}")
    if len(timestamps) < 2:
        raise ValueError("at least two timestamps are needed to infer the step")
    regular = regular_axis(timestamps, frequency)
    if regular is not None:
        return regular
    return _parse_axis_per_item(timestamps, frequency)


def _parse_axis_per_item(timestamps: Sequence[str], frequency: str) -> TimeAxis:
    """parse_axis element by element: whatever the one-array check could not accept, with its defect named."""
    parsed = _parse_all_fast(timestamps)
    if parsed is None:
        return _parse_slow(timestamps, frequency)
    walls, form, shared_tz = parsed
    if frequency in FIXED_UNITS:
        found = _fixed_fast(walls, frequency)
    else:
        found = _calendar_fast(walls, frequency)
    if found is None:
        dts = walls if shared_tz is None else [wall.replace(tzinfo=shared_tz) for wall in walls]
        # The fast checks only say "valid"; the full walk finds and names the first defect.
        return validate_spacing(timestamps, dts, form, frequency)
    step, month_end = found
    ends = [walls[0].replace(tzinfo=shared_tz), walls[-1].replace(tzinfo=shared_tz)]
    return make_axis(timestamps, ends, len(walls), form, frequency, step, month_end)


def _parse_all_fast(timestamps: Sequence[str]) -> tuple[list[datetime], str, tzinfo | None] | None:
    """All elements parsed when all are well-formed and of one form, else None (the slow path explains).

    When every element carries the same offset, the wall clocks are returned naive with that offset on
    the side: checks on them equal checks in UTC, and naive arithmetic asks no tzinfo for an offset.
    """
    first = timestamps[0]
    match = TIMESTAMP_RE.fullmatch(first) if isinstance(first, str) else None
    if match is None:
        return None
    form = form_of(match.group(2))
    try:
        if not all(map(FORM_RES[form].fullmatch, timestamps)):
            return None
        if form == NAIVE:
            return list(map(datetime.fromisoformat, timestamps)), form, None
        cut = 1 if form == ZULU else 6
        if form == OFFSET_FORM and len({text[-6:] for text in timestamps}) != 1:
            return list(map(datetime.fromisoformat, timestamps)), form, None
        walls = [datetime.fromisoformat(text[:-cut]) for text in timestamps]
        return walls, form, datetime.fromisoformat(first).tzinfo
    except (TypeError, ValueError):
        return None


def _parse_slow(timestamps: Sequence[str], frequency: str) -> TimeAxis:
    dts: list[datetime] = []
    form0 = NAIVE
    failure: TimestampError | None = None
    for index, text in enumerate(timestamps):
        match = TIMESTAMP_RE.fullmatch(text) if isinstance(text, str) else None
        if match is None:
            failure = format_error(index, text)
            break
        form = form_of(match.group(2))
        if index == 0:
            form0 = form
        elif form != form0:
            failure = TimestampError(
                f"mixed timestamp forms: the series starts with {FORM_DESCRIPTIONS[form0]}, "
                f"this timestamp has {FORM_DESCRIPTIONS[form]}",
                index,
                text,
            )
            break
        try:
            dts.append(datetime.fromisoformat(text))
        except ValueError:
            failure = format_error(index, text)
            break
    # A spacing defect before the malformed element comes first in index order.
    if len(dts) >= 2:
        axis = validate_spacing(timestamps[: len(dts)], dts, form0, frequency)
        if failure is None:
            return axis
    if failure is None:  # pragma: no cover - the fast path would have succeeded
        raise AssertionError("slow path found no defect")
    raise failure


def _fixed_fast(dts: list[datetime], frequency: str) -> tuple[int, bool] | None:
    unit = FIXED_UNITS[frequency]
    gap = dts[1] - dts[0]
    if gap <= timedelta(0) or gap % unit:
        return None
    # timedelta arithmetic is exact, so one distinct consecutive gap is the same as anchor + i * gap.
    if set(map(sub, islice(dts, 1, None), dts)) != {gap}:
        return None
    return gap // unit, False


def _calendar_fast(dts: list[datetime], frequency: str) -> tuple[int, bool] | None:
    first = dts[0]
    months = (dts[1].year - first.year) * 12 + dts[1].month - first.month
    unit_months = CALENDAR_MONTHS[frequency]
    if months <= 0 or months % unit_months:
        return None
    index0 = first.year * 12 + first.month - 1
    time0 = first.time()
    day0 = first.day
    end_rule = is_month_end(first)
    day_rule = True
    for i, dt in enumerate(dts):
        year, month0 = divmod(index0 + i * months, 12)
        if dt.month != month0 + 1 or dt.year != year or dt.time() != time0:
            return None
        last_day = DAYS_IN_MONTH[month0] + (month0 == 1 and isleap(year))
        day = dt.day
        end_rule = end_rule and day == last_day
        day_rule = day_rule and day == (day0 if day0 < last_day else last_day)
        if not (end_rule or day_rule):
            return None
    if not all(map(lt, dts, islice(dts, 1, None))):
        return None
    return months // unit_months, end_rule


def future_timestamps(axis: TimeAxis, horizon: int) -> list[str]:
    """The next `horizon` timestamps after the series, in the input's own form (docs/contract.md, section 7,
    "The forecast's timestamps")."""
    walls: list[datetime] = []
    if axis.frequency in FIXED_UNITS:
        delta = FIXED_UNITS[axis.frequency] * axis.step
        # The wall clock in the input's own offset: adding to it is adding to the instant, written in that
        # offset (fixed offsets only; the suffix is written back by render).
        wall = axis.last.replace(tzinfo=None)
        for _ in range(horizon):
            try:
                wall += delta
            except OverflowError:
                raise _past_max_year(axis) from None
            walls.append(wall)
    else:
        months = CALENDAR_MONTHS[axis.frequency] * axis.step
        for j in range(1, horizon + 1):
            calendar_wall = add_months(axis.first, (axis.count - 1 + j) * months, axis.month_end)
            if calendar_wall is None:
                raise _past_max_year(axis)
            walls.append(calendar_wall)
    return [render(wall, axis.fraction_digits, axis.suffix, axis.separator) for wall in walls]


def _past_max_year(axis: TimeAxis) -> TimestampError:
    return TimestampError(f"forecast would pass year {MAX_YEAR}", axis.count - 1, axis.last_text)
