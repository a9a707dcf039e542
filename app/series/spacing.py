"""A parsed series' spacing checked against its data_frequency: the axis it is on, or the first defect named
with the nearest sensible timestamp to send instead (app.series.timestamps parses, this checks)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from app.series.forms import (
    CALENDAR_MONTHS,
    FIXED_UNITS,
    MAX_YEAR,
    OFFSET_FORM,
    UNIT_NAMES,
    TimeAxis,
    TimestampError,
    add_months,
    fraction_digits,
    is_month_end,
    render,
    separator_of,
    suffix_text,
)


def make_axis(
    timestamps: Sequence[str],
    ends: list[datetime],
    count: int,
    form: str,
    frequency: str,
    step: int,
    month_end: bool,
) -> TimeAxis:
    last_text = timestamps[-1]
    return TimeAxis(
        frequency=frequency,
        step=step,
        count=count,
        first=ends[0],
        last=ends[-1],
        last_text=last_text,
        suffix=suffix_text(last_text, form),
        fraction_digits=fraction_digits(timestamps, form),
        month_end=month_end,
        separator=separator_of(last_text),
    )

def validate_spacing(timestamps: Sequence[str], dts: list[datetime], form: str, frequency: str) -> TimeAxis:
    """Walk the parsed series; return its axis or raise at the first index that breaks the ordering and
    spacing rules (docs/contract.md, section 7)."""
    # The step is read from the first gap, so that gap must be positive before anything else.
    if not dts[1] > dts[0]:
        raise TimestampError("timestamps must be strictly increasing", 1, timestamps[1])
    if frequency in FIXED_UNITS:
        return _validate_fixed(timestamps, dts, form, frequency)
    return _validate_calendar(timestamps, dts, form, frequency)

def _expected_text(timestamps: Sequence[str], form: str, i: int, wall: datetime) -> str:
    digits = fraction_digits(timestamps[: i + 1], form)
    return render(wall, digits, suffix_text(timestamps[i], form), separator_of(timestamps[i]))

def _not_whole_issue(frequency: str) -> str:
    return f"the gap between the first two timestamps is not a whole number of {UNIT_NAMES[frequency]}"

def _validate_fixed(timestamps: Sequence[str], dts: list[datetime], form: str, frequency: str) -> TimeAxis:
    unit = FIXED_UNITS[frequency]
    anchor = dts[0]

    def expected_at(i: int, instant: datetime | None) -> str | None:
        if instant is None:
            return None
        try:
            # Written in the offending element's own offset, which is what the client compares against.
            wall = instant.astimezone(dts[i].tzinfo) if form == OFFSET_FORM else instant
        except OverflowError:
            return None
        return _expected_text(timestamps, form, i, wall)

    def shifted(units: int) -> datetime | None:
        try:
            return anchor + unit * units
        except OverflowError:
            return None

    gap = dts[1] - anchor
    if gap % unit:
        nearest = max(1, round(gap / unit))
        raise TimestampError(_not_whole_issue(frequency), 1, timestamps[1], expected_at(1, shifted(nearest)))
    step = gap // unit
    for i in range(2, len(dts)):
        expected = shifted(i * step)
        if dts[i] != expected:
            if not dts[i] > dts[i - 1]:
                raise TimestampError("timestamps must be strictly increasing", i, timestamps[i])
            text = expected_at(i, expected)
            issue = (
                f"timestamps must be evenly spaced: expected {text}"
                if text is not None
                else f"timestamps must be evenly spaced: the expected timestamp is past year {MAX_YEAR}"
            )
            raise TimestampError(issue, i, timestamps[i], text)
    return make_axis(timestamps, dts, len(dts), form, frequency, step, False)

def _validate_calendar(timestamps: Sequence[str], dts: list[datetime], form: str, frequency: str) -> TimeAxis:
    unit_months = CALENDAR_MONTHS[frequency]
    anchor = dts[0].replace(tzinfo=None)
    second = dts[1].replace(tzinfo=None)
    # Month end first: it is the reading the timestamp rules prefer, and the one kept when the data fits both.
    live = [True, False] if is_month_end(anchor) else [False]

    def preferred(i: int) -> bool:
        if i == 1:
            return live[0] and is_month_end(second)
        return live[0]

    def fail(i: int, months: int) -> TimestampError:
        wall = add_months(anchor, months, preferred(i))
        text = None if wall is None else _expected_text(timestamps, form, i, wall)
        if i == 1:
            issue = _not_whole_issue(frequency)
        elif text is None:
            issue = f"timestamps must be evenly spaced: the expected timestamp is past year {MAX_YEAR}"
        else:
            issue = f"timestamps must be evenly spaced: expected {text}"
        return TimestampError(issue, i, timestamps[i], text)

    months = (second.year - anchor.year) * 12 + second.month - anchor.month
    if months <= 0 or months % unit_months:
        nearest = max(1, round(months / unit_months)) * unit_months
        raise fail(1, nearest)
    for i in range(1, len(dts)):
        if not dts[i] > dts[i - 1]:
            raise TimestampError("timestamps must be strictly increasing", i, timestamps[i])
        wall = dts[i].replace(tzinfo=None)
        matching = [rule for rule in live if add_months(anchor, i * months, rule) == wall]
        if not matching:
            raise fail(i, i * months)
        live = matching
    return make_axis(timestamps, dts, len(dts), form, frequency, months // unit_months, month_end=live[0])
