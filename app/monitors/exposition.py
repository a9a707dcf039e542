"""GET /monitors/metrics: the latest verdict of each series of each monitor as Prometheus gauges, so a Grafana
panel draws the value inside its expected range with plain PromQL.

One line per series per gauge, labelled ``monitor_id`` and ``monitor_name``, and for a labelled series its own
labels (app.monitors.series.public_labels) with its ``series_id``; so the cardinality is the account's series count
(at most MAX_SERIES_PER_MONITOR a monitor) times the gauges below. Gauges describe a series' latest stored point;
per monitor, its series count and the points the series cap refused."""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Row, and_, select

from app.db import Database
from app.monitors.records import monitor_points_table, monitor_series_table, monitors_table
from app.monitors.series import public_labels, stored_labels

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# name, help, the point's column
GAUGES: tuple[tuple[str, str, str], ...] = (
    ("forecast_monitor_value", "The latest point's value.", "value"),
    ("forecast_monitor_expected", "The value the detector expected for the latest point.", "expected"),
    ("forecast_monitor_lower_bound", "The lower end of the latest point's expected range.", "lower"),
    ("forecast_monitor_upper_bound", "The upper end of the latest point's expected range.", "upper"),
    ("forecast_monitor_anomaly_score", "The probability the latest point is not normal (0..1).", "score"),
    ("forecast_monitor_anomalous", "1 when the latest point is an anomaly, else 0.", "is_anomaly"),
    ("forecast_monitor_last_point_timestamp_seconds", "The latest point's time (Unix seconds).", "epoch"),
)
INFO = ("forecast_monitor_source_up", "Prometheus-backed monitors: 1 when the last read worked, else 0 (the "
        "monitor's source.message says why).")
SERIES = ("forecast_monitor_series", "The series the monitor follows (one per label set).")
REFUSED = ("forecast_monitor_series_refused_points_total", "Points refused because their new series would have "
           "passed the monitor's series cap (MAX_SERIES_PER_MONITOR).")


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float | bool | int) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    number = float(value)
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "+Inf" if number > 0 else "-Inf"
    return repr(number) if not number.is_integer() or abs(number) >= 1e15 else str(int(number))


_MONITOR = monitors_table.c
_SERIES = monitor_series_table.c
_POINT = monitor_points_table.c
# One row per series of the account's monitors (one for a monitor without series), with the series' latest point:
# the monitor's columns, the series' (series_id, labels) and the point's gauge columns, each None where the outer
# joins found nothing.
_ROWS = (
    select(_MONITOR.id, _MONITOR.name, _MONITOR.prometheus_query, _MONITOR.source_status, _MONITOR.series_refused,
           _SERIES.id.label("series_id"), _SERIES.labels, *(_POINT[column] for _, _, column in GAUGES))
    .outerjoin(monitor_series_table, _SERIES.monitor_id == _MONITOR.id)
    .outerjoin(monitor_points_table, and_(_POINT.monitor_id == _MONITOR.id, _POINT.series_id == _SERIES.id,
                                          _POINT.epoch == _SERIES.last_epoch))
    .order_by(_MONITOR.id, _SERIES.id)
)


def _lines(rows: list[Row[Any]], series_counts: dict[str, int]) -> Iterator[str]:
    monitors = {row.id: row for row in rows}
    own = {m.id: f'monitor_id="{_escape(m.id)}",monitor_name="{_escape(m.name)}"' for m in monitors.values()}
    labelled = []
    for row in rows:
        if row.series_id is None or row.epoch is None:
            continue
        extra = public_labels(stored_labels(row.labels), row.series_id) if row.labels not in (None, "{}") else {}
        text = own[row.id] + "".join(f',{name}="{_escape(value)}"' for name, value in extra.items())
        labelled.append((text, row))
    for name, help_text, column in GAUGES:
        yield f"# HELP {name} {help_text}"
        yield f"# TYPE {name} gauge"
        for text, point in labelled:
            yield f"{name}{{{text}}} {_number(getattr(point, column))}"
    name, help_text = INFO
    yield f"# HELP {name} {help_text}"
    yield f"# TYPE {name} gauge"
    for monitor in monitors.values():
        if monitor.prometheus_query is not None:
            yield f"{name}{{{own[monitor.id]}}} {1 if monitor.source_status == 'ok' else 0}"
    for (name, help_text), value in ((SERIES, lambda m: series_counts.get(m.id, 0)),
                                     (REFUSED, lambda m: m.series_refused)):
        yield f"# HELP {name} {help_text}"
        yield f"# TYPE {name} {'counter' if name.endswith('_total') else 'gauge'}"
        for monitor in monitors.values():
            yield f"{name}{{{own[monitor.id]}}} {value(monitor)}"


def render(*, database: Database, account_id: str) -> str:
    with database.transaction() as connection:
        rows = list(connection.execute(_ROWS.where(_MONITOR.account_id == account_id)))
    counts: dict[str, int] = {}
    for row in rows:
        if row.series_id is not None:
            counts[row.id] = counts.get(row.id, 0) + 1
    return "\n".join(_lines(rows, counts)) + "\n"


# The endpoint is not counted against a key's limits (a scraper calls it every few seconds), so what one
# request may cost is bounded instead: an account's exposition is rendered at most once per REUSE_SECONDS in a
# process, and every other request in that second gets the same text. Prometheus scrapes far less often.
REUSE_SECONDS = 1.0
# Accounts whose last rendering a process keeps; the least recently rendered goes first.
CACHED_ACCOUNTS = 1024
clock = time.monotonic


class RenderCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._texts: OrderedDict[str, tuple[float, str]] = OrderedDict()
        # One lock per account: a burst of requests at the end of a second renders once, not once per thread.
        self._rendering: dict[str, threading.Lock] = {}

    def text(self, *, database: Database, account_id: str) -> str:
        with self._lock:
            lock = self._rendering.setdefault(account_id, threading.Lock())
        with lock:
            with self._lock:
                kept = self._texts.get(account_id)
            now = clock()
            if kept is not None and now - kept[0] < REUSE_SECONDS:
                return kept[1]
            text = render(database=database, account_id=account_id)
            with self._lock:
                self._texts[account_id] = (now, text)
                self._texts.move_to_end(account_id)
                while len(self._texts) > CACHED_ACCOUNTS:
                    gone, _ = self._texts.popitem(last=False)
                    self._rendering.pop(gone, None)
            return text


renderings = RenderCache()
