"""The exogenous columns ``nixtla.NixtlaClient`` 0.9 sends, read into the covariates the models take
(app.compute.forecast.work.CovariateMatrix) under POST /forecast's caps, with the refusals of docs/nixtla.md.

What the client sends (it computes everything client-side and sends no column names):
- ``series.X``: one list per exogenous column, each with one value per row of ``series.y``. Its columns are
  ``X_df``'s (known ahead) first, then ``hist_exog_list``'s (known only over the history). ``date_features``
  (``CountryHolidays``, ``SpecialDates``, "month", ...) are computed by the client into extra columns of both
  ``df`` and ``X_df``, so they arrive as columns known ahead.
- ``series.X_future`` (forecast): one list per column known ahead, each with ``h`` values per series, series
  after series. Its count says how many of X's first columns are known ahead; the rest are past-only.
- ``hist_exog`` (cross-validation, and add_history's in-sample call): the indices of X's past-only columns;
  the others are known ahead, and a window reads their actual values over its horizon.
- ``series.categorical_exog``: the indices of X's categorical columns, whose values come as sent (strings or
  numbers). Each is one-hot encoded per series as POST /forecast encodes a categorical covariate.
Columns of ``df`` in neither ``X_df`` nor ``hist_exog_list`` never reach the service: the forecast client warns
that it ignores them. Its cross-validation sends every extra column of ``df``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.compat.nixtla.errors import TooManyCovariates
from app.compute.forecast.work import CovariateMatrix
from app.errors import MalformedInput
from app.forecast.covariates import MAX_CATEGORIES, MAX_COVARIATES, MAX_DESIGN_COLUMNS, one_hot
from app.web.fields import MAX_ABS_VALUE, all_in_range

# Where a message may quote a position, the client's own names for what it comes from.
_ORDER = "X_df's columns first, then hist_exog_list's, then date_features' (in X_df too when X_df is sent)"


@dataclass(frozen=True)
class SeriesColumns:
    """One series' design columns: ``history`` over all its rows; ``future`` over its horizon (forecast; no rows
    on cross-validation), NaN in the past-only columns."""

    names: tuple[str, ...]
    history: np.ndarray
    future: np.ndarray
    past_only: tuple[bool, ...]

    def matrix(self, size: int, future: np.ndarray, missing: Sequence[int]) -> CovariateMatrix | None:
        if not self.names:  # every categorical column holds one value over this series: nothing to weigh
            return None
        history = self.history[:size]
        if missing:  # the models see the series without its null values; the covariates' rows go with them
            history = np.delete(history, [row for row in missing if row < size], axis=0)
        return CovariateMatrix(names=self.names, history=np.ascontiguousarray(history),
                               future=np.ascontiguousarray(future), past_only=self.past_only)


@dataclass(frozen=True)
class Exogenous:
    """A call's exogenous columns, series by series. The client sends no names: a column is named by its place
    in series.X (``X[2]``, and ``X[2]=red`` for a value of a categorical one)."""

    columns: tuple[str, ...]
    series: tuple[SeriesColumns, ...]

    def for_forecast(self, index: int, missing: Sequence[int]) -> CovariateMatrix | None:
        """Series ``index``'s covariates over its whole history and its horizon."""
        own = self.series[index]
        return own.matrix(len(own.history), own.future, missing)

    def for_window(self, index: int, cut: int, h: int, missing: Sequence[int]) -> CovariateMatrix | None:
        """The covariates of the window that forecasts rows ``cut``..``cut + h`` of series ``index`` from the rows
        before them: the columns known ahead take their actual values over the window's horizon."""
        own = self.series[index]
        future = own.history[cut:cut + h].copy()
        future[:, list(own.past_only)] = np.nan
        return own.matrix(cut, future, missing)


def _columns(value: Any, field: str) -> list[Any] | None:
    if value is None or value == []:
        return None
    if not isinstance(value, list) or not all(isinstance(column, list) for column in value):
        raise MalformedInput(f"series.{field} must be a list of columns, each a list of numbers.")
    return value


def _place(bad: int, sizes: Sequence[int], per_series: int | None) -> str:
    if per_series is not None:
        series, step = divmod(bad, per_series)
        return f"series {series}, horizon step {step + 1}"
    starts = np.cumsum([0, *sizes])
    series = int(np.searchsorted(starts, bad, side="right")) - 1
    return f"series {series}, row {bad - int(starts[series])}"


def _shown(value: Any) -> str:
    return "null (NaN)" if value is None else repr(value)[:32]


def _finite(item: Any) -> bool:
    try:
        return type(item) in (int, float) and abs(float(item)) <= MAX_ABS_VALUE
    except OverflowError:
        return False


def _numbers(column: list[Any], field: str, sizes: Sequence[int], per_series: int | None) -> np.ndarray:
    """The column as float64; 400 naming the first value that is not a finite number, by series and row."""
    if set(map(type, column)) <= {float, int}:  # bool is not a number here, nor in JSON
        try:
            values = np.array(column, dtype=np.float64)
        except OverflowError:  # an integer too large for a float
            values = None
        if values is not None and all_in_range(values):
            return values
    bad = next(number for number, item in enumerate(column) if not _finite(item))
    raise MalformedInput(f"series.{field} holds {_shown(column[bad])} for {_place(bad, sizes, per_series)}: exogenous "
                          f"values must be finite numbers (of magnitude at most {MAX_ABS_VALUE:g}). Fill or drop "
                          "missing values before sending (the client sends NaN as null); name a column of categories "
                          "in categorical_exog_list.")


def _category(item: Any) -> str | None:
    """A category as text, numbers written alike whatever their type (1 and 1.0 are one category)."""
    if isinstance(item, str):
        return item
    if type(item) is bool:
        return str(item)
    if _finite(item):
        number = float(item)
        return str(int(number)) if number.is_integer() and abs(number) < 2**53 else repr(number)
    return None


def _categories(column: list[Any], field: str, sizes: Sequence[int], per_series: int | None) -> np.ndarray:
    texts = [_category(item) for item in column]
    if None in texts:
        bad = texts.index(None)
        raise MalformedInput(f"series.{field} holds {_shown(column[bad])} for {_place(bad, sizes, per_series)}: a "
                              "categorical column's values must be strings or finite numbers, none missing.")
    return np.array(texts, dtype=object)


def _indices(value: Any, count: int, name: str) -> list[int]:
    if value is None or value == []:
        return []
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise MalformedInput(f"{name} must be a list of column indices of series.X.")
    if len(set(value)) != len(value) or not all(0 <= i < count for i in value):
        raise MalformedInput(f"{name} must name distinct columns of series.X (0 to {count - 1}); got "
                              f"{str(value)[:64]}.")
    return value


def _one_hot(index: int, column: int, history: np.ndarray, future: np.ndarray | None, horizon: int
             ) -> tuple[list[str], np.ndarray, np.ndarray]:
    """A categorical column of one series as POST /forecast encodes one: a column per value of its history but
    the first (sorted), at most MAX_CATEGORIES values, every future value one of the history's."""
    levels = sorted(set(history))
    if len(levels) > MAX_CATEGORIES:
        raise MalformedInput(f"series {index}: categorical column series.X[{column}] holds {len(levels)} distinct "
                              f"values; a categorical column may hold at most {MAX_CATEGORIES}.")
    if future is not None:
        unseen = next((value for value in future if value not in levels), None)
        if unseen is not None:
            raise MalformedInput(f"series {index}: categorical column series.X[{column}] holds {unseen[:32]!r} in the "
                                  "horizon, a value never seen in the series' history (its effect cannot be "
                                  "estimated).")
    past, ahead = one_hot(levels, history, future, horizon)
    return [f"X[{column}]={level}" for level in levels[1:]], past, ahead


def _series_columns(index: int, rows: slice, ahead: slice, numeric: tuple[np.ndarray, np.ndarray],
                    categories: dict[int, tuple[np.ndarray, np.ndarray | None]], past_only: tuple[bool, ...],
                    horizon: int) -> SeriesColumns:
    """One series' design columns in series.X's order: ``numeric`` holds the call's numeric columns (history,
    future with NaN where not known ahead), ``categories`` each categorical column's values."""
    names: list[str] = []
    pasts: list[np.ndarray] = []
    aheads: list[np.ndarray] = []
    flags: list[bool] = []
    position = 0
    for column, past in enumerate(past_only):
        if column in categories:
            history, future = categories[column]
            added, before, later = _one_hot(index, column, history[rows],
                                            None if future is None else future[ahead], horizon)
        else:
            added = [f"X[{column}]"]
            before, later = numeric[0][rows, position:position + 1], numeric[1][ahead, position:position + 1]
            position += 1
        names += added
        pasts.append(before)
        aheads.append(later)
        flags += [past] * len(added)
    if len(names) > MAX_DESIGN_COLUMNS:
        raise TooManyCovariates(f"series {index}: its exogenous columns make {len(names)} design columns (a "
                                f"categorical column one per value but the first); at most {MAX_DESIGN_COLUMNS} "
                                "are taken.")
    return SeriesColumns(names=tuple(names), history=np.column_stack(pasts), future=np.column_stack(aheads),
                         past_only=tuple(flags))


def read(body: Mapping[str, Any], sizes: Sequence[int], *, h: int | None) -> Exogenous | None:
    """The body's exogenous columns checked and read (``h`` on forecast, None on cross-validation), or None
    when it sends none. Everything is checked here, before any model runs or the key's windows are spent;
    nothing is dropped."""
    series = body["series"]
    columns = _columns(series.get("X"), "X")
    future_columns = _columns(series.get("X_future"), "X_future") or []
    if h is None and future_columns:
        raise MalformedInput("series.X_future is not read by cross-validation: each window's exogenous values come "
                              "from series.X.")
    if columns is None:
        if future_columns or body.get("hist_exog") not in (None, []) or \
                series.get("categorical_exog") not in (None, []):
            raise MalformedInput("series.X_future, hist_exog and categorical_exog need series.X, the exogenous values "
                                  "over the history.")
        return None
    if len(columns) > MAX_COVARIATES:
        raise TooManyCovariates(f"A call may send at most {MAX_COVARIATES} exogenous columns; this one sends "
                                f"{len(columns)} ({_ORDER}). A country's holidays are one column each: drop some "
                                "columns or countries.")
    rows = sum(sizes)
    for number, column in enumerate(columns):
        if len(column) != rows:
            raise MalformedInput(f"series.X[{number}] holds {len(column)} values but series.y holds {rows}: every "
                                  "exogenous column of df needs a value on every row.")
    hist = _indices(body.get("hist_exog"), len(columns), "hist_exog")
    categorical = set(_indices(series.get("categorical_exog"), len(columns), "categorical_exog"))
    if h is None:
        past_only = tuple(number in hist for number in range(len(columns)))
    else:
        known = len(future_columns)
        if known > len(columns):
            raise MalformedInput(f"series.X_future has {known} columns but series.X only {len(columns)}: every "
                                  "column of X_df must also be a column of df.")
        if hist and hist != list(range(known, len(columns))):
            raise MalformedInput(f"hist_exog must name series.X's last {len(columns) - known} columns: the first "
                                  f"{known}, those of series.X_future, are known ahead.")
        past_only = tuple(number >= known for number in range(len(columns)))
        for number, column in enumerate(future_columns):
            if len(column) != len(sizes) * h:
                raise MalformedInput(f"series.X_future[{number}] holds {len(column)} values; {len(sizes)} series "
                                      f"x h={h} need {len(sizes) * h}: X_df must hold one row per series and future "
                                      "timestamp of the horizon.")

    def values(column: list[Any], field: str, per_series: int | None, number: int) -> np.ndarray:
        read_as = _categories if number in categorical else _numbers
        return read_as(column, field, sizes, per_series)

    history = [values(column, f"X[{number}]", None, number) for number, column in enumerate(columns)]
    future = {number: values(column, f"X_future[{number}]", h, number) for number, column in enumerate(future_columns)}
    horizon = h or 0
    numbers = [number for number in range(len(columns)) if number not in categorical]
    numeric_history = np.column_stack([history[number] for number in numbers]) if numbers else np.empty((rows, 0))
    numeric_future = np.full((len(sizes) * horizon, len(numbers)), np.nan)
    for position, number in enumerate(numbers):
        if number in future:
            numeric_future[:, position] = future[number]
    starts = np.cumsum([0, *sizes]).tolist()
    if not categorical:  # each series' columns are views of the call's: no copy per series
        names, flags = tuple(f"X[{number}]" for number in numbers), past_only
        every = tuple(SeriesColumns(names=names, history=numeric_history[starts[index]:starts[index + 1]],
                                    future=numeric_future[index * horizon:(index + 1) * horizon], past_only=flags)
                      for index in range(len(sizes)))
    else:
        categories = {number: (history[number], future.get(number)) for number in categorical}
        every = tuple(_series_columns(index, slice(starts[index], starts[index + 1]),
                                      slice(index * horizon, (index + 1) * horizon),
                                      (numeric_history, numeric_future), categories, past_only, horizon)
                      for index in range(len(sizes)))
    return Exogenous(columns=tuple(f"X[{number}]" for number in range(len(columns))), series=every)
