"""What a user sends as covariates, holidays and calendar features, turned into the design columns the models take
(a CovariateMatrix); every door that asks for a forecast (POST /forecast, batches, backtests, the Nixtla routes)
comes through design_matrix, so the rules and their errors are the same everywhere (docs/covariates.md).

Rules, each broken one a CovariateError (a 422) naming its field:

- at most MAX_COVARIATES covariates per series, names distinct, 1 to MAX_NAME_LENGTH characters;
- ``history`` has one value per history row; ``future``, when sent, one per forecast period; a covariate without
  ``future`` is known only in the past (the models use it lagged by the horizon);
- values are all finite numbers (a numeric covariate, one column under its own name) or all strings (a
  categorical one: one-hot, the first of its sorted history values dropped as the reference, at most
  MAX_CATEGORIES distinct values and at least two; a future value must occur in the history). No nulls;
- at most MAX_DESIGN_COLUMNS design columns in all, holiday and calendar columns included, names distinct.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeAlias, cast

from app.compute.forecast.work import CovariateMatrix
from app.forecast.calendar import (
    CovariateError,
    HolidayInHorizon,
    HolidaySpec,
    as_walls,
    calendar_columns,
    check_holiday_spec,
    holiday_columns,
)
from app.web.fields import MAX_ABS_VALUE, all_in_range

if TYPE_CHECKING:
    import numpy as np

# Wall clocks as datetimes, checked timestamp texts or a datetime64 array (app.forecast.calendar.as_walls).
Timestamps: TypeAlias = "Sequence[datetime] | Sequence[str] | np.ndarray"

MAX_COVARIATES = 20
MAX_CATEGORIES = 20
MAX_DESIGN_COLUMNS = 50
MAX_NAME_LENGTH = 100

__all__ = ["CovariateError", "CovariateInput", "CovariateMatrix", "HolidayInHorizon", "HolidaySpec",
           "design_matrix"]


@dataclass(frozen=True)
class CovariateInput:
    name: str
    history: list[float] | list[str]  # one per history row; strings make a categorical covariate
    future: list[float] | list[str] | None  # one per forecast period, or None: known only in the past


def design_matrix(covariates: Sequence[CovariateInput], *, holidays: HolidaySpec | None, calendar: Sequence[str],
                  history_timestamps: Timestamps, future_timestamps: Timestamps, horizon: int,
                  missing_rows: Sequence[int] = (), covariates_field: str = "covariates",
                  ) -> tuple[CovariateMatrix, list[HolidayInHorizon]]:
    """The design columns of a series, in the order: covariates as sent, holiday columns, calendar columns.

    ``history_timestamps`` are the series' rows as sent (wall clocks: datetimes, or a datetime64 array) and are
    read only for holidays and calendar features; ``missing_rows`` are the rows whose value is missing, checked
    like the others and then left out, so the matrix's rows align with the values the model fits.
    ``covariates_field`` is how errors name the covariates (``series[0].covariates`` on POST /forecast)."""
    import numpy as np

    rows = len(history_timestamps)
    if len(covariates) > MAX_COVARIATES:
        raise CovariateError(covariates_field, f"at most {MAX_COVARIATES} covariates per series",
                             f"{len(covariates)} covariates", maximum=MAX_COVARIATES)
    names: list[str] = []
    history_columns: list[np.ndarray] = []
    future_columns: list[np.ndarray] = []
    past_only: list[bool] = []
    seen: set[str] = set()
    for index, covariate in enumerate(covariates):
        field = f"{covariates_field}[{index}]"
        _check_name(covariate.name, field, seen)
        past, ahead, column_names = _columns_of(covariate, field, rows, horizon)
        names += column_names
        history_columns.append(past)
        future_columns.append(ahead)
        past_only += [covariate.future is None] * len(column_names)

    holidays_in_horizon: list[HolidayInHorizon] = []
    if holidays is not None or calendar:
        if holidays is not None:
            check_holiday_spec(holidays)
        history_walls, future_walls = as_walls(history_timestamps), as_walls(future_timestamps)
        built = []
        if holidays is not None:
            columns, holidays_in_horizon = holiday_columns(holidays, history_walls, future_walls)
            built.append(columns)
        if calendar:
            built.append(calendar_columns(calendar, history_walls, future_walls))
        for columns in built:
            names += columns.names
            history_columns.append(columns.history)
            future_columns.append(columns.future)
            past_only += [False] * len(columns.names)

    if len(names) > MAX_DESIGN_COLUMNS:
        raise CovariateError(covariates_field, f"at most {MAX_DESIGN_COLUMNS} design columns in all (categorical "
                             "covariates one per value but the first, holiday and calendar columns included)",
                             f"{len(names)} columns", maximum=MAX_DESIGN_COLUMNS)
    duplicate = next((name for position, name in enumerate(names) if name in names[:position]), None)
    if duplicate is not None:
        raise CovariateError(covariates_field, "design column names must be distinct (a covariate is named like "
                             "a holiday or calendar column)", duplicate)
    history = np.hstack(history_columns) if history_columns else np.empty((rows, 0))
    if len(missing_rows):
        history = np.delete(history, np.asarray(missing_rows, dtype=np.intp), axis=0)
    future = np.hstack(future_columns) if future_columns else np.empty((horizon, 0))
    matrix = CovariateMatrix(names=tuple(names), history=np.ascontiguousarray(history),
                             future=np.ascontiguousarray(future), past_only=tuple(past_only))
    return matrix, holidays_in_horizon


def _check_name(name: Any, field: str, seen: set[str]) -> None:
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME_LENGTH:
        raise CovariateError(f"{field}.name", f"Must be a string of 1 to {MAX_NAME_LENGTH} characters", name)
    if name in seen:
        raise CovariateError(f"{field}.name", "duplicate covariate name", name)
    seen.add(name)


def _columns_of(covariate: CovariateInput, field: str, rows: int, horizon: int
                ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(history columns, future columns, their names) of one covariate, checked."""
    import numpy as np

    history, future = _plain(covariate.history), _plain(covariate.future)
    if len(history) != rows:
        raise CovariateError(f"{field}.history", "must have one value per timestamp of the series",
                             f"{len(history)} values", expected=rows)
    if future is not None and len(future) != horizon:
        raise CovariateError(f"{field}.future", "must have one value per forecast period (forecast_horizon); "
                             "leave future out for a covariate known only in the past",
                             f"{len(future)} values", expected=horizon)
    categorical = bool(history) and isinstance(history[0], str)
    if not categorical:
        past = _numbers(history, f"{field}.history")
        if future is None:
            return past[:, None], np.full((horizon, 1), np.nan), [covariate.name]
        return past[:, None], _numbers(future, f"{field}.future")[:, None], [covariate.name]

    _strings(history, f"{field}.history")
    if future is not None:
        _strings(future, f"{field}.future")
    texts, future_texts = cast(list[str], history), cast("list[str] | None", future)
    levels = sorted(set(texts))
    if len(levels) > MAX_CATEGORIES:
        raise CovariateError(f"{field}.history", f"a categorical covariate takes at most {MAX_CATEGORIES} distinct "
                             "values", f"{len(levels)} distinct values", maximum=MAX_CATEGORIES)
    if len(levels) < 2:
        raise CovariateError(f"{field}.history", "a categorical covariate needs at least two distinct values in "
                             "the history", levels[0])
    if future is not None:
        known = set(levels)
        unseen = next((index for index, value in enumerate(future) if value not in known), None)
        if unseen is not None:
            raise CovariateError(f"{field}.future", "value never seen in the history (its effect cannot be "
                                 "estimated)", future[unseen], index=unseen)
    past, ahead = one_hot(levels, texts, future_texts, horizon)
    return past, ahead, [f"{covariate.name}={level}" for level in levels[1:]]


def one_hot(levels: Sequence[str], history: Sequence[str], future: Sequence[str] | None, horizon: int
            ) -> tuple[np.ndarray, np.ndarray]:
    """A categorical covariate's design columns over the history and the horizon: one per level but the first
    (the reference), every value one of ``levels`` (the callers refuse others in their own words); a covariate
    known only in the past has NaN over the horizon. Codes, not numpy strings: those drop trailing NULs, which
    would merge two values the covariate keeps apart."""
    import numpy as np

    code_of = {level: code for code, level in enumerate(levels)}
    references = np.arange(1, len(levels))[None, :]

    def columns(values: Sequence[str]) -> np.ndarray:
        return (np.array([code_of[value] for value in values], dtype=np.intp)[:, None] == references).astype(
            np.float64)

    ahead = np.full((horizon, len(levels) - 1), np.nan) if future is None else columns(future)
    return columns(history), ahead


def _plain(values: Any) -> Any:
    """Python lists as JSON gives them, also from a numpy array or a tuple a door may hold."""
    if values is None or isinstance(values, list):
        return values
    return values.tolist() if hasattr(values, "tolist") else list(values)


def _numbers(values: Sequence[Any], field: str) -> np.ndarray:
    """float64 of finite numbers; else the first defect named at its index."""
    import numpy as np

    if set(map(type, values)) <= {float, int}:  # bool is not a number here, nor in JSON
        try:
            array = np.array(values, dtype=np.float64)
        except OverflowError:
            array = None
        if array is not None and (array.size == 0 or all_in_range(array)):
            return array
    for index, value in enumerate(values):
        if value is None:
            issue = ("must have a value for every forecast period (null found); leave future out for a covariate "
                     "known only in the past") if field.endswith(".future") else "missing value (null)"
            raise CovariateError(field, issue, None, index=index)
        if type(value) not in (int, float):
            raise CovariateError(field, "values must be all numbers or all strings", value, index=index)
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise CovariateError(field, "value must be a finite number", value, index=index)
        if abs(number) > MAX_ABS_VALUE:
            raise CovariateError(field, f"value out of range: magnitude must be at most {MAX_ABS_VALUE:g}", value,
                                 index=index, maximum=MAX_ABS_VALUE)
    raise AssertionError("a defect was found in one pass but not item by item")  # pragma: no cover


def _strings(values: Sequence[Any], field: str) -> None:
    for index, value in enumerate(values):
        if not isinstance(value, str):
            issue = "missing value (null)" if value is None else "values must be all numbers or all strings"
            raise CovariateError(field, issue, value, index=index)
