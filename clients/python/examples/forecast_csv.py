"""Forecast a CSV time series with the forecast service: CSV in, forecast CSV out, and a PNG chart when
matplotlib is installed.

    FORECAST_URL=http://127.0.0.1:8000 FORECAST_API_KEY=ak_... \\
        python forecast_csv.py history.csv --horizon 24 --output forecast.csv --chart forecast.png

The input has a header row; the timestamp column is the first one unless --timestamp-column names it, and
the value column the second unless --value-column does. The frequency is inferred from the timestamps
unless --frequency is given.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pandas as pd
from forecast_client import Client, ForecastClientError, ForecastResult

# The service's own timestamp form; text already in it is sent exactly as written.
SERVICE_FORM = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?(Z|[+-]\d\d:\d\d)?")


def read_history(
    path: Path, timestamp_column: str | None, value_column: str | None
) -> tuple[pd.Series | tuple[list[str], list[float]], pd.Series]:
    """What to send, and the same history as a Series on a DatetimeIndex for the chart."""
    frame = pd.read_csv(path, dtype=str)  # timestamps as written, not as pandas would guess them
    if frame.shape[1] < 2:
        raise SystemExit(f"{path}: need a timestamp column and a value column, found {list(frame.columns)}")
    texts = (frame[timestamp_column] if timestamp_column else frame.iloc[:, 0]).astype(str).str.strip()
    values = frame[value_column] if value_column else frame.iloc[:, 1]
    numbers = values.astype(float).to_numpy()
    offsets = texts.str.extract(r"(Z|[+-]\d\d:\d\d)$")[0]
    # Offsets that change inside the file (a DST change) share no fixed-offset dtype; in UTC they do.
    mixed = offsets.notna().all() and offsets.nunique() > 1
    index = pd.DatetimeIndex(pd.to_datetime(texts, format="ISO8601", utc=bool(mixed)))
    history = pd.Series(numbers, index=index, name=values.name)
    if texts.map(lambda t: SERVICE_FORM.fullmatch(t) is not None).all():
        return (texts.tolist(), numbers.tolist()), history
    return history, history


def write_forecast(result: ForecastResult, path: Path) -> None:
    # The service's own timestamp text, so the file reads back exactly as the service wrote it.
    pd.DataFrame(
        {"timestamp": result.timestamps, "median": result.median, "lower": result.lower, "upper": result.upper}
    ).to_csv(path, index=False)


def draw_chart(history: pd.Series, result: ForecastResult, path: Path) -> bool:
    """Writes the chart and returns True, or returns False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    forecast = result.to_pandas()
    recent = history.iloc[-max(5 * len(forecast), 50):]
    figure, axes = plt.subplots(figsize=(10, 4))
    axes.plot(recent.index, recent.to_numpy(), color="black", linewidth=1, label="history")
    axes.plot(forecast.index, forecast["median"], color="tab:blue", label=f"forecast ({result.model})")
    axes.fill_between(
        forecast.index, forecast["lower"], forecast["upper"], color="tab:blue", alpha=0.25,
        label=f"{result.confidence:.0%} interval",
    )
    axes.legend(loc="upper left")
    axes.set_title(f"{history.name or 'series'}: {len(forecast)} x {result.frequency}")
    figure.autofmt_xdate()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("input", type=Path, help="CSV file with a header row")
    parser.add_argument("--horizon", type=int, required=True, help="how many steps to forecast (1-100)")
    parser.add_argument("--output", type=Path, default=Path("forecast.csv"))
    parser.add_argument("--chart", type=Path, default=Path("forecast.png"))
    parser.add_argument("--timestamp-column")
    parser.add_argument("--value-column")
    parser.add_argument("--frequency", help="Seconds ... Yearly, or a pandas alias such as 5min; inferred if absent")
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--model", help="a model id from GET /models")
    parser.add_argument("--url", help="service URL (default: $FORECAST_URL)")
    args = parser.parse_args(argv)

    to_send, history = read_history(args.input, args.timestamp_column, args.value_column)
    try:
        with Client(args.url) as client:  # the key comes from FORECAST_API_KEY
            result = client.forecast(
                to_send, args.horizon, frequency=args.frequency, confidence=args.confidence, model=args.model
            )
    except (ForecastClientError, ValueError, TypeError) as exc:
        print(f"forecast failed: {exc}", file=sys.stderr)
        return 1
    write_forecast(result, args.output)
    print(f"wrote {len(result)} forecast rows to {args.output} (model {result.model})")
    if result.fallback:
        print(f"note: {result.fallback}", file=sys.stderr)
    if result.warning:
        print(f"note: {result.warning}", file=sys.stderr)
    if draw_chart(history, result, args.chart):
        print(f"wrote chart to {args.chart}")
    else:
        print("matplotlib is not installed: no chart (pip install 'forecast-client[plot]')", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
