"""A batch's stored results as the results endpoint and the dashboard stream them: CSV rows, one piece at a time."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator

from app.batches.one_series import BACKTEST, FORECAST

FORECAST_CSV_COLUMNS = ("unique_id", "timestamp", "lower", "median", "upper", "error")
BACKTEST_CSV_COLUMNS = ("unique_id", "cutoff", "timestamp", "actual", "model", "lower", "median", "upper", "error")
ANOMALY_CSV_COLUMNS = ("unique_id", "timestamp", "expected", "lower", "upper", "anomaly_score", "is_anomaly",
                       "direction", "error")


def csv_rows(outputs: Iterator[bytes], kind: str) -> Iterator[str]:
    columns = {FORECAST: FORECAST_CSV_COLUMNS, BACKTEST: BACKTEST_CSV_COLUMNS}.get(kind, ANOMALY_CSV_COLUMNS)
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(columns)
    for output in outputs:
        for line in output.splitlines():
            result = json.loads(line)
            if "error" in result:
                writer.writerow([result["id"], *[""] * (len(columns) - 2),
                                 json.dumps({"error": result["error"]}, separators=(",", ":"))])
            elif kind == BACKTEST:
                writer.writerows(
                    [result["id"], window["cutoff"], stamp, actual, model_id, lower, median, upper, ""]
                    for window in result["windows"]
                    for model_id, forecast in window["forecasts"].items()
                    for stamp, actual, lower, median, upper in zip(
                        window["timestamps"], window["actual"], forecast["lower"], forecast["median"],
                        forecast["upper"], strict=True)
                )
            elif kind == FORECAST:
                writer.writerows(
                    [result["id"], *row, ""] for row in zip(result["forecast_timestamps"], result["lower_bound"],
                                                            result["median"], result["upper_bound"], strict=True)
                )
            else:
                writer.writerows(
                    [result["id"], stamp, expected, lower, upper, score, "true" if flag else "false", direction or "",
                     ""]
                    for stamp, expected, lower, upper, score, flag, direction in zip(
                        result["timestamps"], result["expected"], result["lower_bound"], result["upper_bound"],
                        result["anomaly_score"], result["is_anomaly"], result["direction"], strict=True)
                )
        yield text.getvalue()
        text.seek(0)
        text.truncate()
    yield text.getvalue()
