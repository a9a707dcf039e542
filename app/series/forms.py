"""The forms a timestamp may take, the error that names a defective one, and the axis a checked series is on:
the ground app.series.timestamps checks and continues a series on (docs/contract.md, section 7)."""

from __future__ import annotations

import calendar
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

FREQUENCIES: tuple[str, ...] = (
    "Seconds",
    "Minutes",
    "Hours",
    "Daily",
    "Weekly",
    "Monthly",
    "Quarterly",
    "Yearly",
)

FIXED_UNITS: dict[str, timedelta] = {
    "Seconds": timedelta(seconds=1),
    "Minutes": timedelta(minutes=1),
    "Hours": timedelta(hours=1),
    "Daily": timedelta(days=1),
    "Weekly": timedelta(days=7),
}
CALENDAR_MONTHS: dict[str, int] = {"Monthly": 1, "Quarterly": 3, "Yearly": 12}
UNIT_NAMES: dict[str, str] = {
    "Seconds": "seconds",
    "Minutes": "minutes",
    "Hours": "hours",
    "Daily": "days",
    "Weekly": "weeks",
    "Monthly": "months",
    "Quarterly": "quarters",
    "Yearly": "years",
}

# [0-9] rather than \d so that non-ASCII digits are refused; ranges here, day-in-month by datetime. Date and time
# are separated by "T" or a space (RFC 3339 allows it; pandas and databases write it): the same instant either way.
_BODY = (
    r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
    r"[T ](?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.([0-9]{1,6}))?"
)
_OFFSET = r"[+-](?:[01][0-9]|2[0-3]):[0-5][0-9]"
# A date alone is that day's midnight, without an offset (ISO 8601's calendar date; datetime.fromisoformat
# and numpy read it so): what users write for daily and coarser data.
_DATE = r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
TIMESTAMP_RE = re.compile(f"{_BODY}(Z|{_OFFSET})?|{_DATE}")

NAIVE, ZULU, OFFSET_FORM = "naive", "Z", "offset"
FORM_RES = {
    NAIVE: re.compile(f"{_BODY}|{_DATE}"),
    ZULU: re.compile(f"{_BODY}Z"),
    OFFSET_FORM: re.compile(f"{_BODY}{_OFFSET}"),
}
# Length of a timestamp of each form without a fraction; anything longer is "." plus fraction digits.
BASE_LENGTH = {NAIVE: 19, ZULU: 20, OFFSET_FORM: 25}
FORM_DESCRIPTIONS = {
    NAIVE: "no UTC offset",
    ZULU: "a 'Z' suffix",
    OFFSET_FORM: "a ±HH:MM offset",
}

DAYS_IN_MONTH = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_PROVIDED_MAX = 64
MAX_YEAR = 9999

# What "invalid timestamp format" expects, as the error's `expected` shows it (docs/contract.md, section 7).
TIMESTAMP_FORM = "YYYY-MM-DDTHH:MM:SS[.ffffff][Z|±HH:MM]"
UTC_RANGE_ISSUE = "timestamp out of range: with its UTC offset applied it must lie between 0001-01-01T00:00:00Z " \
    "and 9999-12-31T23:59:59Z"
_LAST_WALL = datetime.max
_FIRST_WALL = datetime.min


class TimestampError(ValueError):
    """One defect in the timestamps array; the API turns it into a 422 DATA_VALIDATION_ERROR."""

    def __init__(self, issue: str, index: int, provided: object, expected: str | None = None) -> None:
        super().__init__(f"{issue} (index {index})")
        self.issue = issue
        self.index = index
        self.provided = _excerpt(provided)
        self.expected = expected

    def details(self, field: str = "timestamps") -> dict[str, Any]:
        out: dict[str, Any] = {
            "field": field,
            "issue": self.issue,
            "provided": self.provided,
            "index": self.index,
        }
        if self.expected is not None:
            out["expected"] = self.expected
        return out


@dataclass(frozen=True)
class TimeAxis:
    frequency: str
    step: int
    count: int
    # Calendar frequencies continue from the first timestamp so clamping never drifts.
    first: datetime
    last: datetime
    last_text: str
    suffix: str  # "", "Z" or the last timestamp's own "±HH:MM"
    fraction_digits: int
    month_end: bool = False
    separator: str = "T"  # the last timestamp's own, "T" or " "


def format_error(index: int, provided: object) -> TimestampError:
    """"invalid timestamp format" at ``index``, with the accepted form as ``expected``."""
    return TimestampError("invalid timestamp format", index, provided, TIMESTAMP_FORM)


def outside_utc_range(text: str) -> bool:
    """Whether a well-formed timestamp (TIMESTAMP_RE) names an instant before 0001-01-01T00:00:00Z or past
    9999-12-31T23:59:59.999999Z once its offset is applied. Only a first or last day written with an offset
    can be: everything else is decided by the first characters, without parsing."""
    if not text.startswith(("9999-12-31", "0001-01-01")) or len(text) < 25 or text[-6] not in "+-":
        return False
    offset = timedelta(hours=int(text[-5:-3]), minutes=int(text[-2:]))
    wall = datetime.fromisoformat(text[:-6])
    if text[-6] == "-":  # UTC is the wall clock plus the offset
        return wall > _LAST_WALL - offset
    return wall < _FIRST_WALL + offset


def _excerpt(value: object) -> str:
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= _PROVIDED_MAX:
        return text
    return text[: _PROVIDED_MAX - 3] + "..."


def form_of(suffix: str | None) -> str:
    if suffix is None:
        return NAIVE
    return ZULU if suffix == "Z" else OFFSET_FORM


def suffix_text(text: str, form: str) -> str:
    if form == NAIVE:
        return ""
    return "Z" if form == ZULU else text[-6:]


def fraction_digits(texts: Sequence[str], form: str) -> int:
    extra = max(map(len, texts)) - BASE_LENGTH[form]
    return extra - 1 if extra > 0 else 0


def render(wall: datetime, digits: int, suffix: str, separator: str = "T") -> str:
    """The wall clock in the input's form. isoformat is C and pads the year to four digits; the fraction
    is cut to the input's own digits, and the suffix and separator are the input's, not the datetime's own
    offset."""
    if wall.tzinfo is not None:
        wall = wall.replace(tzinfo=None)
    if digits:
        return wall.isoformat(separator, timespec="microseconds")[: 20 + digits] + suffix
    return wall.isoformat(separator, timespec="seconds") + suffix


def separator_of(text: str) -> str:
    """The character between date and time of a well-formed timestamp ("T" for a date alone)."""
    return " " if len(text) > 10 and text[10] == " " else "T"


def is_month_end(wall: datetime) -> bool:
    return wall.day == calendar.monthrange(wall.year, wall.month)[1]


def add_months(anchor: datetime, months: int, month_end: bool) -> datetime | None:
    """anchor's wall clock moved by whole months, day kept and clamped (or month end); None past 9999."""
    year, month0 = divmod(anchor.year * 12 + anchor.month - 1 + months, 12)
    if year > MAX_YEAR:
        return None
    last_day = calendar.monthrange(year, month0 + 1)[1]
    day = last_day if month_end else min(anchor.day, last_day)
    return anchor.replace(year=year, month=month0 + 1, day=day, tzinfo=None)
