"""The exogenous columns ``nixtla.NixtlaClient`` 0.9 sends, read into the covariates the models take
(app.compute.forecast.work.CovariateMatrix), with the refusals of docs/nixtla.md.

What the client sends (it computes everything client-side, names included, and sends no names):
- ``series.X``: one list per exogenous column, each with one value per row of ``series.y``. Its columns are
  ``X_df``'s (known ahead) first, then ``hist_exog_list``'s (known only over the history). ``date_features``
  (``CountryHolidays``, ``SpecialDates``, "month", ...) are computed by the client into extra columns of both
  ``df`` and ``X_df``, so they arrive as columns known ahead.
- ``series.X_future`` (forecast): one list per column known ahead, each with ``h`` values per series, series
  after series. Its count says how many of X's first columns are known ahead; the rest are past-only.
- ``hist_exog`` (cross-validation, and add_history's in-sample call): the indices of X's past-only columns;
  the others are known ahead, and a window reads their actual values over its horizon.
Columns of ``df`` in neither ``X_df`` nor ``hist_exog_list`` never reach the service: the forecast client warns
that it ignores them. Its cross-validation sends every extra column of ``df``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.compat.nixtla.errors import NixtlaError, unsupported
from app.compute.forecast.work import CovariateMatrix
from app.web.fields import MAX_ABS_VALUE, all_in_range

# As POST /forecast takes covariates (docs/covariates.md): each column the client sends is one covariate and
# one design column, so the tighter of the two caps is the one that binds.
MAX_COVARIATES = 20
# Where a message may quote a position, the client's own names for what it comes from.
_ORDER = "X_df's columns first, then hist_exog_list's, then date_features' (in X_df too when X_df is sent)"


@dataclass(frozen=True)
class Exogenous:
    """A call's exogenous columns: ``history`` rows aligned with ``series.y``; ``future`` (forecast only) the
    columns known ahead over each series' horizon, series after series; ``past_only`` per column."""

    history: np.ndarray  # float64, shape (rows of y, columns)
    future: np.ndarray | None  # float64, shape (series x h, columns known ahead); None on cross-validation
    past_only: tuple[bool, ...]

    @property
    def names(self) -> tuple[str, ...]:
        # The client sends no names: a column is named by its place in series.X, as the client's weights_x
        # and feature_contributions name them back in the same order.
        return tuple(f"X[{column}]" for column in range(len(self.past_only)))

    def for_forecast(self, index: int, offset: int, size: int, h: int, missing: Sequence[int]) -> CovariateMatrix:
        """Series ``index``'s covariates over its whole history and the ``h`` steps after it."""
        known = self.future[index * h:(index + 1) * h] if self.future is not None else np.empty((h, 0))
        return self._matrix(offset, size, known, missing)

    def for_window(self, offset: int, cut: int, h: int, missing: Sequence[int]) -> CovariateMatrix:
        """The covariates of the window that forecasts rows ``cut``..``cut + h`` of a series from the rows
        before them: the columns known ahead take their actual values over the window's horizon."""
        rows = self.history[offset + cut:offset + cut + h]
        known = rows[:, [column for column, past in enumerate(self.past_only) if not past]]
        return self._matrix(offset, cut, known, missing)

    def _matrix(self, offset: int, size: int, known: np.ndarray, missing: Sequence[int]) -> CovariateMatrix:
        history = self.history[offset:offset + size]
        if missing:  # the models see the series without its null values; the covariates' rows go with them
            history = np.delete(history, [row for row in missing if row < size], axis=0)
        future = np.full((known.shape[0], len(self.past_only)), np.nan)
        future[:, [column for column, past in enumerate(self.past_only) if not past]] = known
        return CovariateMatrix(names=self.names, history=np.ascontiguousarray(history), future=future,
                               past_only=self.past_only)


def _columns(value: Any, field: str) -> list[Any] | None:
    if value is None or value == []:
        return None
    if not isinstance(value, list) or not all(isinstance(column, list) for column in value):
        raise NixtlaError(f"series.{field} must be a list of columns, each a list of numbers.")
    return value


def _finite(item: Any) -> bool:
    try:
        return type(item) in (int, float) and abs(float(item)) <= MAX_ABS_VALUE
    except OverflowError:
        return False


def _numbers(column: list[Any], field: str, sizes: Sequence[int], per_series: int | None) -> np.ndarray:
    """The column as float64; 400 naming the first value that is not a finite number, by series and row."""
    try:
        values = np.array(column, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):  # a string, a list, or an integer too large for a float
        values = None
    if values is not None and values.ndim == 1 and all_in_range(values) and \
            not any(type(item) is bool for item in column):
        return values
    bad = next(number for number, item in enumerate(column) if not _finite(item))
    if per_series is not None:
        series, step = divmod(bad, per_series)
        where = f"series {series}, horizon step {step + 1}"
    else:
        starts = np.cumsum([0, *sizes])
        series = int(np.searchsorted(starts, bad, side="right")) - 1
        where = f"series {series}, row {bad - int(starts[series])}"
    shown = "null (NaN)" if column[bad] is None else repr(column[bad])[:32]
    raise NixtlaError(f"series.{field} holds {shown} for {where}: exogenous values must be finite numbers "
                      f"(of magnitude at most {MAX_ABS_VALUE:g}). "
                      "Fill or drop missing values before sending (the client sends NaN as null); categorical "
                      "columns are not supported (one-hot encode them into numeric columns).")


def _hist_indices(value: Any, count: int) -> list[int]:
    if value is None or value == []:
        return []
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise NixtlaError("hist_exog must be a list of column indices of series.X.")
    if len(set(value)) != len(value) or not all(0 <= i < count for i in value):
        raise NixtlaError(f"hist_exog must name distinct columns of series.X (0 to {count - 1}); got "
                          f"{str(value)[:64]}.")
    return value


def read(body: Mapping[str, Any], sizes: Sequence[int], *, h: int | None) -> Exogenous | None:
    """The body's exogenous columns checked and read (``h`` on forecast, None on cross-validation), or None
    when it sends none. Everything is checked before any model runs; nothing is dropped."""
    series = body["series"]
    if series.get("categorical_exog") not in (None, []):
        raise unsupported("Categorical exogenous variables (categorical_exog_list)",
                          "One-hot encode them into numeric columns of df (and X_df) instead.")
    columns = _columns(series.get("X"), "X")
    future_columns = _columns(series.get("X_future"), "X_future")
    if h is None and future_columns is not None:
        raise NixtlaError("series.X_future is not read by cross-validation: each window's exogenous values come "
                          "from series.X.")
    if columns is None:
        if future_columns is not None or body.get("hist_exog") not in (None, []):
            raise NixtlaError("series.X_future and hist_exog need series.X, the exogenous values over the history.")
        return None
    if len(columns) > MAX_COVARIATES:
        raise NixtlaError(f"A call may send at most {MAX_COVARIATES} exogenous columns; this one sends "
                          f"{len(columns)} ({_ORDER}). A country's holidays are one column each: drop some "
                          "columns or countries.", code="TOO_MANY_COVARIATES")
    rows = sum(sizes)
    for number, column in enumerate(columns):
        if len(column) != rows:
            raise NixtlaError(f"series.X[{number}] holds {len(column)} values but series.y holds {rows}: every "
                              "exogenous column of df needs a value on every row.")
    if h is None:
        hist = _hist_indices(body.get("hist_exog"), len(columns))
        past_only = tuple(number in hist for number in range(len(columns)))
        future = None
    else:
        known = len(future_columns or [])
        if known > len(columns):
            raise NixtlaError(f"series.X_future has {known} columns but series.X only {len(columns)}: every "
                              "column of X_df must also be a column of df.")
        hist = _hist_indices(body.get("hist_exog"), len(columns))
        if hist and hist != list(range(known, len(columns))):
            raise NixtlaError(f"hist_exog must name series.X's last {len(columns) - known} columns: the first "
                              f"{known}, those of series.X_future, are known ahead.")
        past_only = tuple(number >= known for number in range(len(columns)))
        expected = len(sizes) * h
        for number, column in enumerate(future_columns or []):
            if len(column) != expected:
                raise NixtlaError(f"series.X_future[{number}] holds {len(column)} values; {len(sizes)} series "
                                  f"x h={h} need {expected}: X_df must hold one row per series and future "
                                  "timestamp of the horizon.")
        future = np.column_stack([_numbers(column, f"X_future[{number}]", sizes, h)
                                  for number, column in enumerate(future_columns)]) if future_columns else None
    history = np.column_stack([_numbers(column, f"X[{number}]", sizes, None) for number, column in enumerate(columns)])
    return Exogenous(history=history, future=future, past_only=past_only)
