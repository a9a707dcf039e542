"""What the dashboard shows of a backtest batch: its summary, and one series' windows laid out for a chart."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson


def series_ids(outputs: Iterable[bytes]) -> list[str]:
    return [orjson.loads(line)["id"] for output in outputs for line in output.splitlines()]


def series_result(outputs: Iterable[bytes], unique_id: str) -> dict[str, Any] | None:
    for output in outputs:
        for line in output.splitlines():
            result = orjson.loads(line)
            if result["id"] == unique_id:
                return result
    return None


def chart_data(result: dict[str, Any]) -> dict[str, Any]:
    """One series' windows on one time axis: the actual values, and per model its median and interval. Where
    windows overlap (a step shorter than the horizon), the later cut-off's forecast is shown."""
    stamps = sorted({stamp for window in result["windows"] for stamp in window["timestamps"]})
    position = {stamp: i for i, stamp in enumerate(stamps)}
    actual: list[float | None] = [None] * len(stamps)
    models: dict[str, dict[str, list[float | None]]] = {}
    for window in result["windows"]:
        for stamp, value in zip(window["timestamps"], window["actual"], strict=True):
            actual[position[stamp]] = value
        for model_id, forecast in window["forecasts"].items():
            lines = models.setdefault(model_id, {name: [None] * len(stamps) for name in ("median", "lower", "upper")})
            for name in ("median", "lower", "upper"):
                for stamp, value in zip(window["timestamps"], forecast[name], strict=True):
                    lines[name][position[stamp]] = value
    return {"timestamps": stamps, "actual": actual, "models": models,
            "cutoffs": [window["cutoff"] for window in result["windows"]]}
