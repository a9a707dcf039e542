"""The time axis (docs/contract.md, section 7): validation of input timestamps and their continuation."""

from __future__ import annotations

import calendar
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from app.series.timestamps import FREQUENCIES, TimeAxis, TimestampError, _parse_slow, future_timestamps, parse_axis

FIXED_SECONDS = {"Seconds": 1, "Minutes": 60, "Hours": 3600, "Daily": 86_400, "Weekly": 604_800}
CALENDAR_MONTHS = {"Monthly": 1, "Quarterly": 3, "Yearly": 12}


# --- an independent reference generator, deliberately not sharing code with the module ---------------


def fmt(wall: datetime, digits: int = 0, suffix: str = "") -> str:
    text = wall.replace(tzinfo=None).isoformat(timespec="microseconds" if digits else "seconds")
    if digits:
        text = text[: 20 + digits]
    return text + suffix


def last_day(year: int, month: int) -> int:
    return calendar.monthrange(year, month)[1]


def add_months(start: datetime, months: int, month_end: bool) -> datetime:
    total = start.year * 12 + start.month - 1 + months
    year, month = total // 12, total % 12 + 1
    day = last_day(year, month) if month_end else min(start.day, last_day(year, month))
    return start.replace(year=year, month=month, day=day)


def fixed_series(start: datetime, seconds: int, count: int, digits: int = 0, suffix: str = "") -> list[str]:
    return [fmt(start + timedelta(seconds=seconds * i), digits, suffix) for i in range(count)]


def calendar_series(
    start: datetime, months: int, count: int, month_end: bool = False, digits: int = 0, suffix: str = ""
) -> list[str]:
    return [fmt(add_months(start, months * i, month_end), digits, suffix) for i in range(count)]


def minutes(start: str, step: int, count: int) -> list[str]:
    return fixed_series(datetime.fromisoformat(start), 60 * step, count)


def error_of(timestamps: list[str], frequency: str) -> TimestampError:
    with pytest.raises(TimestampError) as info:
        parse_axis(timestamps, frequency)
    return info.value


def continued(timestamps: list[str], frequency: str, horizon: int) -> list[str]:
    return future_timestamps(parse_axis(timestamps, frequency), horizon)


# --- every frequency, steps 1 and > 1 ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("frequency", "series", "step", "future"),
    [
        (
            "Seconds",
            ["2024-01-01T00:00:58", "2024-01-01T00:00:59", "2024-01-01T00:01:00"],
            1,
            ["2024-01-01T00:01:01", "2024-01-01T00:01:02"],
        ),
        (
            "Seconds",
            ["2024-01-01T00:00:00", "2024-01-01T00:00:15", "2024-01-01T00:00:30"],
            15,
            ["2024-01-01T00:00:45", "2024-01-01T00:01:00"],
        ),
        (
            "Minutes",
            ["2024-01-01T23:50:00", "2024-01-01T23:55:00", "2024-01-02T00:00:00"],
            5,
            ["2024-01-02T00:05:00", "2024-01-02T00:10:00"],
        ),
        (
            "Hours",
            ["2024-12-31T22:00:00", "2024-12-31T23:00:00", "2025-01-01T00:00:00"],
            1,
            ["2025-01-01T01:00:00", "2025-01-01T02:00:00"],
        ),
        (
            "Hours",
            ["2024-01-01T00:00:00", "2024-01-01T06:00:00", "2024-01-01T12:00:00"],
            6,
            ["2024-01-01T18:00:00", "2024-01-02T00:00:00"],
        ),
        (
            "Daily",
            ["2024-02-27T00:00:00", "2024-02-28T00:00:00", "2024-02-29T00:00:00"],
            1,
            ["2024-03-01T00:00:00", "2024-03-02T00:00:00"],
        ),
        (
            "Daily",
            ["2024-01-01T09:30:00", "2024-01-04T09:30:00", "2024-01-07T09:30:00"],
            3,
            ["2024-01-10T09:30:00", "2024-01-13T09:30:00"],
        ),
        (
            "Weekly",
            ["2024-01-01T00:00:00", "2024-01-08T00:00:00", "2024-01-15T00:00:00"],
            1,
            ["2024-01-22T00:00:00", "2024-01-29T00:00:00"],
        ),
        (
            "Weekly",
            ["2024-12-16T00:00:00", "2024-12-30T00:00:00", "2025-01-13T00:00:00"],
            2,
            ["2025-01-27T00:00:00", "2025-02-10T00:00:00"],
        ),
        (
            "Monthly",
            ["2024-10-15T00:00:00", "2024-11-15T00:00:00", "2024-12-15T00:00:00"],
            1,
            ["2025-01-15T00:00:00", "2025-02-15T00:00:00"],
        ),
        (
            "Monthly",
            ["2024-01-01T12:00:00", "2024-07-01T12:00:00", "2025-01-01T12:00:00"],
            6,
            ["2025-07-01T12:00:00", "2026-01-01T12:00:00"],
        ),
        (
            "Quarterly",
            ["2024-01-01T00:00:00", "2024-04-01T00:00:00", "2024-07-01T00:00:00"],
            1,
            ["2024-10-01T00:00:00", "2025-01-01T00:00:00"],
        ),
        (
            "Quarterly",
            ["2024-02-10T00:00:00", "2024-08-10T00:00:00", "2025-02-10T00:00:00"],
            2,
            ["2025-08-10T00:00:00", "2026-02-10T00:00:00"],
        ),
        (
            "Yearly",
            ["2020-06-01T00:00:00", "2021-06-01T00:00:00", "2022-06-01T00:00:00"],
            1,
            ["2023-06-01T00:00:00", "2024-06-01T00:00:00"],
        ),
        (
            "Yearly",
            ["2000-01-01T00:00:00", "2010-01-01T00:00:00", "2020-01-01T00:00:00"],
            10,
            ["2030-01-01T00:00:00", "2040-01-01T00:00:00"],
        ),
    ],
)
def test_valid_series_per_frequency(frequency: str, series: list[str], step: int, future: list[str]) -> None:
    axis = parse_axis(series, frequency)
    assert isinstance(axis, TimeAxis)
    assert (axis.frequency, axis.step) == (frequency, step)
    assert future_timestamps(axis, len(future)) == future


def test_frequencies_constant() -> None:
    assert FREQUENCIES == ("Seconds", "Minutes", "Hours", "Daily", "Weekly", "Monthly", "Quarterly", "Yearly")


def test_long_minutes_series_continues() -> None:
    series = minutes("2024-01-01T00:00:00", 5, 12)
    assert continued(series, "Minutes", 1) == ["2024-01-01T01:00:00"]


# --- format errors --------------------------------------------------------------------------------

BAD_FORMATS = [
    "２０２４-01-01T00:15:00",  # fullwidth digits
    "2024-01-01T00:1٥:00",  # Arabic-Indic digit
    "2024-01-01T00:15",  # missing seconds
    "2024-01-01_00:15:00",  # neither T nor a space between date and time
    "2024-01-01t00:15:00",
    "2024-01-01T00:15:00z",
    "2024-01-01Z",  # a date alone has no suffix
    "2024-01-01+01:00",
    "20240101T001500",
    "2024-1-01T00:15:00",
    " 2024-01-01T00:15:00",
    "2024-01-01T00:15:00 ",
    "2024-01-01T00:15:00\n",
    "2023-02-29T00:15:00",  # not a leap year
    "2024-02-30T00:15:00",
    "2024-04-31T00:15:00",
    "2024-13-01T00:15:00",
    "2024-00-01T00:15:00",
    "0000-01-01T00:15:00",
    "2024-01-01T24:00:00",
    "2024-01-01T00:60:00",
    "2024-01-01T00:15:60",
    "2024-01-01T00:15:00.",
    "2024-01-01T00:15:00.1234567",  # more than 6 fraction digits refused
    "2024-01-01T00:15:00,5",
    "2024-01-01T00:15:00+0100",
    "2024-01-01T00:15:00+01",
    "2024-01-01T00:15:00+24:00",
    "2024-01-01T00:15:00+01:00:00",
    "2024-01-01T00:15:00Z+01:00",
    "+2024-01-01T00:15:00",
    "",
]


@pytest.mark.parametrize("bad", BAD_FORMATS)
def test_invalid_format_named_at_its_index(bad: str) -> None:
    series = minutes("2024-01-01T00:00:00", 5, 10)
    series[3] = bad
    err = error_of(series, "Minutes")
    # A format error names the accepted form (a spacing error names the timestamp expected instead).
    assert (err.index, err.issue, err.provided, err.expected) == (
        3, "invalid timestamp format", bad, "YYYY-MM-DDTHH:MM:SS[.ffffff][Z|±HH:MM]")


def test_a_date_alone_is_that_days_midnight() -> None:
    dates = [f"2024-01-{day:02d}" for day in range(1, 11)]
    full = parse_axis([f"{d}T00:00:00" for d in dates], "Daily")
    assert parse_axis(dates, "Daily") == replace(full, last_text="2024-01-10")
    assert future_timestamps(parse_axis(dates, "Daily"), 2) == ["2024-01-11T00:00:00", "2024-01-12T00:00:00"]
    # Midnight, so inside a series of minutes it is a step back, not a new form.
    series = minutes("2024-01-01T00:00:00", 5, 10)
    series[3] = "2024-01-01"
    assert error_of(series, "Minutes").issue == "timestamps must be strictly increasing"


@pytest.mark.parametrize("bad", ["2024-01-01T00:00:00.1234567", "2024-02-30T00:00:00", "2024-01-01T00:00"])
def test_invalid_first_element(bad: str) -> None:
    series = minutes("2024-01-01T00:00:00", 5, 10)
    series[0] = bad
    assert error_of(series, "Minutes").index == 0


@pytest.mark.parametrize("bad", [None, 20240101, 1.5, ["2024-01-01T00:00:00"]])
def test_non_string_element_is_a_format_error(bad: object) -> None:
    series: list = minutes("2024-01-01T00:00:00", 5, 10)
    series[4] = bad
    err = error_of(series, "Minutes")
    assert (err.index, err.issue) == (4, "invalid timestamp format")


def test_provided_is_truncated() -> None:
    series = minutes("2024-01-01T00:00:00", 5, 10)
    series[2] = "x" * 10_000
    err = error_of(series, "Minutes")
    assert err.index == 2
    assert len(err.provided) <= 64
    assert err.provided.startswith("xxx")


def test_error_type_and_details() -> None:
    series = minutes("2024-01-01T00:00:00", 5, 10)
    series[6] = "2024-01-01T00:31:00"
    err = error_of(series, "Minutes")
    assert isinstance(err, ValueError)
    assert err.details("series[0].timestamps") == {
        "field": "series[0].timestamps",
        "issue": "timestamps must be evenly spaced: expected 2024-01-01T00:30:00",
        "provided": "2024-01-01T00:31:00",
        "index": 6,
        "expected": "2024-01-01T00:30:00",
    }
    assert "index 6" in str(err)


def test_first_defect_by_index_wins_over_a_later_format_error() -> None:
    series = minutes("2024-01-01T00:00:00", 5, 10)
    series[2] = "2024-01-01T00:11:00"
    series[8] = "garbage"
    err = error_of(series, "Minutes")
    assert err.index == 2
    assert err.expected == "2024-01-01T00:10:00"


def test_earlier_format_error_wins_over_later_spacing_error() -> None:
    series = minutes("2024-01-01T00:00:00", 5, 10)
    series[2] = "garbage"
    series[8] = "2024-01-01T00:41:00"
    assert error_of(series, "Minutes").index == 2


# --- suffix forms ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first_suffix", "other_suffix"),
    [("", "Z"), ("Z", ""), ("Z", "+00:00"), ("+00:00", "Z"), ("+01:00", ""), ("", "-05:00")],
)
def test_mixed_forms_refused(first_suffix: str, other_suffix: str) -> None:
    start = datetime(2024, 1, 1)
    series = fixed_series(start, 3600, 10, suffix=first_suffix)
    # Same instant in UTC would be fine value-wise: only the form differs.
    series[5] = fmt(start + timedelta(hours=5), suffix=other_suffix)
    err = error_of(series, "Hours")
    assert err.index == 5
    assert err.issue.startswith("mixed timestamp forms")
    assert err.provided == series[5]


def test_offsets_may_change_value_dst() -> None:
    series = [
        "2024-03-10T00:00:00-05:00",
        "2024-03-10T01:00:00-05:00",
        "2024-03-10T03:00:00-04:00",  # 07:00Z, one hour after 06:00Z
        "2024-03-10T04:00:00-04:00",
    ]
    axis = parse_axis(series, "Hours")
    assert axis.step == 1
    assert future_timestamps(axis, 2) == ["2024-03-10T05:00:00-04:00", "2024-03-10T06:00:00-04:00"]


def test_offsets_compared_in_utc_wall_clock_going_back_is_fine() -> None:
    series = ["2024-01-01T10:00:00+02:00", "2024-01-01T09:00:00+00:00", "2024-01-01T10:00:00+00:00"]
    assert parse_axis(series, "Hours").step == 1


def test_offsets_compared_in_utc_equal_instants_not_increasing() -> None:
    series = ["2024-01-01T10:00:00+00:00", "2024-01-01T11:00:00+01:00", "2024-01-01T12:00:00+01:00"]
    err = error_of(series, "Hours")
    assert (err.index, err.issue) == (1, "timestamps must be strictly increasing")


def test_uneven_expected_written_in_elements_offset_value() -> None:
    series = ["2024-01-01T00:00:00+00:00", "2024-01-01T01:00:00+00:00", "2024-01-01T05:00:00+02:00"]
    err = error_of(series, "Hours")
    assert (err.index, err.expected) == (2, "2024-01-01T04:00:00+02:00")


def test_daily_across_dst_is_fixed_24h_in_utc() -> None:
    series = ["2024-03-09T00:00:00-05:00", "2024-03-10T00:00:00-05:00", "2024-03-11T00:00:00-04:00"]
    err = error_of(series, "Daily")
    assert (err.index, err.expected) == (2, "2024-03-11T01:00:00-04:00")


@pytest.mark.parametrize("suffix", ["", "Z", "+05:30", "-08:00", "-00:00"])
def test_suffix_preserved(suffix: str) -> None:
    series = fixed_series(datetime(2024, 1, 1), 900, 10, suffix=suffix)
    out = continued(series, "Minutes", 3)
    assert out == fixed_series(datetime(2024, 1, 1), 900, 13, suffix=suffix)[10:]


def test_future_uses_offset_of_last_timestamp() -> None:
    series = ["2024-10-27T00:00:00+02:00", "2024-10-27T01:00:00+02:00", "2024-10-27T01:00:00+01:00"]
    assert continued(series, "Hours", 2) == ["2024-10-27T02:00:00+01:00", "2024-10-27T03:00:00+01:00"]


# --- fractions ------------------------------------------------------------------------------------


@pytest.mark.parametrize("digits", [1, 2, 3, 6])
def test_fraction_digits_preserved(digits: int) -> None:
    start = datetime(2024, 1, 1, 0, 0, 0, 500_000)
    series = fixed_series(start, 1, 10, digits=digits, suffix="Z")
    assert continued(series, "Seconds", 2) == fixed_series(start, 1, 12, digits=digits, suffix="Z")[10:]


def test_zero_fraction_kept_as_written() -> None:
    series = fixed_series(datetime(2024, 1, 1), 60, 10, digits=3, suffix="Z")
    assert series[0] == "2024-01-01T00:00:00.000Z"
    assert continued(series, "Minutes", 1) == ["2024-01-01T00:10:00.000Z"]


def test_no_fraction_in_means_none_out() -> None:
    series = minutes("2024-01-01T00:00:00", 1, 10)
    assert "." not in continued(series, "Minutes", 1)[0]


def test_fraction_width_may_vary_output_uses_widest() -> None:
    series = ["2024-01-01T00:00:00", "2024-01-01T00:00:01.000", "2024-01-01T00:00:02.0"]
    assert continued(series, "Seconds", 1) == ["2024-01-01T00:00:03.000"]


def test_fraction_counts_in_spacing() -> None:
    series = ["2024-01-01T00:00:00.5", "2024-01-01T00:00:01.5", "2024-01-01T00:00:02.25"]
    err = error_of(series, "Seconds")
    assert (err.index, err.expected) == (2, "2024-01-01T00:00:02.50")


def test_fractional_gap_is_not_a_whole_step() -> None:
    err = error_of(["2024-01-01T00:00:00", "2024-01-01T00:00:01.5"], "Seconds")
    assert err.index == 1
    assert "not a whole number of seconds" in err.issue


# --- order and spacing ----------------------------------------------------------------------------


@pytest.mark.parametrize("index", [1, 5, 9])
def test_duplicate_not_increasing(index: int) -> None:
    series = minutes("2024-01-01T00:00:00", 5, 10)
    series[index] = series[index - 1]
    err = error_of(series, "Minutes")
    assert (err.index, err.issue) == (index, "timestamps must be strictly increasing")


def test_decreasing_not_increasing() -> None:
    series = minutes("2024-01-01T00:00:00", 5, 10)
    series[5] = "2023-12-31T00:00:00"
    err = error_of(series, "Minutes")
    assert (err.index, err.issue) == (5, "timestamps must be strictly increasing")


def test_reversed_series() -> None:
    series = minutes("2024-01-01T00:00:00", 5, 10)[::-1]
    assert error_of(series, "Minutes").index == 1


@pytest.mark.parametrize(
    ("frequency", "series", "index", "expected"),
    [
        ("Minutes", minutes("2024-01-01T00:00:00", 5, 7) + ["2024-01-01T00:40:00"], 7, "2024-01-01T00:35:00"),
        (
            "Weekly",
            ["2024-01-01T00:00:00", "2024-01-15T00:00:00", "2024-01-29T00:00:00", "2024-02-05T00:00:00"],
            3,
            "2024-02-12T00:00:00",
        ),
        (
            "Monthly",
            ["2024-01-15T00:00:00Z", "2024-02-15T00:00:00Z", "2024-03-16T00:00:00Z"],
            2,
            "2024-03-15T00:00:00Z",
        ),
        (
            "Monthly",
            ["2024-01-15T00:00:00", "2024-02-15T00:00:00", "2024-03-15T01:00:00"],
            2,
            "2024-03-15T00:00:00",
        ),
        (
            "Quarterly",
            ["2024-01-01T00:00:00", "2024-04-01T00:00:00", "2024-08-01T00:00:00"],
            2,
            "2024-07-01T00:00:00",
        ),
    ],
)
def test_uneven_spacing_names_index_and_expected(frequency: str, series: list[str], index: int, expected: str) -> None:
    err = error_of(series, frequency)
    assert (err.index, err.expected) == (index, expected)
    assert err.issue == f"timestamps must be evenly spaced: expected {expected}"
    assert err.provided == series[index]


@pytest.mark.parametrize(
    ("frequency", "second", "unit_name", "expected"),
    [
        ("Seconds", "2024-01-01T00:00:00.5", "seconds", "2024-01-01T00:00:01.0"),
        ("Minutes", "2024-01-01T00:01:30", "minutes", "2024-01-01T00:02:00"),
        ("Minutes", "2024-01-01T00:00:20", "minutes", "2024-01-01T00:01:00"),
        ("Hours", "2024-01-01T01:30:00", "hours", "2024-01-01T02:00:00"),
        ("Daily", "2024-01-02T12:00:00", "days", "2024-01-03T00:00:00"),
        ("Weekly", "2024-01-11T00:00:00", "weeks", "2024-01-08T00:00:00"),
        ("Monthly", "2024-01-20T00:00:00", "months", "2024-02-01T00:00:00"),
        ("Monthly", "2024-02-02T00:00:00", "months", "2024-02-01T00:00:00"),
        ("Quarterly", "2024-03-01T00:00:00", "quarters", "2024-04-01T00:00:00"),
        ("Yearly", "2025-07-01T00:00:00", "years", "2026-01-01T00:00:00"),
    ],
)
def test_non_whole_first_gap(frequency: str, second: str, unit_name: str, expected: str) -> None:
    err = error_of(["2024-01-01T00:00:00", second, "2030-01-01T00:00:00"], frequency)
    assert err.index == 1
    assert err.issue == f"the gap between the first two timestamps is not a whole number of {unit_name}"
    assert err.expected == expected


def test_calendar_time_of_day_must_stay() -> None:
    err = error_of(["2024-01-01T00:00:00", "2024-02-01T06:00:00"], "Monthly")
    assert (err.index, err.expected) == (1, "2024-02-01T00:00:00")


# --- calendar clamping and month ends -------------------------------------------------------------


def dates(*days: str, suffix: str = "") -> list[str]:
    return [f"{day}T00:00:00{suffix}" for day in days]


def test_month_end_series_from_brief() -> None:
    series = dates("2024-01-31", "2024-02-29", "2024-03-31", "2024-04-30")
    axis = parse_axis(series, "Monthly")
    assert axis.step == 1
    assert future_timestamps(axis, 3) == dates("2024-05-31", "2024-06-30", "2024-07-31")


def test_month_end_series_starting_on_short_month() -> None:
    series = dates("2023-02-28", "2023-03-31", "2023-04-30", "2023-05-31")
    assert continued(series, "Monthly", 2) == dates("2023-06-30", "2023-07-31")


def test_31st_clamps_and_comes_back() -> None:
    series = dates("2024-01-31", "2024-02-29", "2024-03-31")
    assert continued(series, "Monthly", 4) == dates("2024-04-30", "2024-05-31", "2024-06-30", "2024-07-31")


def test_31st_continues_across_year_end_and_february() -> None:
    series = dates("2024-09-30", "2024-10-31")
    assert continued(series, "Monthly", 4) == dates("2024-11-30", "2024-12-31", "2025-01-31", "2025-02-28")


def test_30th_clamps_and_comes_back() -> None:
    series = dates("2024-01-30", "2024-02-29", "2024-03-30")
    assert continued(series, "Monthly", 2) == dates("2024-04-30", "2024-05-30")


def test_30th_series_is_not_a_month_end_series() -> None:
    err = error_of(dates("2024-01-30", "2024-02-29", "2024-03-31"), "Monthly")
    assert (err.index, err.expected) == (2, "2024-03-30T00:00:00")


def test_clamp_does_not_drift() -> None:
    # Computing from the previous element would give 03-29 after 02-29.
    err = error_of(dates("2024-01-31", "2024-02-29", "2024-03-29"), "Monthly")
    assert (err.index, err.expected) == (2, "2024-03-31T00:00:00")


def test_month_end_broken_later() -> None:
    err = error_of(dates("2024-01-31", "2024-02-29", "2024-03-31", "2024-04-29"), "Monthly")
    assert (err.index, err.expected) == (3, "2024-04-30T00:00:00")


def test_month_end_series_from_the_30th_broken_later() -> None:
    err = error_of(dates("2023-04-30", "2023-05-31", "2023-06-30", "2023-07-30"), "Monthly")
    assert (err.index, err.expected) == (3, "2023-07-31T00:00:00")


@pytest.mark.parametrize(
    ("second", "expected"),
    [
        ("2024-05-29T00:00:00", "2024-05-30T00:00:00"),  # not a month end: day of month rule
        ("2024-05-31T01:00:00", "2024-05-31T00:00:00"),  # a month end: month end rule
    ],
)
def test_second_element_picks_rule_for_expected(second: str, expected: str) -> None:
    err = error_of(["2024-04-30T00:00:00", second], "Monthly")
    assert (err.index, err.expected) == (1, expected)


def test_quarterly_on_month_ends() -> None:
    series = dates("2023-03-31", "2023-06-30", "2023-09-30", "2023-12-31", "2024-03-31")
    axis = parse_axis(series, "Quarterly")
    assert axis.step == 1
    assert future_timestamps(axis, 4) == dates("2024-06-30", "2024-09-30", "2024-12-31", "2025-03-31")


def test_quarterly_on_the_30th_starting_on_a_month_end() -> None:
    # 11-30 is a month end and so is 02-28, but 05-30 shows the series is on the 30th.
    series = dates("2024-11-30", "2025-02-28", "2025-05-30")
    assert continued(series, "Quarterly", 3) == dates("2025-08-30", "2025-11-30", "2026-02-28")


def test_ambiguous_series_prefers_month_end() -> None:
    series = dates("2024-11-30", "2025-02-28")
    assert continued(series, "Quarterly", 1) == dates("2025-05-31")


def test_yearly_feb_29_clamps_to_feb_28_and_returns() -> None:
    series = dates("2020-02-29", "2021-02-28", "2022-02-28", "2023-02-28")
    assert continued(series, "Yearly", 3) == dates("2024-02-29", "2025-02-28", "2026-02-28")


def test_yearly_feb_28_series_stays_on_28() -> None:
    series = dates("2021-02-28", "2022-02-28", "2023-02-28", "2024-02-28")
    assert continued(series, "Yearly", 2) == dates("2025-02-28", "2026-02-28")


def test_yearly_feb_29_with_missing_clamp_refused() -> None:
    err = error_of(dates("2020-02-29", "2021-03-01"), "Yearly")
    assert (err.index, err.expected) == (1, "2021-02-28T00:00:00")


def test_monthly_month_ends_on_local_wall_clock_with_offset() -> None:
    series = dates("2024-01-31", "2024-02-29", "2024-03-31", suffix="+02:00")
    assert continued(series, "Monthly", 1) == dates("2024-04-30", suffix="+02:00")


def test_monthly_keeps_local_time_across_offset_change() -> None:
    series = ["2024-02-01T00:00:00+01:00", "2024-03-01T00:00:00+01:00", "2024-04-01T00:00:00+02:00"]
    assert continued(series, "Monthly", 1) == ["2024-05-01T00:00:00+02:00"]


def test_calendar_with_fraction_and_z() -> None:
    series = [f"2024-0{m}-10T08:00:00.25Z" for m in range(1, 5)]
    assert continued(series, "Monthly", 1) == ["2024-05-10T08:00:00.25Z"]


# --- year 9999 ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("frequency", "series"),
    [
        ("Daily", dates("9999-12-29", "9999-12-30")),
        ("Hours", ["9999-12-31T22:00:00Z", "9999-12-31T23:00:00Z"]),
        ("Hours", ["9999-12-31T21:00:00-05:00", "9999-12-31T23:00:00-05:00"]),
        ("Monthly", dates("9999-10-31", "9999-11-30")),
        ("Yearly", dates("9997-01-01", "9998-01-01")),
    ],
)
def test_forecast_past_9999_raises(frequency: str, series: list[str]) -> None:
    axis = parse_axis(series, frequency)
    with pytest.raises(TimestampError) as info:
        future_timestamps(axis, 3)
    assert info.value.issue == "forecast would pass year 9999"
    assert info.value.index == len(series) - 1
    assert info.value.provided == series[-1]


def test_forecast_up_to_9999_is_fine() -> None:
    series = dates("9999-12-29", "9999-12-30")
    assert continued(series, "Daily", 1) == dates("9999-12-31")


def test_huge_step_validation_past_9999() -> None:
    err = error_of(dates("0001-01-01", "5001-01-01", "9999-01-01"), "Yearly")
    assert err.index == 2
    assert err.expected is None


def test_year_one_with_offset() -> None:
    series = ["0001-01-01T00:00:00+05:00", "0001-01-01T01:00:00+05:00", "0001-01-01T02:00:00+05:00"]
    assert continued(series, "Hours", 1) == ["0001-01-01T03:00:00+05:00"]


# --- the largest series the service accepts (speed is measured by `make bench`, not asserted here) ---


@pytest.mark.parametrize(
    ("frequency", "suffix", "seconds"),
    [("Minutes", "", 300), ("Seconds", "Z", 1), ("Hours", "+05:30", 3600)],
)
def test_100k_fixed_series_parse_and_continue(frequency: str, suffix: str, seconds: int) -> None:
    series = fixed_series(datetime(2000, 1, 1), seconds, 100_001, suffix=suffix)
    axis = parse_axis(series[:-1], frequency)
    assert axis.count == 100_000
    assert future_timestamps(axis, 1) == series[-1:]


def test_100k_monthly_month_ends_parse_and_continue() -> None:
    series = calendar_series(datetime(1, 1, 31), 1, 100_001, month_end=True)
    axis = parse_axis(series[:-1], "Monthly")
    assert axis.month_end
    assert future_timestamps(axis, 1) == series[-1:]


# --- properties: generate, parse back, continue ---------------------------------------------------

SUFFIXES = st.sampled_from(["", "Z", "+00:00", "+05:30", "-03:00", "+14:00"])


@st.composite
def fixed_cases(draw: st.DrawFn) -> tuple[str, int, list[str]]:
    frequency = draw(st.sampled_from(sorted(FIXED_SECONDS)))
    step = draw(st.integers(1, 500))
    count = draw(st.integers(2, 40))
    digits = draw(st.integers(0, 6))
    scale = 10 ** (6 - digits)
    start = draw(st.datetimes(datetime(1, 1, 2), datetime(9000, 1, 1))).replace(microsecond=0)
    start = start.replace(microsecond=draw(st.integers(0, 999_999 // scale)) * scale if digits else 0)
    suffix = draw(SUFFIXES)
    return frequency, step, fixed_series(start, FIXED_SECONDS[frequency] * step, count, digits, suffix)


@st.composite
def calendar_cases(draw: st.DrawFn) -> tuple[str, int, list[str], list[str]]:
    """(frequency, step, series, the series the parser should continue a month-end-looking prefix with)"""
    frequency = draw(st.sampled_from(sorted(CALENDAR_MONTHS)))
    step = draw(st.integers(1, 30))
    count = draw(st.integers(2, 30))
    year = draw(st.integers(1, 8000))
    month = draw(st.integers(1, 12))
    day = draw(st.integers(1, last_day(year, month)))
    clock = draw(st.times()).replace(microsecond=0)
    start = datetime.combine(datetime(year, month, day).date(), clock)
    month_end = day == last_day(year, month) and draw(st.booleans())
    suffix = draw(SUFFIXES)
    months = CALENDAR_MONTHS[frequency] * step
    series = calendar_series(start, months, count, month_end, suffix=suffix)
    as_month_end = calendar_series(start, months, count, day == last_day(year, month), suffix=suffix)
    return frequency, step, series, as_month_end


def is_month_end_text(text: str) -> bool:
    stamp = datetime.fromisoformat(text[:19])
    return stamp.day == last_day(stamp.year, stamp.month)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fixed_cases(), st.data())
def test_fixed_round_trip(case: tuple[str, int, list[str]], data: st.DataObject) -> None:
    frequency, step, series = case
    axis = parse_axis(series, frequency)
    assert axis.step == step
    assert _parse_slow(series, frequency) == axis
    prefix = data.draw(st.integers(2, len(series)))
    rest = series[prefix:]
    assert future_timestamps(parse_axis(series[:prefix], frequency), len(rest)) == rest


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calendar_cases(), st.data())
def test_calendar_round_trip(case: tuple[str, int, list[str], list[str]], data: st.DataObject) -> None:
    frequency, step, series, as_month_end = case
    axis = parse_axis(series, frequency)
    assert axis.step == step
    # The exact walk (used to explain defects) must agree with the fast path on valid data.
    assert _parse_slow(series, frequency) == axis
    prefix = data.draw(st.integers(2, len(series)))
    # A prefix entirely on month ends cannot tell "day of month" from "month end": month end wins.
    reference = as_month_end if all(map(is_month_end_text, series[:prefix])) else series
    rest = reference[prefix:]
    assert future_timestamps(parse_axis(series[:prefix], frequency), len(rest)) == rest


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(sorted(FIXED_SECONDS)),
    st.integers(1, 100),
    st.lists(st.integers(-12 * 60, 14 * 60), min_size=2, max_size=30),
    st.datetimes(datetime(2, 1, 1), datetime(9000, 1, 1)),
)
def test_varying_offsets_round_trip(frequency: str, step: int, offsets: list[int], start: datetime) -> None:
    """Each element in its own offset: instants are what count; the forecast uses the last offset."""
    start = start.replace(microsecond=0, tzinfo=UTC)
    gap = timedelta(seconds=FIXED_SECONDS[frequency] * step)
    instants = [start + gap * i for i in range(len(offsets))]
    series = [
        instant.astimezone(timezone(timedelta(minutes=offset))).isoformat()
        for instant, offset in zip(instants, offsets, strict=True)
    ]
    axis = parse_axis(series, frequency)
    assert axis.step == step
    out = future_timestamps(axis, 3)
    assert [datetime.fromisoformat(text) for text in out] == [instants[-1] + gap * j for j in (1, 2, 3)]
    assert all(text[-6:] == series[-1][-6:] for text in out)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(fixed_cases(), calendar_cases()), st.data())
def test_a_broken_element_is_named(case: tuple, data: st.DataObject) -> None:
    frequency, series = case[0], list(case[2])
    assume(len(series) >= 3)
    # From index 2 on the step is already known, so any move of an element breaks it right there.
    index = data.draw(st.integers(2, len(series) - 1))
    stamp = datetime.fromisoformat(series[index])
    shift = data.draw(st.sampled_from([timedelta(seconds=1), timedelta(seconds=-1), timedelta(hours=1)]))
    moved = stamp + shift
    suffix = series[index][19:].lstrip(".0123456789")
    digits = len(series[index]) - 19 - len(suffix)
    series[index] = fmt(moved, max(0, digits - 1), suffix)
    err = error_of(series, frequency)
    assert err.index == index
    # The slow path is the reference for which defect is reported.
    with pytest.raises(TimestampError) as slow:
        _parse_slow(series, frequency)
    assert (slow.value.index, slow.value.issue, slow.value.expected) == (err.index, err.issue, err.expected)


@settings(max_examples=200, deadline=None)
@given(fixed_cases(), st.data())
def test_format_defect_slow_path_agrees(case: tuple[str, int, list[str]], data: st.DataObject) -> None:
    frequency, _step, series = case
    index = data.draw(st.integers(0, len(series) - 1))
    series = list(series)
    series[index] = series[index].replace("T", data.draw(st.sampled_from(["_", "t", "TT"])))
    err = error_of(series, frequency)
    assert (err.index, err.issue) == (index, "invalid timestamp format")
