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
from functools import cache
from itertools import islice
from operator import lt, sub
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy loads on the first regular series, so the admin CLI never pays for it
    import numpy as np

from app.series.forms import (
    BASE_LENGTH,
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
    separator_of,
    suffix_text,
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


# The regular path: every timestamp written alike (same form, length and offset), checked as one array of
# characters. It only ever says "valid, and here is the axis"; anything else goes to the paths below,
# which find and name the first defect, so errors are theirs alone.


def prepare_tables() -> None:
    """Loads numpy and builds the month tables now rather than on the first regular series."""
    _month_tables()


@cache
def _month_tables() -> tuple[np.ndarray, np.ndarray]:
    """Indexed by year * 12 + month - 1 (years 1 to 9999): the day number of the month's first day
    (datetime.toordinal - 1) and the month's length, so a timestamp's day is one lookup away."""
    import numpy as np

    years = np.repeat(np.arange(MAX_YEAR + 1, dtype=np.int64), 12)
    months = np.tile(np.arange(12, dtype=np.int64), MAX_YEAR + 1)
    leap = (years % 4 == 0) & ((years % 100 != 0) | (years % 400 == 0))
    lengths = np.array(DAYS_IN_MONTH, dtype=np.int64)[months] + ((months == 1) & leap)
    prior = years - 1
    before = np.array([0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334], dtype=np.int64)[months]
    starts = prior * 365 + prior // 4 - prior // 100 + prior // 400 + before + ((months > 1) & leap)
    return starts, lengths.astype(np.int32)


_MICROSECONDS = {name: unit // timedelta(microseconds=1) for name, unit in FIXED_UNITS.items()}


# Digits become "0" and every other byte stays: a well-formed timestamp turns into its form's template.
_DIGITS_TO_ZERO = bytes(48 if 48 <= b <= 57 else b for b in range(256))


def regular_axis(timestamps: Sequence[Any], frequency: str) -> TimeAxis | None:
    """The axis when every timestamp is written alike (form, length, offset) and the series is valid,
    checked as one array of characters; None when anything differs, for parse_axis to look at item by item.
    """
    if (frequency not in FIXED_UNITS and frequency not in CALENDAR_MONTHS) or len(timestamps) < 2:
        return None
    try:
        joined = "\n".join(timestamps)  # refuses any element that is not a string
    except TypeError:
        return None
    if not joined.isascii():
        return None
    text = joined.encode("ascii")
    return _axis_from_rows(text, 0, len(text), timestamps[0], b"", b"\n", frequency, count=len(timestamps))


def regular_axis_from_json(array: bytes | memoryview, frequency: str) -> TimeAxis | None:
    """regular_axis of a JSON array of strings read from its own text, without making a string per element
    (or a copy of the text: a memoryview into the request body will do).

    Only the plainest spelling is taken: ``["...","..."]`` with one separator throughout (a comma, with or
    without spaces around it) and no escapes, which is what JSON encoders write for timestamps. Its
    elements are then exactly the characters between the quotes, so the answer is regular_axis's for the
    decoded list. Anything else is None, and the caller decodes the array and asks regular_axis.
    """
    if frequency not in FIXED_UNITS and frequency not in CALENDAR_MONTHS:
        return None
    if len(array) < 4 or array[:2] != b'["' or array[-2:] != b'"]':
        return None
    head = bytes(array[:_JSON_HEAD_BYTES])  # holds the first element and the separator after it, if valid
    first_end = head.find(b'"', 2)
    second_start = head.find(b'"', first_end + 1)
    if first_end < 0 or second_start < 0:
        return None
    separator = head[first_end + 1 : second_start]
    if separator.strip(b" \t\n\r") != b",":
        return None
    first = head[2:first_end]
    if not first.isascii():
        return None
    return _axis_from_rows(array, 1, len(array) - 1, first.decode("ascii"), b'"', separator, frequency)


# The longest valid timestamp (32 characters) with its quotes, plenty of separator, and the next quote.
_JSON_HEAD_BYTES = 128


def _axis_from_rows(text: bytes | memoryview, start: int, end: int, first: str, quote: bytes, separator: bytes,
                    frequency: str, count: int | None = None) -> TimeAxis | None:
    """The checks of regular_axis on ``text[start:end]``: timestamps, each between two ``quote``, joined by
    ``separator``, the first being ``first`` (and ``count`` of them, when given). Every one must have the
    first one's template; then the dates are checked as arrays. No copy of the text is made but one
    translation: a 100,000-point text is 2.3 MB."""
    import numpy as np

    match = TIMESTAMP_RE.fullmatch(first)
    if match is None or len(first) < BASE_LENGTH[NAIVE]:  # dates alone are read item by item
        return None
    form = form_of(match.group(2))
    fraction_digits = len(match.group(1) or "")
    width = len(first)
    # The first element matched the pattern, so its template is the one every element must have. The text
    # is `count` templates joined by the separator exactly when every element has the first one's form and
    # length, with digits where it has them (quotes and separators hold no digit: they match only themselves).
    template = quote + first.encode("ascii").translate(_DIGITS_TO_ZERO) + quote
    row = template + separator
    rows, rest = divmod(end - start + len(separator), len(row))
    if rest or rows < 2 or (count is not None and rows != count):
        return None
    count = rows
    # Translated and compared a block of rows at a time: the copies stay small (no 2 MB translation of a
    # 100,000-point text, whose pages would be faulted in fresh under gunicorn's mmap threshold).
    block_rows = max(1, _TEMPLATE_BLOCK_BYTES // len(row))
    expected = row * min(count, block_rows)
    end_of_rows = start + count * len(row) - len(separator)
    for block_start in range(start, end_of_rows, block_rows * len(row)):
        block_end = min(block_start + block_rows * len(row), end_of_rows)
        if bytes(text[block_start:block_end]).translate(_DIGITS_TO_ZERO) != expected[: block_end - block_start]:
            return None
    # One row per timestamp, its characters only, viewed in place (the last row has no separator after it,
    # and the view never reaches past its timestamp).
    characters = np.frombuffer(text, dtype=np.uint8)[start + len(quote) :]
    grid = np.lib.stride_tricks.as_strided(characters, shape=(count, width), strides=(len(row), 1),
                                           writeable=False)
    if form == OFFSET_FORM:  # the offset's digits too must be the first element's
        offsets = grid[:, width - 6 : width]
        if not (offsets == offsets[0]).all():
            return None
    found = _regular_steps(grid, fraction_digits, frequency)
    if found is None:
        return None
    step, month_end = found
    last_text = bytes(grid[-1]).decode("ascii")
    return TimeAxis(
        frequency=frequency,
        step=step,
        count=count,
        first=datetime.fromisoformat(first),
        last=datetime.fromisoformat(last_text),
        last_text=last_text,
        suffix=suffix_text(last_text, form),
        fraction_digits=fraction_digits,
        month_end=month_end,
        separator=separator_of(last_text),
    )


# Rows checked at a time: every array of a block stays under glibc's mmap threshold (128 KiB, fixed in
# app/serving/process.py), so a 100,000-point series reuses heap blocks instead of faulting in fresh pages for
# each of its two dozen temporaries, and each block's arrays stay in the CPU cache.
_BLOCK_ROWS = 8192  # at least 2: the first block holds the first two rows, which set the step
_TEMPLATE_BLOCK_BYTES = 64 * 1024


class _Fields:
    """The date-time fields of a block of rows, read from their digits (which the template check found)."""

    def __init__(self, grid: np.ndarray, fraction_digits: int) -> None:
        import numpy as np

        def two(k: int) -> np.ndarray:
            # In uint8 arithmetic, wrapping: 10 * (a - 48) + (b - 48) = 10a + b - 528, and 528 = 16 mod 256;
            # the true value is at most 99, so the wrapped result is exact.
            return grid[:, k] * 10 + grid[:, k + 1] - 16  # type: ignore[no-any-return]

        self.year = two(0).astype(np.int32) * 100 + two(2)
        self.month, self.day = two(5), two(8)
        self.hour, self.minute, self.second = two(11), two(14), two(17)
        self.micro: np.ndarray | int = 0
        if fraction_digits:
            micro = grid[:, 20].astype(np.int32) - 48
            for k in range(21, 20 + fraction_digits):
                micro *= 10
                micro += grid[:, k]
                micro -= 48
            self.micro = micro * 10 ** (6 - fraction_digits)

    def valid(self) -> bool:
        return bool(
            (self.year >= 1).all()
            and ((self.month >= 1) & (self.month <= 12)).all()
            and (self.hour <= 23).all()
            and (self.minute <= 59).all()
            and (self.second <= 59).all()
        )

    def time_of_day(self) -> np.ndarray:
        import numpy as np

        seconds = (self.hour.astype(np.int32) * 60 + self.minute) * 60 + self.second
        return seconds.astype(np.int64) * 1_000_000 + self.micro  # type: ignore[no-any-return]


def _regular_steps(grid: np.ndarray, fraction_digits: int, frequency: str) -> tuple[int, bool] | None:
    """(step, month_end) when the rows of ``grid`` (one timestamp's characters each, all of one template)
    are valid dates evenly spaced at a whole number of ``frequency`` units; else None. Checked a block of
    rows at a time, each block continuing from the last row of the one before."""
    import numpy as np

    month_starts, month_lengths = _month_tables()
    count = len(grid)
    calendar_months = CALENDAR_MONTHS.get(frequency)
    # Set from the first two rows: the step every gap must have, and what later rows are compared with.
    gap = months = first_month = first_day = first_time = 0
    previous = 0  # the instant (fixed frequencies) of the row before the block
    month_end = clamped = True
    for block_start in range(0, count, _BLOCK_ROWS):
        fields = _Fields(grid[block_start : block_start + _BLOCK_ROWS], fraction_digits)
        if not fields.valid():
            return None
        months_index = fields.year * 12 + (fields.month - 1)
        month_days = month_lengths[months_index]
        if not ((fields.day >= 1) & (fields.day <= month_days)).all():
            return None
        if calendar_months is None:
            days = month_starts[months_index] + fields.day
            instants = days * 86_400_000_000 + fields.time_of_day()
            if block_start == 0:
                gap = int(instants[1] - instants[0])
                if gap <= 0 or gap % _MICROSECONDS[frequency]:
                    return None
            elif int(instants[0]) - previous != gap:
                return None
            if not (np.diff(instants) == gap).all():
                return None
            previous = int(instants[-1])
            continue
        time_of_day = fields.time_of_day()
        if block_start == 0:
            first_month, first_day, first_time = int(months_index[0]), int(fields.day[0]), int(time_of_day[0])
            months = int(months_index[1]) - first_month
            if months <= 0 or months % calendar_months:
                return None
        rows = np.arange(block_start, block_start + len(months_index), dtype=np.int32)
        if not (months_index == first_month + months * rows).all() or not (time_of_day == first_time).all():
            return None
        month_end = month_end and bool((fields.day == month_days).all())
        clamped = clamped and bool((fields.day == np.minimum(first_day, month_days)).all())
        if not (month_end or clamped):
            return None
    if calendar_months is None:
        return gap // _MICROSECONDS[frequency], False
    return months // calendar_months, month_end


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
