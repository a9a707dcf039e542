"""The last instant a datetime holds (9999-12-31T23:59:59.999999Z) and the first (0001-01-01T00:00:00Z) bound
every timestamp once its UTC offset is applied; a format error names the accepted form."""

from __future__ import annotations

import pytest

from app.series.instants import epoch_seconds
from app.series.timestamps import (
    TIMESTAMP_FORM,
    UTC_RANGE_ISSUE,
    TimestampError,
    future_timestamps,
    outside_utc_range,
    parse_axis,
)


@pytest.mark.parametrize(("text", "outside"), [
    ("9999-12-31T23:30:00-01:00", True),  # 10000-01-01T00:30:00Z
    ("9999-12-31T23:00:00-01:00", True),  # exactly 10000-01-01T00:00:00Z
    ("9999-12-31T22:59:59.999999-01:00", False),  # the last instant itself
    ("9999-12-31T23:30:00+01:00", False),
    ("9999-12-31T23:59:59Z", False),
    ("9999-12-31T23:59:59", False),
    ("9999-12-31T23:59:59-00:00", False),
    ("0001-01-01T00:30:00+01:00", True),  # 0000-12-31T23:30:00Z
    ("0001-01-01T01:00:00+01:00", False),
    ("0001-01-01T00:30:00-01:00", False),
    ("2026-06-01T12:00:00-12:00", False),
])
def test_outside_utc_range(text: str, outside: bool) -> None:
    assert outside_utc_range(text) is outside


def minutes_to_the_end(count: int) -> list[str]:
    return [f"9999-12-31T{22 + (50 + i) // 60}:{(50 + i) % 60:02d}:00-01:00" for i in range(count)]


def test_instants_past_the_last_one_are_refused_at_the_first() -> None:
    series = minutes_to_the_end(15)  # index 10 is 23:00-01:00, the first instant of year 10000
    with pytest.raises(TimestampError) as caught:
        epoch_seconds(series)
    assert (caught.value.issue, caught.value.index, caught.value.provided) == (UTC_RANGE_ISSUE, 10, series[10])
    assert len(epoch_seconds(series[:10])) == 10
    with pytest.raises(TimestampError) as early:
        epoch_seconds(["0001-01-01T00:30:00+01:00", "0001-01-01T03:30:00+01:00"])
    assert early.value.index == 0


def test_a_forecast_reads_the_wall_clock_so_the_same_series_is_valid_there() -> None:
    # docs/contract.md, section 7: steps are taken on the timestamps as written; a forecast that would pass year
    # 9999 on that clock is refused, as before.
    axis = parse_axis(minutes_to_the_end(15), "Minutes")
    assert future_timestamps(axis, 1) == ["9999-12-31T23:05:00-01:00"]
    with pytest.raises(TimestampError) as caught:
        future_timestamps(axis, 60)
    assert caught.value.issue == "forecast would pass year 9999"


# (A date alone, 2026-01-05, is that day's midnight: docs/contract.md, Timestamps.)
@pytest.mark.parametrize("bad", ["2026-01-05T00:00", "2026-01-05_00:00:00", "yesterday"])
def test_a_format_error_names_the_accepted_form(bad: str) -> None:
    series = [f"2026-01-{day:02d}T00:00:00" for day in range(1, 11)]
    series[4] = bad
    for check in (lambda: parse_axis(series, "Daily"), lambda: epoch_seconds(series)):
        with pytest.raises(TimestampError) as caught:
            check()
        assert (caught.value.issue, caught.value.index) == ("invalid timestamp format", 4)
        assert caught.value.expected == TIMESTAMP_FORM == "YYYY-MM-DDTHH:MM:SS[.ffffff][Z|±HH:MM]"
