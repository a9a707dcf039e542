"""Covariates from the client's side, written as statsforecast and TimeGPT users write them: the history frame
carries the covariates as extra columns, ``X_df`` their values over the horizon, ``hist_exog_list`` the ones known
only over the history. ``holidays`` names a country (or gives the service's holidays object) and
``calendar_features`` the calendar columns the service builds (docs/covariates.md).

Nothing is dropped quietly: a column of the history that is neither in ``X_df`` nor in ``hist_exog_list`` is a
ValueError naming it, as is a column of ``X_df`` the history lacks or a horizon with too few rows."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

TARGET_NAMES = ("y", "value")


@dataclass(frozen=True)
class CovariateOptions:
    """What a call asks for beyond the series: the future frame and the lists naming covariates, and the
    service-built holidays and calendar columns."""

    X_df: Any = None  # noqa: N815 -- statsforecast's and TimeGPT's name
    hist_exog_list: tuple[str, ...] = ()
    categorical_exog_list: tuple[str, ...] = ()
    holidays: Mapping[str, Any] | None = None
    calendar_features: tuple[str, ...] = ()

    @classmethod
    def of(cls, X_df: Any = None, hist_exog_list: Iterable[str] | None = None,  # noqa: N803
           categorical_exog_list: Iterable[str] | None = None, holidays: str | Mapping[str, Any] | None = None,
           calendar_features: Iterable[str] | None = None) -> CovariateOptions:
        if isinstance(holidays, str):
            holidays = {"country": holidays}
        for name, given in (("hist_exog_list", hist_exog_list), ("categorical_exog_list", categorical_exog_list),
                            ("calendar_features", calendar_features)):
            if isinstance(given, str):
                raise TypeError(f"{name} takes a list of names, not the string {given!r}")
        return cls(X_df=X_df, hist_exog_list=tuple(hist_exog_list or ()),
                   categorical_exog_list=tuple(categorical_exog_list or ()),
                   holidays=dict(holidays) if holidays is not None else None,
                   calendar_features=tuple(calendar_features or ()))

    def body_fields(self) -> dict[str, Any]:
        """The request-wide fields of POST /forecast (and a JSON batch)."""
        out: dict[str, Any] = {}
        if self.holidays is not None:
            out["holidays"] = dict(self.holidays)
        if self.calendar_features:
            out["calendar_features"] = list(self.calendar_features)
        return out

    def query_fields(self) -> dict[str, Any]:
        """The same fields as a CSV batch's query string takes them."""
        out: dict[str, Any] = {}
        if self.holidays is not None:
            for key, value in self.holidays.items():
                if value is not None:
                    out[f"holidays_{key}"] = value
        for name in ("calendar_features", "hist_exog_list", "categorical_exog_list"):
            if getattr(self, name):
                out[name] = ",".join(getattr(self, name))
        return out


@dataclass(frozen=True)
class CovariateSummary:
    """The answer's ``covariates`` object: whether the model used them (None: the forecast was asked without
    any), the design columns, why they were not used, and the holidays that fall in the horizon."""

    used: bool
    names: list[str] = field(default_factory=list)
    note: str | None = None
    holidays_in_horizon: list[dict[str, str]] = field(default_factory=list)

    @classmethod
    def from_json(cls, body: Any) -> CovariateSummary | None:
        if not isinstance(body, Mapping):
            return None
        return cls(used=bool(body.get("used")), names=[str(n) for n in body.get("names") or []],
                   note=body.get("note"), holidays_in_horizon=list(body.get("holidays_in_horizon") or []))


def split_target(series: Any, target_col: str | None) -> tuple[Any, Any]:
    """A DataFrame of the series and its covariates as (the target Series, the covariate frame or None)."""
    import pandas as pd

    if not isinstance(series, pd.DataFrame) or series.shape[1] == 1 and target_col is None:
        return series, None
    if target_col is None:
        target_col = next((name for name in TARGET_NAMES if name in series.columns), None)
        if target_col is None:
            raise ValueError(f"a DataFrame with covariates needs its target column named: pass target_col= "
                             f"(columns: {', '.join(map(str, series.columns))})")
    if target_col not in series.columns:
        raise ValueError(f"the frame has no column {target_col!r}")
    exog = series.drop(columns=[target_col])
    return series[target_col], exog if exog.shape[1] else None


def single_series_covariates(exog: Any, options: CovariateOptions, horizon: int) -> list[dict[str, Any]]:
    """POST /forecast's ``covariates`` of one series: ``exog`` is the history's covariate columns (indexed like
    the series), ``options.X_df`` their future values, one row per step of the horizon (indexed by the
    future timestamps, or with a ``ds``/``timestamp`` column)."""
    names = [str(name) for name in exog.columns] if exog is not None else []
    future = _future_frame(options.X_df)
    futures = _checked_names(names, [str(c) for c in future.columns] if future is not None else [], options)
    if future is not None and len(future) != horizon:
        raise ValueError(f"X_df has {len(future)} rows; it needs one per step of the horizon ({horizon})")
    return [
        {"name": name, "history": _cells(exog[name], name in options.categorical_exog_list),
         **({"future": _cells(future[name], name in options.categorical_exog_list)} if name in futures else {})}
        for name in names
    ]


def _future_frame(X_df: Any) -> Any:  # noqa: N803
    import pandas as pd

    if X_df is None:
        return None
    if not isinstance(X_df, pd.DataFrame):
        raise TypeError(f"X_df must be a pandas DataFrame, not {type(X_df).__name__}")
    frame = X_df.drop(columns=[c for c in ("unique_id",) if c in X_df.columns])
    for time_col in ("ds", "timestamp"):
        if time_col in frame.columns:
            frame = frame.sort_values(time_col, kind="stable").drop(columns=[time_col])
            break
    else:
        if isinstance(frame.index, pd.DatetimeIndex):
            frame = frame.sort_index()
    return frame


def _checked_names(names: Sequence[str], future_names: Sequence[str], options: CovariateOptions) -> set[str]:
    """The covariates with future values; ValueError for a column no list or frame accounts for."""
    past_only = set(options.hist_exog_list)
    for listed, label in ((options.hist_exog_list, "hist_exog_list"),
                          (options.categorical_exog_list, "categorical_exog_list")):
        unknown = [name for name in listed if name not in names]
        if unknown:
            raise ValueError(f"{label} names {unknown}, which the history frame has no column for")
    extra = [name for name in future_names if name not in names]
    if extra:
        raise ValueError(f"X_df has columns the history frame lacks: {extra}")
    both = [name for name in future_names if name in past_only]
    if both:
        raise ValueError(f"{both} are in hist_exog_list (known only over the history) and in X_df; name each once")
    unaccounted = [name for name in names if name not in past_only and name not in future_names]
    if unaccounted:
        raise ValueError(f"the history frame's columns {unaccounted} are neither in X_df (future values) nor in "
                         "hist_exog_list (known only over the history); add them to one, or drop them")
    return set(future_names)


def _cells(column: pd.Series, categorical: bool) -> list[Any]:
    """Numbers (and booleans, as 0 and 1) as floats; text and categories (and numbers of a categorical covariate)
    as text. A missing value goes as NaN, which the service names in a 422."""
    import pandas as pd

    if categorical or not pd.api.types.is_numeric_dtype(column):
        return [None if pd.isna(v) else _text(v) for v in column.tolist()]
    return [float(v) for v in column.to_numpy(dtype="float64").tolist()]


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


# -- batches: one long frame with the future rows ---------------------------------------------------------


def with_future_rows(df: Any, options: CovariateOptions, horizon: int, id_col: str, time_col: str,
                     value_col: str) -> tuple[Any, tuple[str, ...]]:
    """A batch's long frame with each series' future rows appended (its ``X_df`` rows, value empty), as the
    service's CSV upload takes them, and the covariate columns in upload order. A backtest (``horizon`` 0) takes
    no X_df: its covariates span the series."""
    import numpy as np
    import pandas as pd

    names = [str(c) for c in df.columns if c not in (id_col, time_col, value_col)]
    X_df = options.X_df  # noqa: N806
    if X_df is not None and not isinstance(X_df, pd.DataFrame):
        raise TypeError(f"X_df must be a pandas DataFrame, not {type(X_df).__name__}")
    if X_df is not None and not horizon:
        raise ValueError("a backtest takes no X_df: each window's horizon takes the covariates' actual values")
    future_names = [str(c) for c in X_df.columns if c not in (id_col, time_col)] if X_df is not None else []
    if horizon:
        _checked_names(names, future_names, options)
    else:
        for label, listed in (("hist_exog_list", options.hist_exog_list),
                              ("categorical_exog_list", options.categorical_exog_list)):
            unknown = [name for name in listed if name not in names]
            if unknown:
                raise ValueError(f"{label} names {unknown}, which the frame has no column for")
    if X_df is None:
        return df, tuple(names)
    missing = [c for c in (id_col, time_col) if c not in X_df.columns]
    if missing:
        raise ValueError(f"X_df has no column {missing[0]!r}; it is a long frame like the history "
                         f"({id_col}, {time_col} and the future covariates)")
    counts = X_df.groupby(id_col, sort=False).size()
    ids = pd.unique(df[id_col])
    short = [i for i in ids if counts.get(i, 0) != horizon]
    if short:
        raise ValueError(f"X_df needs {horizon} rows (the horizon) for every series; series {short[0]!r} has "
                         f"{int(counts.get(short[0], 0))}")
    history = df[[id_col, time_col, value_col, *names]]
    # Integer columns as floats, so that the future rows' empty cells (NaN) keep one dtype per column.
    history = history.astype({name: "float64" for name in (value_col, *names) if history[name].dtype.kind in "iub"
                              and name not in options.categorical_exog_list})
    future = X_df[[id_col, time_col, *future_names]].copy()
    future[value_col] = float("nan")
    for name in names:
        if name not in future.columns:  # a past-only covariate: no future value
            kind = history[name].dtype.kind
            future[name] = pd.Series(np.nan if kind == "f" else None, index=future.index,
                                     dtype="float64" if kind == "f" else object)
    future = future[[id_col, time_col, value_col, *names]]
    combined = pd.concat([history.assign(_future=0), future.assign(_future=1)], ignore_index=True)
    # Each series' future rows right after its history: the upload is split series by series as it is read.
    combined["_series"] = pd.factorize(combined[id_col])[0]
    combined = combined.sort_values(["_series", "_future"], kind="stable", ignore_index=True)
    return combined.drop(columns=["_series", "_future"]), tuple(names)


def cell_texts(column: pd.Series, categorical: bool) -> list[str]:
    """One CSV cell per row of a covariate column: numbers in their shortest exact form, text as the csv module
    quotes it, a missing value as an empty cell."""
    import pandas as pd

    from forecast_client._batches import _csv_field

    if not categorical and pd.api.types.is_numeric_dtype(column):
        values = column.to_numpy(dtype="float64").tolist()
        return ["" if v != v else repr(v) for v in values]
    return ["" if pd.isna(v) else _csv_field(_text(v)) for v in column.tolist()]
