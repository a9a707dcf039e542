"""Prometheus' query_range API as a monitor's read uses it: which steps a read asks for (whole multiples of the
monitor's step since the Unix epoch, read SETTLE_SECONDS after their time, at most CHUNK_POINTS steps and
CHUNK_SAMPLES samples at once), the call, and its answer parsed into each series' finite points or the reason
there are none. No database here: app.monitors.prometheus.reader claims monitors, reads them with this and stores what
it yields."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from app.monitors import sources
from app.monitors.alerts.webhooks import send_request
from app.monitors.label_sets import Labels
from app.web.fields import MAX_ABS_VALUE

SETTLE_SECONDS = 1.0
CHUNK_POINTS = 1000
# Samples one read asks for at most, over all the monitor's series: the steps of a read are fewer the more series
# the monitor follows (one step of 200,000 series at the least).
CHUNK_SAMPLES = 200_000
# Prometheus answers read this much at most (a sample is about 25 bytes of JSON); a longer one is asked again for
# half the steps.
MAX_ANSWER_BYTES = 32 * 1024 * 1024

OK = sources.OK
NO_SERIES = "no_series"
UNREACHABLE = "unreachable"
TIMEOUT = "timeout"
ERROR = "error"


def step_text(epoch: int) -> str:
    """A step's time as messages and stored points write it."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Claimed:
    """A monitor as the poller reads it."""

    id: str
    account_id: str
    data_frequency: str
    retention_points: int
    prometheus_url: str
    prometheus_query: str
    series_count: int  # the series it follows so far
    read_until: int | None
    claim: str | None = None


@dataclass(frozen=True)
class Window:
    start: int
    end: int
    step: int
    latest: int  # the newest step that can be read now

    @property
    def catching_up(self) -> bool:
        return self.end < self.latest


def window(monitor: Claimed, now: float, *, most_steps: int = CHUNK_POINTS) -> Window | None:
    """The steps the next read asks for; None when none is readable yet."""
    step = sources.STEP_SECONDS[monitor.data_frequency]
    latest = math.floor((now - SETTLE_SECONDS) / step) * step
    cursor = monitor.read_until
    if cursor is None:
        start = latest - (min(monitor.retention_points, sources.BACKFILL_POINTS) - 1) * step
    else:
        start = (cursor // step + 1) * step
    if start > latest:
        return None
    steps = max(1, min(most_steps, CHUNK_POINTS, CHUNK_SAMPLES // max(1, monitor.series_count)))
    return Window(start=start, end=min(latest, start + (steps - 1) * step), step=step, latest=latest)


@dataclass
class SeriesRead:
    labels: Labels
    epochs: list[int]
    values: list[float]


@dataclass
class ReadResult:
    status: str
    message: str
    series: list[SeriesRead]
    too_large: bool = False


def query_range(monitor: Claimed, span: Window, *, allow_private: bool, timeout: float) -> ReadResult:
    """One query_range call and what it yields: each series' finite points, or the reason there are none."""
    form = urlencode({"query": monitor.prometheus_query, "start": span.start, "end": span.end, "step": span.step,
                      "timeout": f"{max(1000, int((timeout - 0.5) * 1000))}ms"}).encode()
    answer = send_request(
        method="POST", url=monitor.prometheus_url.rstrip("/") + "/api/v1/query_range", body=form,
        headers={"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"},
        allow_private=allow_private, timeout=timeout, max_answer_bytes=MAX_ANSWER_BYTES,
    )
    if answer.truncated:
        return ReadResult(ERROR, f"Prometheus answered more than {MAX_ANSWER_BYTES:,} bytes for "
                          f"{(span.end - span.start) // span.step + 1} steps", [], too_large=True)
    if answer.status_code is None:
        error = answer.error or "no answer"
        if "timed out" in error or "TimeoutError" in error:
            return ReadResult(TIMEOUT, f"Prometheus did not answer within {timeout:g} s: {error}", [], [])
        return ReadResult(UNREACHABLE, f"Prometheus is unreachable: {error}", [], [])
    try:
        document = json.loads(answer.body)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
        document = None
    if not isinstance(document, dict):
        return ReadResult(ERROR, f"Prometheus answered HTTP {answer.status_code} without a JSON body", [], [])
    if document.get("status") != "success":
        kind = document.get("errorType") or f"HTTP {answer.status_code}"
        if kind == "timeout":
            return ReadResult(TIMEOUT, f"The query timed out in Prometheus: {document.get('error')}", [], [])
        return ReadResult(ERROR, f"Prometheus refused the query ({kind}): {document.get('error')}", [], [])
    data = document.get("data") or {}
    series = data.get("result")
    if data.get("resultType") != "matrix" or not isinstance(series, list):
        return ReadResult(ERROR, f"The query yields a {data.get('resultType')!r}, not a range of series", [])
    if not series:
        return ReadResult(NO_SERIES, f"The query yields no series between {step_text(span.start)} and "
                          f"{step_text(span.end)}", [])
    found: list[SeriesRead] = []
    skipped = 0
    for entry in series:
        labels = _series_labels(entry.get("metric") if isinstance(entry, dict) else None)
        rows = entry.get("values") if isinstance(entry, dict) else None
        if labels is None or not isinstance(rows, list):
            return ReadResult(ERROR, "Prometheus answered a series without a label set and a list of values", [])
        read = SeriesRead(labels, [], [])
        for row in rows:
            point = _sample(row, span)
            if point is None:
                skipped += 1
                continue
            read.epochs.append(point[0])
            read.values.append(point[1])
        if read.epochs:
            found.append(read)
    message = f"Read up to {step_text(span.end)}: {len(series):,} series."
    if skipped:
        message += (f" {skipped} samples were skipped: not finite, out of range, off the monitor's steps, "
                    "outside the window asked for, or not a [time, value] pair.")
    return ReadResult(OK, message, found)


def _series_labels(metric: Any) -> Labels | None:
    """A series' labels from the answer, sorted; None for anything but an object of strings."""
    if not isinstance(metric, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metric.items()):
        return None
    return tuple(sorted(metric.items()))


def _sample(row: Any, span: Window) -> tuple[int, float] | None:
    """A [time, "value"] pair of the answer as (epoch, value), or None for anything that cannot be judged: a
    malformed pair, a value that is NaN (Prometheus' "no value"), infinite or out of range, a time off the
    monitor's steps or outside the window asked for (a point stored far ahead would freeze the monitor)."""
    if not isinstance(row, list | tuple) or len(row) != 2 or not isinstance(row[1], str | int | float):
        return None
    stamp, raw = row
    if isinstance(stamp, bool) or not isinstance(stamp, str | int | float):
        return None
    try:
        value, moment = float(raw), float(stamp)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(value) or abs(value) > MAX_ABS_VALUE or not math.isfinite(moment):
        return None
    epoch = round(moment)
    if epoch != moment or not span.start <= epoch <= span.end or (epoch - span.start) % span.step:
        return None
    return epoch, value
