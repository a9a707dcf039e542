"""From what users hold (a pandas Series, datetimes, strings) to the service's request form, and back.

The service takes ``YYYY-MM-DDTHH:MM:SS``, optionally with a fraction and ``Z`` or ``±HH:MM``, one form per
series. Naive datetimes are written without a suffix, datetimes in UTC with ``Z``, datetimes in any other
zone with their own offset (so a Europe/Berlin series switches from +01:00 to +02:00 at the DST change,
which the service accepts for fixed-duration frequencies because it compares them in UTC). Strings are
sent exactly as given.
"""

from __future__ import annotations

import calendar
import importlib
import math
import numbers
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone, tzinfo
from decimal import Decimal
from typing import Any

FREQUENCIES: tuple[str, ...] = ("Seconds", "Minutes", "Hours", "Daily", "Weekly", "Monthly", "Quarterly", "Yearly")
# Largest first: a fixed spacing is named after the largest unit it is a whole number of.
_FIXED_UNITS: tuple[tuple[str, int], ...] = (
    ("Weekly", 7 * 86400),
    ("Daily", 86400),
    ("Hours", 3600),
    ("Minutes", 60),
    ("Seconds", 1),
)
_PANDAS_CALENDAR: dict[str, str] = {
    "MonthEnd": "Monthly",
    "MonthBegin": "Monthly",
    "QuarterEnd": "Quarterly",
    "QuarterBegin": "Quarterly",
    "YearEnd": "Yearly",
    "YearBegin": "Yearly",
    "Week": "Weekly",
}
_UTC_NAMES = frozenset({"UTC", "Etc/UTC", "UCT", "Etc/UCT", "Zulu", "Etc/Zulu", "Universal", "Etc/Universal"})


@dataclass(frozen=True)
class EncodedSeries:
    timestamps: list[str]
    values: list[float | None]
    frequency: str
    # The input's time zone when every timestamp carried the same one; results are given back in it.
    tz: tzinfo | None


def encode_series(series: Any, frequency: str | None, *, gaps_allowed: bool = False) -> EncodedSeries:
    """``gaps_allowed``: the endpoint accepts missing rows and jitter (anomalies), so when the spacing is not
    even the frequency is named after the typical spacing instead of refused."""
    raw_timestamps, values, pandas_index = _split(series)
    texts, datetimes, tz = _format_timestamps(raw_timestamps)
    if frequency is not None:
        resolved = normalize_frequency(frequency)
    else:
        from_pandas = _pandas_frequency(pandas_index) if pandas_index is not None else None
        if from_pandas is not None:
            resolved = from_pandas
        else:
            parsed = datetimes if datetimes is not None else _parse_texts(texts)
            try:
                resolved = infer_frequency(parsed)
            except ValueError:
                if not gaps_allowed or len(parsed) < 2:
                    raise
                resolved = typical_frequency(parsed)
    if pandas_index is not None and pandas_index.tz is not None:
        tz = pandas_index.tz  # pytz gives every element its own tzinfo; the index has the zone itself
    return EncodedSeries(timestamps=texts, values=values, frequency=resolved, tz=tz)


def encode_points(series: Any) -> tuple[list[str], list[float | None], tzinfo | None]:
    """Timestamps and values in the service's form, for endpoints that need no frequency (monitor points)."""
    raw_timestamps, values, pandas_index = _split(series)
    texts, _, tz = _format_timestamps(raw_timestamps)
    if pandas_index is not None and pandas_index.tz is not None:
        tz = pandas_index.tz
    return texts, values, tz


def _split(series: Any) -> tuple[Sequence[Any], list[float | None], Any]:
    pd = sys.modules.get("pandas")
    if pd is not None and isinstance(series, pd.DataFrame):
        if series.shape[1] != 1:
            raise TypeError(
                f"a DataFrame must have exactly one value column to forecast, not {series.shape[1]}; "
                "pass the column (df['name'])"
            )
        series = series.iloc[:, 0]
    if pd is not None and isinstance(series, pd.Series):
        index = series.index
        if isinstance(index, pd.PeriodIndex):
            index = index.to_timestamp(how="start")
        if not isinstance(index, pd.DatetimeIndex):
            raise TypeError(
                f"a pandas Series needs a DatetimeIndex (or PeriodIndex), not {type(index).__name__}; "
                "set one with series.index = pd.to_datetime(...)"
            )
        return _index_datetimes(index), _numbers(series.to_numpy()), index
    if isinstance(series, tuple | list) and len(series) == 2:
        timestamps, values = series
        if pd is not None and isinstance(timestamps, pd.DatetimeIndex):
            return _index_datetimes(timestamps), _numbers(values), timestamps
        if isinstance(timestamps, str | bytes) or not isinstance(timestamps, Iterable):
            raise TypeError("timestamps must be a sequence (list, tuple, array or DatetimeIndex)")
        return list(timestamps), _numbers(values), None
    raise TypeError(
        "series must be a pandas Series with a DatetimeIndex, a one-column DataFrame, or a pair "
        f"(timestamps, values); got {type(series).__name__}"
    )


def _index_datetimes(index: Any) -> list[Any]:
    if index.hasnans:
        position = int(index.isna().argmax())
        raise ValueError(f"timestamp at position {position} is missing (NaT)")
    if (index.nanosecond != 0).any():
        position = int((index.nanosecond != 0).argmax())
        raise ValueError(
            f"timestamp at position {position} has nanoseconds; the service takes at most microseconds"
        )
    return list(index.to_pydatetime())


def _numbers(values: Any) -> list[float | None]:
    """Floats for the JSON body; NaN and None become null, which the service reports with its index (422)."""
    dtype = getattr(values, "dtype", None)
    if dtype is not None and dtype.kind in "fiu":
        return [None if math.isnan(v) else v for v in values.astype("float64").tolist()]
    out: list[float | None] = []
    for position, value in enumerate(values):
        if value is None or _is_missing(value):
            out.append(None)
        elif isinstance(value, bool) or not isinstance(value, numbers.Real | Decimal):
            raise TypeError(f"values[{position}] is {type(value).__name__} {value!r}; values must be numbers")
        else:
            number = float(value)
            out.append(None if math.isnan(number) else number)
    return out


def _is_missing(value: Any) -> bool:
    pd = sys.modules.get("pandas")
    if pd is not None and (value is pd.NA or value is pd.NaT):
        return True
    return isinstance(value, float) and math.isnan(value)


def _to_datetime(value: Any, position: int) -> datetime:
    pd = sys.modules.get("pandas")
    if pd is not None and value is pd.NaT:
        raise ValueError(f"timestamp at position {position} is missing (NaT)")
    if isinstance(value, datetime):
        if getattr(value, "nanosecond", 0):
            raise ValueError(f"timestamp at position {position} has nanoseconds; the service takes microseconds")
        if pd is not None and isinstance(value, pd.Timestamp):
            converted: datetime = value.to_pydatetime()
            return converted
        return value
    if isinstance(value, date):
        return datetime.combine(value, time())
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.datetime64):
        if np.isnat(value):
            raise ValueError(f"timestamp at position {position} is missing (NaT)")
        micro = value.astype("datetime64[us]")
        if micro != value:
            raise ValueError(f"timestamp at position {position} has nanoseconds; the service takes microseconds")
        item: datetime = micro.item()
        return item
    raise TypeError(
        f"timestamps[{position}] is {type(value).__name__}; use datetime, pandas Timestamp, numpy datetime64 "
        "or the service's text form"
    )


def _format_timestamps(raw: Sequence[Any]) -> tuple[list[str], list[datetime] | None, tzinfo | None]:
    """Text for the service, the datetimes (None when the input was text) and the input's single time zone."""
    if all(isinstance(value, str) for value in raw):
        return list(raw), None, None
    if any(isinstance(value, str) for value in raw):
        raise TypeError("timestamps mix text and datetimes; use one kind")
    datetimes = [_to_datetime(value, position) for position, value in enumerate(raw)]
    if not datetimes:
        return [], [], None
    forms = [_suffix_form(value) for value in datetimes]
    if len(set(forms)) > 1:
        position = next(i for i, form in enumerate(forms) if form != forms[0])
        raise ValueError(
            f"timestamps mix forms ({_FORM_NAMES[forms[0]]} at position 0, {_FORM_NAMES[forms[position]]} at "
            f"position {position}); the service needs one form per series"
        )
    with_fraction = any(value.microsecond for value in datetimes)
    texts = [_format(value, forms[0], with_fraction, position) for position, value in enumerate(datetimes)]
    zones = {value.tzinfo for value in datetimes}
    single_zone = zones.pop() if len(zones) == 1 else None
    return texts, datetimes, single_zone


_FORM_NAMES = {"": "no time zone", "Z": "UTC", "offset": "a UTC offset"}


def _suffix_form(value: datetime) -> str:
    if value.tzinfo is None or value.utcoffset() is None:
        return ""
    return "Z" if _is_utc_zone(value.tzinfo, value) else "offset"


def _is_utc_zone(zone: tzinfo, at: datetime) -> bool:
    """UTC itself is written Z; a zone that only happens to be at +00:00 (Europe/London in winter) keeps
    writing its offset, so one series never mixes Z and +00:00."""
    if isinstance(zone, timezone):
        return zone.utcoffset(at) == timedelta(0)
    for attribute in ("key", "zone"):  # zoneinfo.ZoneInfo, pytz
        name = getattr(zone, attribute, None)
        if isinstance(name, str):
            return name in _UTC_NAMES
    return type(zone).__name__ == "tzutc"  # dateutil


def _format(value: datetime, form: str, with_fraction: bool, position: int) -> str:
    text = (
        f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
        f"T{value.hour:02d}:{value.minute:02d}:{value.second:02d}"
    )
    if with_fraction:
        text += f".{value.microsecond:06d}"
    if form == "Z":
        return text + "Z"
    if form == "offset":
        offset = value.utcoffset()
        assert offset is not None
        seconds = int(offset.total_seconds())
        if seconds % 60 or offset.microseconds:
            raise ValueError(f"timestamp at position {position} has a UTC offset with seconds ({offset})")
        sign = "+" if seconds >= 0 else "-"
        hours, minutes = divmod(abs(seconds) // 60, 60)
        return f"{text}{sign}{hours:02d}:{minutes:02d}"
    return text


def _parse_texts(texts: list[str]) -> list[datetime]:
    out = []
    for position, text in enumerate(texts):
        try:
            out.append(datetime.fromisoformat(text))
        except ValueError as exc:
            raise ValueError(
                f"cannot infer the frequency: timestamp at position {position} ({text[:40]!r}) is not ISO 8601; "
                "pass frequency="
            ) from exc
    return out


def normalize_frequency(frequency: str) -> str:
    """A service frequency name (any case) or, with pandas installed, a pandas alias such as "h" or "5min"."""
    for name in FREQUENCIES:
        if frequency.strip().lower() == name.lower():
            return name
    pd = _optional_pandas()
    if pd is not None:
        try:
            offset = pd.tseries.frequencies.to_offset(frequency)
        except ValueError:
            offset = None
        mapped = _from_pandas_offset(offset) if offset is not None else None
        if mapped is not None:
            return mapped
    raise ValueError(f"unknown frequency {frequency!r}; use one of {', '.join(FREQUENCIES)}")


def _optional_pandas() -> Any:
    try:
        return importlib.import_module("pandas")
    except ImportError:
        return None


def _pandas_frequency(index: Any) -> str | None:
    """The index's own freq, else pandas' inference, mapped to a service frequency; None if neither helps."""
    offset = getattr(index, "freq", None)
    if offset is None and len(index) >= 3:
        import pandas as pd

        try:
            alias = pd.infer_freq(index)
        except (TypeError, ValueError):
            alias = None
        offset = pd.tseries.frequencies.to_offset(alias) if alias else None
    if offset is None:
        return None
    mapped = _from_pandas_offset(offset)
    if mapped is None:
        raise ValueError(
            f"the index's frequency {offset.freqstr!r} is not evenly spaced in any unit the service knows "
            f"({', '.join(FREQUENCIES)}); resample it or pass frequency="
        )
    return mapped


def _from_pandas_offset(offset: Any) -> str | None:
    name = type(offset).__name__
    if name in _PANDAS_CALENDAR:
        return _PANDAS_CALENDAR[name]
    if name == "Day":  # a Tick in pandas 2, a calendar day later
        return _fixed_unit(offset.n * 86400)
    try:
        nanos = offset.nanos  # fixed-duration offsets (Tick) only
    except (AttributeError, ValueError, TypeError):
        return None
    if nanos <= 0 or nanos % 1_000_000_000:
        return None
    return _fixed_unit(nanos // 1_000_000_000)


def _fixed_unit(seconds: int) -> str | None:
    for name, unit in _FIXED_UNITS:
        if seconds % unit == 0:
            return name
    return None


def infer_frequency(datetimes: list[datetime]) -> str:
    """The frequency of evenly spaced timestamps: a fixed duration (compared in UTC) or whole calendar months
    (as written: month ends and a fixed day of month both count)."""
    if len(datetimes) < 2:
        raise ValueError("cannot infer the frequency from fewer than 2 timestamps; pass frequency=")
    months = _month_step(datetimes)
    if months is not None:
        return "Yearly" if months % 12 == 0 else "Quarterly" if months % 3 == 0 else "Monthly"
    instants = [_utc(value) for value in datetimes]
    steps = {later - earlier for earlier, later in zip(instants, instants[1:], strict=False)}
    if len(steps) == 1:
        (step,) = steps
        seconds = step.total_seconds()
        if seconds > 0 and seconds == int(seconds):
            unit = _fixed_unit(int(seconds))
            if unit is not None:
                return unit
    raise ValueError(
        "cannot infer the frequency: the timestamps are not evenly spaced in seconds, minutes, hours, days, "
        "weeks, months, quarters or years; pass frequency= and the service will name the first bad timestamp"
    )


# Calendar spacings, in days, told apart by their typical gap when rows are missing.
_CALENDAR_DAYS: tuple[tuple[str, float], ...] = (("Yearly", 365.25), ("Quarterly", 91.31), ("Monthly", 30.44))


def typical_frequency(datetimes: list[datetime]) -> str:
    """The unit nearest the median spacing (on a log scale), for series with gaps or jitter: 5-minute data is
    Minutes, hourly data a few seconds off the hour is Hours, monthly data with a missing month is Monthly."""
    instants = sorted(_utc(value) for value in datetimes)
    gaps = sorted((later - earlier).total_seconds() for earlier, later in zip(instants, instants[1:], strict=False))
    median = gaps[len(gaps) // 2]
    if median <= 0:
        raise ValueError("cannot infer the frequency: the timestamps are not increasing; pass frequency=")
    units = [(name, float(size)) for name, size in _FIXED_UNITS]
    units += [(name, days * 86400) for name, days in _CALENDAR_DAYS]
    return min(units, key=lambda unit: abs(math.log(median / unit[1])))[0]


def _utc(value: datetime) -> datetime:
    offset = value.utcoffset()
    return value.replace(tzinfo=None) - offset if offset is not None else value


def _month_step(datetimes: list[datetime]) -> int | None:
    """Whole calendar months between every pair, on one day of month (or on month ends) and time of day."""
    times = {(value.hour, value.minute, value.second, value.microsecond) for value in datetimes}
    if len(times) != 1:
        return None
    days = {value.day for value in datetimes}
    if len(days) != 1 and not all(value.day == calendar.monthrange(value.year, value.month)[1] for value in datetimes):
        return None
    ordinals = [value.year * 12 + value.month for value in datetimes]
    steps = {later - earlier for earlier, later in zip(ordinals, ordinals[1:], strict=False)}
    if len(steps) != 1:
        return None
    (step,) = steps
    return step if step > 0 else None
