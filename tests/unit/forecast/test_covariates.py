"""design_matrix: covariates, holidays and calendar features turned into the design columns the models take."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest

from app.errors import InvalidInput
from app.forecast.calendar import HolidaySpec, walls_from_texts
from app.forecast.covariates import (
    MAX_CATEGORIES,
    MAX_COVARIATES,
    MAX_DESIGN_COLUMNS,
    CovariateError,
    CovariateInput,
    design_matrix,
)


def daily(start: datetime, count: int) -> list[datetime]:
    return [start + timedelta(days=i) for i in range(count)]


def hourly(start: datetime, count: int) -> list[datetime]:
    return [start + timedelta(hours=i) for i in range(count)]


def monthly(year: int, month: int, count: int) -> list[datetime]:
    return [datetime(year + (month - 1 + i) // 12, (month - 1 + i) % 12 + 1, 1) for i in range(count)]


def build(covariates: list[CovariateInput], history: list[datetime] | None = None,
          future: list[datetime] | None = None, **kwargs: Any) -> Any:
    history = history or daily(datetime(2026, 1, 1), 30)
    future = future or daily(history[-1] + timedelta(days=1), 5)
    options: dict[str, Any] = {"holidays": None, "calendar": ()}
    options.update(kwargs)
    return design_matrix(covariates, history_timestamps=history, future_timestamps=future, horizon=len(future),
                         **options)


def refusal(covariates: list[CovariateInput], **kwargs: Any) -> dict[str, Any]:
    with pytest.raises(CovariateError) as raised:
        build(covariates, **kwargs)
    assert isinstance(raised.value, InvalidInput)  # a 422 through app.web.errors, like every value rule
    return raised.value.details or {}


# --- covariates --------------------------------------------------------------------------------------------------


def test_a_numeric_covariate_is_one_column_known_ahead() -> None:
    matrix, in_horizon = build([CovariateInput("price", [float(i) for i in range(30)], [1, 2, 3, 4, 5])])
    assert matrix.names == ("price",)
    assert matrix.past_only == (False,)
    assert matrix.history.shape == (30, 1) and matrix.history.dtype == np.float64
    assert matrix.history[:, 0].tolist() == [float(i) for i in range(30)]
    assert matrix.future[:, 0].tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert in_horizon == []


def test_a_door_may_hold_values_as_numpy_arrays_and_timestamps_as_texts() -> None:
    texts = [f"2026-01-{day:02d}T00:00:00Z" for day in range(1, 31)]
    matrix, in_horizon = design_matrix(
        [CovariateInput("price", np.arange(30.0), np.ones(1)), CovariateInput("k", ("a", "b") * 15, None)],
        holidays=HolidaySpec("US", window=0), calendar=(), history_timestamps=texts,
        future_timestamps=["2026-01-31T00:00:00Z"], horizon=1)
    assert matrix.names == ("price", "k=b", "holiday")
    assert matrix.history[0].tolist() == [0.0, 0.0, 1.0]  # New Year's Day
    assert in_horizon == []


def test_a_past_only_covariate_has_nan_future_rows() -> None:
    matrix, _ = build([CovariateInput("footfall", [1.0] * 15 + [2.0] * 15, None)])
    assert matrix.past_only == (True,)
    assert matrix.future.shape == (5, 1) and np.isnan(matrix.future).all()
    assert np.isfinite(matrix.history).all()


def test_a_categorical_covariate_is_one_hot_with_its_first_sorted_value_dropped() -> None:
    history = ["sun", "rain", "fog"] * 10
    matrix, _ = build([CovariateInput("weather", history, ["rain", "fog", "sun", "sun", "rain"])])
    assert matrix.names == ("weather=rain", "weather=sun")  # "fog" is the reference
    assert matrix.history[:3].tolist() == [[0.0, 1.0], [1.0, 0.0], [0.0, 0.0]]
    assert matrix.future.tolist() == [[1.0, 0.0], [0.0, 0.0], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0]]
    assert matrix.past_only == (False, False)


def test_a_past_only_categorical_covariate() -> None:
    matrix, _ = build([CovariateInput("shift", ["a", "b"] * 15, None)])
    assert matrix.names == ("shift=b",) and matrix.past_only == (True,) and np.isnan(matrix.future).all()


def test_missing_rows_are_checked_then_left_out() -> None:
    matrix, _ = build([CovariateInput("x", [float(i) for i in range(30)], [0.0] * 5)], missing_rows=[0, 7])
    assert matrix.history.shape == (28, 1)
    assert 0.0 not in matrix.history[:, 0] and 7.0 not in matrix.history[:, 0]


@pytest.mark.parametrize(
    ("covariate", "field", "issue", "extra"),
    [
        (CovariateInput("x", [1.0] * 29, [1.0] * 5), "covariates[0].history", "one value per timestamp",
         {"expected": 30, "provided": "29 values"}),
        (CovariateInput("x", [1.0] * 30, [1.0] * 4), "covariates[0].future", "one value per forecast period",
         {"expected": 5}),
        (CovariateInput("x", [1.0] * 30, [1.0, None, 1.0, 1.0, 1.0]), "covariates[0].future",
         "every forecast period", {"index": 1}),
        (CovariateInput("x", [1.0] * 29 + [float("nan")], None), "covariates[0].history", "finite",
         {"index": 29, "provided": "nan"}),
        (CovariateInput("x", [1.0] * 30, [float("inf")] * 5), "covariates[0].future", "finite", {"index": 0}),
        (CovariateInput("x", [1.0] * 30, [1e301] * 5), "covariates[0].future", "out of range", {"index": 0}),
        (CovariateInput("x", [1.0] * 3 + [True] * 27, None), "covariates[0].history", "all numbers or all strings",
         {"index": 3}),
        (CovariateInput("x", [None] * 30, None), "covariates[0].history", "missing value (null)", {"index": 0}),
        (CovariateInput("x", ["a", "b"] * 15, ["a", 1, "a", "a", "a"]), "covariates[0].future",
         "all numbers or all strings", {"index": 1}),
        (CovariateInput("x", ["a"] * 30, None), "covariates[0].history", "at least two distinct", {"provided": "a"}),
        (CovariateInput("x", ["a", "b"] * 15, ["a", "a", "c", "a", "a"]), "covariates[0].future",
         "never seen in the history", {"index": 2, "provided": "c"}),
        (CovariateInput("", [1.0] * 30, None), "covariates[0].name", "1 to 100 characters", {}),
        (CovariateInput("n" * 101, [1.0] * 30, None), "covariates[0].name", "1 to 100 characters", {}),
    ],
)
def test_each_bad_covariate_names_its_field(covariate: CovariateInput, field: str, issue: str,
                                            extra: dict[str, Any]) -> None:
    details = refusal([covariate])
    assert details["field"] == field and issue in details["issue"]
    for name, value in extra.items():
        assert details[name] == value


def test_the_door_names_where_its_covariates_are() -> None:
    details = refusal([CovariateInput("x", [1.0], None)], covariates_field="series[0].covariates")
    assert details["field"] == "series[0].covariates[0].history"


def test_duplicate_names_are_refused() -> None:
    details = refusal([CovariateInput("x", [1.0] * 30, None), CovariateInput("x", [2.0] * 30, None)])
    assert details == {"field": "covariates[1].name", "issue": "duplicate covariate name", "provided": "x"}


def test_a_covariate_named_like_a_design_column_is_refused() -> None:
    details = refusal([CovariateInput("holiday", [1.0] * 30, None)], holidays=HolidaySpec("US"))
    assert details["field"] == "covariates" and "distinct" in details["issue"] and details["provided"] == "holiday"


def test_the_caps() -> None:
    def many(count: int) -> list[CovariateInput]:
        return [CovariateInput(f"c{i}", [float(i + j % 3) for j in range(30)], None) for i in range(count)]

    assert len(build(many(MAX_COVARIATES))[0].names) == MAX_COVARIATES
    details = refusal(many(MAX_COVARIATES + 1))
    assert details == {"field": "covariates", "issue": "at most 20 covariates per series",
                       "provided": "21 covariates", "maximum": 20}

    levels = [f"v{j % MAX_CATEGORIES}" for j in range(30)]
    assert len(build([CovariateInput("k", levels, None)])[0].names) == MAX_CATEGORIES - 1
    details = refusal([CovariateInput("k", [f"v{j % (MAX_CATEGORIES + 1)}" for j in range(30)], None)])
    assert details["field"] == "covariates[0].history" and details["maximum"] == MAX_CATEGORIES

    # 2 categoricals of 20 values (19 columns each) and 12 numbers: 50 columns, then one more is too many
    wide = [CovariateInput("a", levels, None), CovariateInput("b", levels, None), *many(12)]
    assert len(build(wide)[0].names) == MAX_DESIGN_COLUMNS
    details = refusal([*wide, CovariateInput("z", [float(j) for j in range(30)], None)])
    assert details["field"] == "covariates" and details["provided"] == "51 columns"


# --- holidays ----------------------------------------------------------------------------------------------------


def column(matrix: Any, name: str, part: str = "history") -> list[float]:
    return getattr(matrix, part)[:, matrix.names.index(name)].tolist()


def test_holiday_columns_on_a_daily_axis_with_a_window() -> None:
    history = daily(datetime(2025, 12, 1), 31)  # December 2025
    future = daily(datetime(2026, 1, 1), 3)
    matrix, in_horizon = build([], history=history, future=future, holidays=HolidaySpec("US", window=1))
    assert matrix.names == ("holiday", "holiday_near")
    assert matrix.past_only == (False, False)
    holiday, near = column(matrix, "holiday"), column(matrix, "holiday_near")
    assert [history[i].day for i, v in enumerate(holiday) if v] == [25]
    assert [history[i].day for i, v in enumerate(near) if v] == [24, 26, 31]  # 31: the eve of New Year's Day
    assert column(matrix, "holiday", "future") == [1.0, 0.0, 0.0]
    assert column(matrix, "holiday_near", "future") == [0.0, 1.0, 0.0]
    assert [(h.date, h.name) for h in in_horizon] == [("2026-01-01", "New Year's Day")]


def test_a_window_of_zero_has_no_near_column_and_a_wider_one_reaches_further() -> None:
    history = daily(datetime(2025, 12, 1), 31)
    assert build([], history=history, holidays=HolidaySpec("US", window=0))[0].names == ("holiday",)
    matrix, _ = build([], history=history, holidays=HolidaySpec("US", window=3))
    assert [history[i].day for i, v in enumerate(column(matrix, "holiday_near")) if v] == [22, 23, 24, 26, 27, 28,
                                                                                           29, 30, 31]


def test_holiday_columns_on_an_hourly_axis_mark_every_hour_of_the_day() -> None:
    history = hourly(datetime(2025, 12, 23), 24 * 4)  # 23rd to 26th
    future = hourly(datetime(2025, 12, 27), 6)
    matrix, in_horizon = build([], history=history, future=future, holidays=HolidaySpec("US", window=1))
    holiday, near = column(matrix, "holiday"), column(matrix, "holiday_near")
    assert {history[i].day for i, v in enumerate(holiday) if v} == {25} and sum(holiday) == 24
    assert {history[i].day for i, v in enumerate(near) if v} == {24, 26} and sum(near) == 48
    assert in_horizon == []


def test_a_subdivision_adds_its_own_holidays() -> None:
    history = daily(datetime(2026, 3, 1), 40)  # Cesar Chavez Day, March 31, is California's
    national = column(build([], history=history, holidays=HolidaySpec("US", window=0))[0], "holiday")
    california = column(build([], history=history, holidays=HolidaySpec("US", "CA", window=0))[0], "holiday")
    assert sum(national) == 0
    assert [history[i].day for i, v in enumerate(california) if v] == [31]


def test_monthly_rows_count_the_holiday_days_of_their_month() -> None:
    history = monthly(2024, 1, 24)
    future = monthly(2026, 1, 12)
    matrix, in_horizon = build([], history=history, future=future, holidays=HolidaySpec("US", window=0))
    # 2025: New Year and MLK in January; July 4th alone (a Friday, no observed day)
    assert column(matrix, "holiday")[12] == 2.0 and column(matrix, "holiday")[18] == 1.0
    # 2026's December, the last row, still covers its whole month: Christmas counts
    assert column(matrix, "holiday", "future")[-1] == 1.0
    assert in_horizon[0].date == "2026-01-01" and in_horizon[-1].date == "2026-12-25"
    assert len(in_horizon) == 12


@pytest.mark.parametrize(
    ("spec", "field", "issue"),
    [
        (HolidaySpec("XX"), "holidays.country", "unknown country"),
        (HolidaySpec("us"), "holidays.country", "unknown country"),
        (HolidaySpec("US", "ZZ"), "holidays.subdivision", "unknown subdivision"),
        (HolidaySpec("US", window=8), "holidays.window", "between 0 and 7"),
        (HolidaySpec("US", window=-1), "holidays.window", "between 0 and 7"),
    ],
)
def test_bad_holiday_specs_name_their_field(spec: HolidaySpec, field: str, issue: str) -> None:
    details = refusal([], holidays=spec)
    assert details["field"] == field and issue in details["issue"]
    if field == "holidays.subdivision":
        assert "CA" in details["allowed"] and "TX" in details["allowed"]


def test_holidays_over_too_many_years_are_refused() -> None:
    history = [datetime(1400 + i, 1, 1) for i in range(600)]
    details = refusal([], history=history, future=[datetime(2000, 1, 1)], holidays=HolidaySpec("US"))
    assert details["field"] == "holidays" and "500" in details["issue"]


# --- calendar features -------------------------------------------------------------------------------------------


def test_day_of_week_and_month_columns() -> None:
    history = daily(datetime(2026, 1, 1), 59)  # a Thursday; January and February
    future = daily(datetime(2026, 3, 2), 3)  # a Monday in March, a month the history never shows
    matrix, _ = build([], history=history, future=future, calendar=["day_of_week", "month"])
    assert matrix.names == ("day_of_week=Tue", "day_of_week=Wed", "day_of_week=Thu", "day_of_week=Fri",
                            "day_of_week=Sat", "day_of_week=Sun", "month=Feb")
    assert matrix.history[0].tolist() == [0, 0, 1, 0, 0, 0, 0]  # Thursday in January
    assert matrix.future[0].tolist() == [0, 0, 0, 0, 0, 0, 0]  # Monday and March are reference levels
    assert matrix.future[1, 0] == 1.0  # Tuesday


def test_hour_columns_on_an_hourly_axis() -> None:
    history = hourly(datetime(2026, 1, 1), 48)
    matrix, _ = build([], history=history, future=hourly(datetime(2026, 1, 3), 2), calendar=["hour"])
    assert matrix.names == tuple(f"hour={h}" for h in range(1, 24))
    assert matrix.history[:, 4].tolist() == [1.0 if i % 24 == 5 else 0.0 for i in range(48)]
    assert matrix.future.tolist()[1] == [1.0] + [0.0] * 22


def test_calendar_features_read_the_wall_clock_as_written() -> None:
    plus_two = timezone(timedelta(hours=2))
    history = [t.replace(tzinfo=plus_two) for t in hourly(datetime(2026, 1, 1), 48)]
    matrix, _ = build([], history=history, future=[datetime(2026, 1, 3, tzinfo=plus_two)], calendar=["hour"])
    assert matrix.history[1, 0] == 1.0  # 01:00+02:00 is hour 1, not 23:00 UTC
    texts = ["2026-01-01T01:00:00+02:00", "2026-01-01T02:00:00.5Z", "2026-01-01 03:00:00", "2026-01-02"]
    assert walls_from_texts(texts).astype("datetime64[h]").astype(str).tolist() == [
        "2026-01-01T01", "2026-01-01T02", "2026-01-01T03", "2026-01-02T00"]


@pytest.mark.parametrize(
    ("calendar", "field", "issue"),
    [
        (["weekday"], "calendar_features[0]", "Must be one of: hour, day_of_week, month"),
        (["month", "month"], "calendar_features[1]", "duplicate"),
        (["hour"], "calendar_features[0]", "single value"),  # daily rows are all at midnight
    ],
)
def test_bad_calendar_features(calendar: list[str], field: str, issue: str) -> None:
    details = refusal([], calendar=calendar)
    assert details["field"] == field and issue in details["issue"]


def test_column_order_is_covariates_holidays_calendar() -> None:
    history = daily(datetime(2026, 1, 1), 59)
    matrix, _ = build([CovariateInput("p", [float(i % 4) for i in range(59)], [1.0] * 5)], history=history,
                      holidays=HolidaySpec("US"), calendar=["month"])
    assert matrix.names == ("p", "holiday", "holiday_near", "month=Feb")
    assert matrix.history.shape == (59, 4) and matrix.future.shape == (5, 4)
    assert matrix.history.flags.c_contiguous
