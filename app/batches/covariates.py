"""Covariates and holidays in batches (docs/batches.md, Covariates).

The batch-wide fields are POST /forecast's (``holidays``, ``calendar_features``) and Nixtla's two lists
(``hist_exog_list``: covariates known only over the history; ``categorical_exog_list``: covariates whose values
are categories even when written as numbers). A CSV upload sends them in its query string; its covariates are the
columns past the series' three, and the future values of a forecast batch are each series' last
``forecast_horizon`` rows, with an empty value cell.

Every series ends up in POST /forecast's form, ``covariates: [{"name", "history", "future"}]``, so it is judged
and computed as that request would be. A backtest's covariates span the whole series: each window takes their
values up to its cut-off as history and the values over its horizon (what actually happened) as future."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from marshmallow import fields, validate
from werkzeug.datastructures import MultiDict

from app.errors import InvalidInput
from app.forecast.calendar import CALENDAR_FEATURES, CovariateError, HolidaySpec, check_holiday_spec
from app.forecast.covariates import MAX_COVARIATES, MAX_NAME_LENGTH
from app.series.timestamps import TimestampError, parse_axis
from app.web.validation import problem

NAME_LENGTH = (1, MAX_NAME_LENGTH)
RESERVED_NAMES = frozenset({"unique_id", "timestamp", "value", "ds", "y"})
LIST_FIELDS = ("hist_exog_list", "categorical_exog_list")
# Query-string names of a CSV batch's fields that have no flat form of their own.
QUERY_LISTS = (*LIST_FIELDS, "calendar_features")
QUERY_HOLIDAYS = {"holidays_country": "country", "holidays_subdivision": "subdivision", "holidays_window": "window"}
BODY_FIELDS = ("holidays", "calendar_features", *LIST_FIELDS)



def _name_list(description: str) -> fields.List:
    return fields.List(
        fields.String(validate=validate.Length(*NAME_LENGTH, error="Must be between {min} and {max} characters")),
        validate=validate.Length(max=MAX_COVARIATES, error="Must list at most {max} covariates."),
        metadata={"description": description},
    )


HIST_EXOG_FIELD = _name_list("Covariates known only over the history (past-only): in a CSV upload they need no "
                             "future values; in a backtest each window takes them without its horizon's values.")
CATEGORICAL_EXOG_FIELD = _name_list("Covariates whose values are categories even when written as numbers.")


def body_from_query(args: MultiDict[str, str], body: dict[str, Any]) -> None:
    """A CSV batch's covariate fields from the query string into ``body`` in their JSON form:
    ``hist_exog_list=a,b`` (or repeated), ``calendar_features=day_of_week,month``, and ``holidays_country``,
    ``holidays_subdivision``, ``holidays_window`` as the ``holidays`` object."""
    for name in QUERY_LISTS:
        if name in args:
            body[name] = [item for given in args.getlist(name) for item in given.split(",") if item != ""]
    holidays: dict[str, Any] = {}
    for name, key in QUERY_HOLIDAYS.items():
        if name in args:
            text = args[name]
            holidays[key] = int(text) if key == "window" and text.lstrip("-").isdigit() and len(text) < 6 else text
            body.pop(name, None)
    if holidays:
        body["holidays"] = holidays


def check_batch_wide(holidays: HolidaySpec | None, calendar: Sequence[str]) -> None:
    """The holidays and calendar features every series of a batch is forecast with, judged by POST /forecast's
    rules (app.forecast.calendar): a CovariateError (422) naming the field."""
    if holidays is not None:
        check_holiday_spec(holidays)
    seen: set[str] = set()
    for index, feature in enumerate(calendar):
        if feature not in CALENDAR_FEATURES:
            raise CovariateError(f"calendar_features[{index}]", "Must be one of: " + ", ".join(CALENDAR_FEATURES),
                                 feature)
        if feature in seen:
            raise CovariateError(f"calendar_features[{index}]", "duplicate calendar feature", feature)
        seen.add(feature)


def header_problems(names: Sequence[str], declared: Mapping[str, Iterable[str]]) -> list[dict[str, Any]]:
    """What is wrong with a CSV header's covariate columns (``names``: every column past the series' three) and
    with the lists naming them (``declared``: hist_exog_list, categorical_exog_list)."""
    found: list[dict[str, Any]] = []
    seen: set[str] = set()
    for name in names:
        if not NAME_LENGTH[0] <= len(name) <= NAME_LENGTH[1]:
            found.append(problem("header", f"a column name must be between {NAME_LENGTH[0]} and {NAME_LENGTH[1]} "
                                 "characters", name))
        elif name in RESERVED_NAMES:
            found.append(problem("header", "a covariate column may not take a name of the series' columns "
                                 "(unique_id, timestamp, value, ds, y)", name))
        elif name in seen:
            found.append(problem("header", "a column named twice", name))
        seen.add(name)
    if len(names) > MAX_COVARIATES:
        found.append(problem("header", f"too many covariate columns (at most {MAX_COVARIATES})",
                             f"{len(names)} columns", maximum=MAX_COVARIATES))
    for field, listed in declared.items():
        for name in listed:
            if name not in seen:
                found.append(problem(field, "names no covariate column of the CSV", name))
    return found


@dataclass(frozen=True)
class CovariateFields:
    """A batch's lists naming covariates, as stored with it (its holidays and calendar features are read into
    each series' request as POST /forecast reads them)."""

    past_only: frozenset[str] = frozenset()
    categorical: frozenset[str] = frozenset()

    @classmethod
    def of(cls, chosen: Mapping[str, Any]) -> CovariateFields:
        return cls(past_only=frozenset(chosen.get("hist_exog_list") or ()),
                   categorical=frozenset(chosen.get("categorical_exog_list") or ()))


def json_series_problems(series: Sequence[Mapping[str, Any]], chosen: Mapping[str, Any], *,
                         backtest: bool) -> list[dict[str, Any]]:
    """The problems of a JSON batch's covariates that the request alone shows (400, nothing stored): a list naming
    a covariate no series carries, a past-only covariate sent with future values, a backtest covariate with
    future values (a backtest's windows take the series' own)."""
    found: list[dict[str, Any]] = []
    spec = CovariateFields.of(chosen)
    carried: set[str] = set()
    for index, one in enumerate(series):
        for position, covariate in enumerate(one.get("covariates") or ()):
            name = covariate.get("name")
            carried.add(name)
            future = covariate.get("future")
            if future is None:
                continue
            where = f"series[{index}].covariates[{position}].future"
            if backtest:
                found.append(problem(where, "a backtest's covariates have no future: their history spans the "
                                     "series, and each window's horizon takes its actual values", future))
            elif name in spec.past_only:
                found.append(problem(where, "a covariate of hist_exog_list is known only over the history",
                                     future))
    for field in LIST_FIELDS:
        for name in chosen.get(field) or ():
            if name not in carried:
                found.append(problem(field, "names no covariate of any series", name))
    return found


# -- a CSV series into POST /forecast's form -------------------------------------------------------------


def csv_series(series: Mapping[str, Any], spec: CovariateFields, *, horizon: int | None,
               frequency: str) -> dict[str, Any]:
    """A CSV series (``columns``: name -> its cells as text) in POST /forecast's form. ``horizon``: a forecast
    batch's, whose future rows are taken off the end when some covariate is not past-only; None for a backtest
    (its covariates span the series). A bad cell raises InvalidInput naming the covariate and the row."""
    columns: Mapping[str, list[str]] = series["columns"]
    timestamps, values = list(series["timestamps"]), list(series["values"])
    future_rows = 0
    if horizon is not None and any(name not in spec.past_only for name in columns):
        future_rows = horizon
        _check_future_rows(timestamps, values, horizon, frequency)
        timestamps, values = timestamps[:-horizon], values[:-horizon]
    covariates = []
    for position, (name, cells) in enumerate(columns.items()):
        where = f"series[0].covariates[{position}]"
        history_cells = cells[:len(cells) - future_rows]
        categorical = name in spec.categorical or not any(_number(cell) is not None for cell in history_cells)
        covariate: dict[str, Any] = {"name": name,
                                     "history": _column(history_cells, categorical, name, f"{where}.history", 0)}
        if future_rows:
            future_cells = cells[len(cells) - future_rows:]
            if name in spec.past_only:
                given = [row for row, cell in enumerate(future_cells) if cell.strip()]
                if given:
                    raise _bad_cell(f"{where}.future", name, "a covariate of hist_exog_list is known only over the "
                                    "history: leave its cells of the future rows empty", future_cells[given[0]],
                                    len(history_cells) + given[0])
            else:
                covariate["future"] = _column(future_cells, categorical, name, f"{where}.future", len(history_cells))
        covariates.append(covariate)
    return {"id": series["id"], "timestamps": timestamps, "values": values, "covariates": covariates}


def _check_future_rows(timestamps: list[Any], values: list[Any], horizon: int, frequency: str) -> None:
    """The last ``horizon`` rows are the future: no value, and timestamps that continue the series."""
    if len(values) <= horizon:
        raise InvalidInput(
            "Invalid series data: a series with future covariates needs its history and then forecast_horizon "
            "future rows.",
            details=problem("series[0]", f"too few rows for a history and {horizon} future rows",
                            f"{len(values)} rows", minimum=horizon + 1))
    for row in range(len(values) - horizon, len(values)):
        if values[row] is not None:
            raise InvalidInput(
                "Invalid series data: a future row (one of each series' last forecast_horizon rows) has a value.",
                details=problem("series[0].values", "a future row must leave value empty: its covariates are "
                                "known ahead, its value is what the forecast is for", values[row], index=row))
    try:
        parse_axis(timestamps, frequency)
    except TimestampError as exc:
        if exc.index is None or exc.index < len(timestamps) - horizon:
            return  # a defect of the history itself: the series check names it as POST /forecast does
        raise InvalidInput(
            f"Invalid series data: the future rows' timestamps must continue the series: {exc.issue}.",
            details=problem("series[0].timestamps", f"future rows: {exc.issue}", exc.provided, index=exc.index),
        ) from None


def _number(cell: Any) -> float | None:
    try:
        return float(cell)
    except (TypeError, ValueError):
        return None


def _column(cells: list[str], categorical: bool, name: str, where: str, first_row: int) -> list[Any]:
    out: list[Any] = []
    for row, cell in enumerate(cells):
        text = cell.strip() if isinstance(cell, str) else ""
        if not text:
            raise _bad_cell(where, name, "missing covariate value (empty cell)", cell, first_row + row)
        if categorical:
            out.append(text)
            continue
        number = _number(text)
        if number is None:
            raise _bad_cell(where, name, "not a number in a numeric covariate (list it in categorical_exog_list "
                            "to take its values as categories)", text, first_row + row)
        out.append(number)
    return out


def _bad_cell(where: str, name: str, issue: str, provided: Any, row: int) -> InvalidInput:
    return InvalidInput(f"Invalid covariate {name}: {issue}.",
                        details=problem(where, issue, provided, index=row, name=name))


# -- a backtest window ----------------------------------------------------------------------------------


def window(covariates: Sequence[Mapping[str, Any]], cut: int, horizon: int,
           past_only: frozenset[str]) -> list[dict[str, Any]]:
    """The covariates of the window whose history is the first ``cut`` points: their values up to the cut-off
    as history, and (unless past-only) the values that followed over the horizon as future."""
    return [
        {"name": c["name"], "history": list(c["history"][:cut]),
         "future": None if c["name"] in past_only else list(c["history"][cut:cut + horizon])}
        for c in covariates
    ]


def categorical_as_text(covariates: Sequence[Mapping[str, Any]], spec: CovariateFields) -> list[dict[str, Any]]:
    """JSON covariates named in categorical_exog_list with their numbers as text (categories): 1 and 1.0 are
    one category, as they are one number."""
    if not spec.categorical:
        return [dict(c) for c in covariates]
    out = []
    for covariate in covariates:
        one = dict(covariate)
        if one["name"] in spec.categorical:
            for part in ("history", "future"):
                if one.get(part) is not None:
                    one[part] = [_category(value) for value in one[part]]
        out.append(one)
    return out


def _category(value: Any) -> Any:
    """A number as the text of its category (integers without a fraction); anything else as sent, for the
    covariate check to judge."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    if isinstance(value, float) and not math.isfinite(value):
        return value
    return str(int(value)) if float(value).is_integer() else repr(float(value))
