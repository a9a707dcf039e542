"""A batch's stored results as the results endpoint and the dashboard stream them: CSV rows, one piece at a time."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from itertools import islice
from typing import Any

from app.batches.one_series import BACKTEST, FORECAST

FORECAST_CSV_COLUMNS = ("unique_id", "timestamp", "lower", "median", "upper", "error")
BACKTEST_CSV_COLUMNS = ("unique_id", "cutoff", "timestamp", "actual", "model", "lower", "median", "upper", "error")
ANOMALY_CSV_COLUMNS = ("unique_id", "timestamp", "expected", "lower", "upper", "anomaly_score", "is_anomaly",
                       "direction", "error")


# OWASP's CSV-injection defence: a spreadsheet takes a cell starting with one of these for a formula (a tab or
# carriage return can precede one), so such an id is written with a leading apostrophe, which spreadsheets
# show as text. An id that starts with an apostrophe itself gets one too, so a program reading the CSV undoes
# the defence exactly by removing one leading apostrophe (forecast_client does). Only ids are client text;
# the other cells are numbers, timestamps and the service's JSON.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "'")
# Rows gathered before a piece of the answer is handed on: few enough that a piece stays small (a row is at
# most a 200-character id and a few numbers), many enough that the per-piece cost is small.
_ROWS_PER_PIECE = 64


def safe_cell(text: str) -> str:
    """The id as a spreadsheet shows it without running it; the JSON lines keep every id as submitted."""
    return "'" + text if text.startswith(_FORMULA_STARTS) else text


def csv_rows(outputs: Iterator[bytes], kind: str) -> Iterator[str]:
    """The results as CSV, each series' result read from its stored JSON line and written a few rows at a
    time: what is held is one series' result and one small piece of text, whatever the ids or the horizon.
    Numbers are written by the csv module as repr() writes them: the shortest text that reads back as the
    same double."""
    columns = {FORECAST: FORECAST_CSV_COLUMNS, BACKTEST: BACKTEST_CSV_COLUMNS}.get(kind, ANOMALY_CSV_COLUMNS)
    text = io.StringIO()
    plain = csv.writer(text, lineterminator="\n")
    # The csv module quotes a field holding a line break only if that break is in its line terminator: an id
    # with a carriage return has its rows written with every field quoted, so it stays one field.
    quoted = csv.writer(text, lineterminator="\n", quoting=csv.QUOTE_ALL)
    plain.writerow(columns)
    for output in outputs:
        for line in output.splitlines():
            result = json.loads(line)
            unique_id = safe_cell(result["id"])
            writer = quoted if "\r" in unique_id else plain
            if "error" in result:
                writer.writerow([unique_id, *[""] * (len(columns) - 2),
                                 json.dumps({"error": result["error"]}, separators=(",", ":"))])
                continue
            rows: Iterator[list[Any]]
            if kind == BACKTEST:
                rows = (
                    [unique_id, window["cutoff"], stamp, actual, model_id, lower, median, upper, ""]
                    for window in result["windows"]
                    for model_id, forecast in window["forecasts"].items()
                    for stamp, actual, lower, median, upper in zip(
                        window["timestamps"], window["actual"], forecast["lower"], forecast["median"],
                        forecast["upper"], strict=True)
                )
            elif kind == FORECAST:
                rows = (
                    [unique_id, *row, ""] for row in zip(result["forecast_timestamps"], result["lower_bound"],
                                                         result["median"], result["upper_bound"], strict=True))
            else:
                rows = (
                    [unique_id, stamp, expected, lower, upper, score, "true" if flag else "false", direction or "",
                     ""]
                    for stamp, expected, lower, upper, score, flag, direction in zip(
                        result["timestamps"], result["expected"], result["lower_bound"], result["upper_bound"],
                        result["anomaly_score"], result["is_anomaly"], result["direction"], strict=True)
                )
            while part := list(islice(rows, _ROWS_PER_PIECE)):
                writer.writerows(part)
                yield text.getvalue()
                text.seek(0)
                text.truncate()
            del result
    yield text.getvalue()
