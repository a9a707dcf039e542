"""The regular path of a time axis: every timestamp written alike (same form, length and offset), checked as one
array of characters (docs/contract.md, section 7, holds the rules).

It only ever says "valid, and here is the axis"; anything else goes to app.series.timestamps's per-item paths,
which find and name the first defect, so errors are theirs alone. regular_axis_from_json reads a JSON array's
own text, so a forecast body's timestamps are checked without a string made per element.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy loads on the first regular series, so the admin CLI never pays for it
    import numpy as np

from app.series.forms import (
    BASE_LENGTH,
    CALENDAR_MONTHS,
    DAYS_IN_MONTH,
    FIXED_UNITS,
    MAX_YEAR,
    NAIVE,
    OFFSET_FORM,
    TIMESTAMP_RE,
    TimeAxis,
    form_of,
    separator_of,
    suffix_text,
)


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
    # Translated and compared a block of rows at a time: the copies stay small (no translation of the whole
    # text of a long series, whose pages would be faulted in fresh under gunicorn's mmap threshold).
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
