"""Holiday and calendar design columns over a forecast's time axis (docs/covariates.md).

Holidays come from the ``holidays`` package, never from a calendar written here. A row's holiday columns count
the days of the period it covers (from its own day up to the next row's day, and at least its own day), so a
daily or hourly row says 0 or 1 and a weekly or monthly row says how many holiday days it holds:

- ``holiday``: days of the period that are a holiday of the country (and subdivision);
- ``holiday_near``: days of the period within ``window`` days of a holiday, not being one themselves (no such
  column when the window is 0).

Calendar features are one-hot columns of the wall clock as written (the timestamps' offset is not applied), with
the first level seen in the history dropped as the reference: ``hour`` (0-23), ``day_of_week`` (Mon-Sun),
``month`` (Jan-Dec). A feature must take at least two values over the history; a level the history never shows
(a month not yet seen) is the reference level in the future too.

numpy and holidays load on the first request that asks for these columns, not with the module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from app.errors import InvalidInput
from app.series.forms import add_months, is_month_end

if TYPE_CHECKING:
    import numpy as np

WINDOW_RANGE = (0, 7)
DEFAULT_WINDOW = 1
CALENDAR_FEATURES = ("hour", "day_of_week", "month")
# Every year's holidays are computed one by one in the web process; beyond this a request spans centuries of
# holidays no series needs.
MAX_HOLIDAY_YEARS = 500
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


@dataclass(frozen=True)
class HolidaySpec:
    country: str  # ISO 3166 alpha-2 (or alpha-3) code as the holidays package takes it, e.g. "US"
    subdivision: str | None = None
    window: int = DEFAULT_WINDOW  # days either side of a holiday that count as near it (0..7)


@dataclass(frozen=True)
class HolidayInHorizon:
    date: str  # YYYY-MM-DD
    name: str

    def as_json(self) -> dict[str, str]:
        return {"date": self.date, "name": self.name}


class CovariateError(InvalidInput):
    """A covariate, holiday or calendar input that breaks a documented rule: a 422 naming the field."""

    def __init__(self, field: str, issue: str, provided: Any, **extra: Any) -> None:
        super().__init__(f"Invalid covariates: {field}: {issue}.",
                         details={"field": field, "issue": issue, "provided": _excerpt(provided), **extra})
        self.field, self.issue = field, issue


def _excerpt(value: Any) -> Any:
    """A short stand-in for what was sent, as the contract's ``provided`` is (never more than an excerpt)."""
    if isinstance(value, list):
        return f"array of {len(value)} items"
    if isinstance(value, dict):
        return f"object with {len(value)} keys"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**18:
        value = str(value)
    if isinstance(value, str) and len(value) > 64:
        return value[:61] + "..."
    return value


@dataclass(frozen=True)
class Columns:
    """Design columns built here: names, history rows (n, k), future rows (horizon, k)."""

    names: list[str]
    history: np.ndarray
    future: np.ndarray


def walls_from_texts(timestamps: Sequence[str]) -> np.ndarray:
    """The wall clocks of checked timestamps (section 7 of docs/contract.md) as datetime64[us]: the text without
    its "Z" or offset, which numpy reads in one pass."""
    import numpy as np

    def wall(text: str) -> str:
        if text.endswith("Z"):
            return text[:-1]
        return text[:-6] if len(text) >= 25 and text[-6] in "+-" else text

    return np.array([wall(text) for text in timestamps], dtype="datetime64[us]")


def as_walls(timestamps: Sequence[datetime] | Sequence[str] | np.ndarray) -> np.ndarray:
    """datetime64[us] wall clocks of datetimes (an aware one keeps its own wall clock), of checked timestamp
    texts, or of a datetime64 array."""
    import numpy as np

    if isinstance(timestamps, np.ndarray) and np.issubdtype(timestamps.dtype, np.datetime64):
        return timestamps.astype("datetime64[us]")
    if all(isinstance(t, str) for t in timestamps[:1]):
        return walls_from_texts([str(t) for t in timestamps])
    return np.array([cast(datetime, t).replace(tzinfo=None).isoformat() for t in timestamps],
                    dtype="datetime64[us]")


def period_days(walls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's first day and the day after its period (datetime64[D]): a period runs to the next row's day,
    and covers at least the row's own day. The last row's next timestamp is continued from the rows before it."""
    import numpy as np

    following = np.empty_like(walls)
    following[:-1] = walls[1:]
    following[-1] = _next_wall(walls)
    starts = walls.astype("datetime64[D]")
    ends = np.maximum(following.astype("datetime64[D]"), starts + np.timedelta64(1, "D"))
    return starts, ends


def _next_wall(walls: np.ndarray) -> np.datetime64:
    """The timestamp after the last: a calendar step (months, day kept or month end) when the steps are of
    unequal whole months, else the usual step."""
    import numpy as np

    if len(walls) < 2:  # nothing to continue from: the period is the row's own day
        return walls[-1]
    steps = np.diff(walls)
    shortest = steps.min()
    if shortest >= np.timedelta64(28, "D") and steps.max() != shortest:
        before, last = (_datetime(w) for w in walls[-2:])
        months = (last.year - before.year) * 12 + last.month - before.month
        month_end = is_month_end(before) and is_month_end(last)
        anchor, times = (before, 2 * months) if before.day >= last.day else (last, months)
        moved = add_months(anchor, times, month_end)
        if moved is not None:
            return np.datetime64(moved, "us")
        return walls[-1] + steps[-1]
    return walls[-1] + np.median(steps.astype(np.int64)).astype("timedelta64[us]")


def _datetime(wall: np.datetime64) -> datetime:
    return datetime(1970, 1, 1) + timedelta(microseconds=int(wall.astype("datetime64[us]").astype("int64")))


def check_holiday_spec(spec: HolidaySpec) -> None:
    window = spec.window
    if isinstance(window, bool) or not isinstance(window, int) or not WINDOW_RANGE[0] <= window <= WINDOW_RANGE[1]:
        raise CovariateError("holidays.window", f"Must be an integer between {WINDOW_RANGE[0]} and "
                             f"{WINDOW_RANGE[1]}", window)
    # Asked of the package country by country: listing every country it knows would load all their modules.
    try:
        if not isinstance(spec.country, str):
            raise NotImplementedError
        country = _calendar_of(HolidaySpec(spec.country), [])
    except NotImplementedError:
        raise CovariateError("holidays.country", "unknown country: must be a code of the holidays package "
                             "(ISO 3166-1, upper case, e.g. US, GB, DE)", spec.country) from None
    if spec.subdivision is not None:
        try:
            if not isinstance(spec.subdivision, str):
                raise NotImplementedError
            _calendar_of(spec, [])
        except NotImplementedError:
            raise CovariateError("holidays.subdivision", f"unknown subdivision of {spec.country}",
                                 spec.subdivision, allowed=list(country.subdivisions)) from None


def _calendar_of(spec: HolidaySpec, years: Sequence[int]) -> Any:
    # A year outside a country's tables has no holidays there (the package warns, through the process's
    # warning filters: changing them here would race with the web process's other threads).
    from holidays import country_holidays

    return country_holidays(spec.country, subdiv=spec.subdivision, years=years)


def holiday_columns(spec: HolidaySpec, history: np.ndarray, future: np.ndarray
                    ) -> tuple[Columns, list[HolidayInHorizon]]:
    """The holiday columns over history and future wall clocks, and the holidays the horizon's periods hold."""
    import numpy as np

    starts, ends = period_days(np.concatenate([history, future]))
    first_year = _year(starts[0]) - 1
    last_year = _year(ends[-1] - np.timedelta64(1, "D")) + 1
    if last_year - first_year + 1 > MAX_HOLIDAY_YEARS + 2:
        raise CovariateError("holidays", f"the series and its horizon span more than {MAX_HOLIDAY_YEARS} calendar "
                             "years, over which holidays are not built", f"{last_year - first_year - 1} years")
    calendar = _calendar_of(spec, range(max(first_year, 1), min(last_year, 9999) + 1))
    days = np.array(sorted(calendar), dtype="datetime64[D]")
    near = np.empty(0, dtype="datetime64[D]")
    if spec.window and len(days):
        offsets = np.arange(-spec.window, spec.window + 1).astype("timedelta64[D]")
        near = np.setdiff1d(np.unique((days[:, None] + offsets[None, :]).ravel()), days)

    def count(marked: np.ndarray) -> np.ndarray:
        return (np.searchsorted(marked, ends) - np.searchsorted(marked, starts)).astype(np.float64)

    names, columns = ["holiday"], [count(days)]
    if spec.window:
        names.append("holiday_near")
        columns.append(count(near))
    matrix = np.stack(columns, axis=1)
    n = len(history)
    future_starts, future_ends = starts[n:], ends[n:]
    in_horizon = [
        HolidayInHorizon(date=str(day), name=calendar.get(date.fromisoformat(str(day))))
        for day in days[(days >= future_starts[0]) & (days < future_ends[-1])]
        if _covered(day, future_starts, future_ends)
    ]
    return Columns(names, matrix[:n], matrix[n:]), in_horizon


def _year(day: np.datetime64) -> int:
    return int(day.astype("datetime64[Y]").astype("int64")) + 1970


def _covered(day: np.datetime64, starts: np.ndarray, ends: np.ndarray) -> bool:
    import numpy as np

    row = int(np.searchsorted(starts, day, side="right")) - 1
    return row >= 0 and bool(day < ends[row])


def calendar_columns(features: Sequence[str], history: np.ndarray, future: np.ndarray,
                     field: str = "calendar_features") -> Columns:
    """One-hot columns of each calendar feature, the first level of the history dropped."""
    import numpy as np

    seen: set[str] = set()
    for index, feature in enumerate(features):
        if feature not in CALENDAR_FEATURES:
            raise CovariateError(f"{field}[{index}]", "Must be one of: " + ", ".join(CALENDAR_FEATURES), feature)
        if feature in seen:
            raise CovariateError(f"{field}[{index}]", "duplicate calendar feature", feature)
        seen.add(feature)
    names: list[str] = []
    history_columns: list[np.ndarray] = []
    future_columns: list[np.ndarray] = []
    for index, feature in enumerate(features):
        past, ahead = _feature_values(feature, history), _feature_values(feature, future)
        levels = np.unique(past)
        if len(levels) < 2:
            raise CovariateError(f"{field}[{index}]", "takes a single value over the history, so it tells no "
                                 "rows apart", feature, value=_level_name(feature, int(levels[0])))
        names += [f"{feature}={_level_name(feature, int(level))}" for level in levels[1:]]
        history_columns.append((past[:, None] == levels[None, 1:]).astype(np.float64))
        future_columns.append((ahead[:, None] == levels[None, 1:]).astype(np.float64))
    return Columns(names, np.hstack(history_columns), np.hstack(future_columns))


def _feature_values(feature: str, walls: np.ndarray) -> np.ndarray:
    import numpy as np

    days = walls.astype("datetime64[D]")
    if feature == "hour":
        return ((walls - days) // np.timedelta64(1, "h")).astype(np.int64)
    if feature == "day_of_week":  # 1970-01-01 was a Thursday: Monday is 0
        return (days.astype(np.int64) + 3) % 7
    return walls.astype("datetime64[M]").astype(np.int64) % 12 + 1


def _level_name(feature: str, level: int) -> str:
    if feature == "day_of_week":
        return WEEKDAYS[level]
    if feature == "month":
        return MONTHS[level - 1]
    return str(level)
