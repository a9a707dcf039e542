"""GET /monitors/metrics: the latest verdict of each series of each monitor as Prometheus gauges, so a Grafana
panel draws the value inside its expected range with plain PromQL.

One line per series per gauge, labelled ``monitor_id`` and ``monitor_name``, and for a labelled series its own
labels (app.monitors.label_sets.public_labels) with its ``series_id``; so the cardinality is the account's series count
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
from app.monitors.label_sets import public_labels, stored_labels
from app.monitors.records import monitor_points_table, monitor_series_table, monitors_table

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
    # NaN and the infinities are not integers.
    if number.is_integer() and -1e15 < number < 1e15:
        return str(int(number))
    if number != number:
        return "NaN"
    if number in (math.inf, -math.inf):
        return "+Inf" if number > 0 else "-Inf"
    return repr(number)


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
_FIRST_GAUGE = 7  # the position of GAUGES' first column in a row of _ROWS
ROWS_AT_ONCE = 5000  # rows fetched from the database at a time


class _Collected:
    """What the exposition says, read from the rows as they stream in (no row is kept): each monitor's own labels,
    kind, source state and counts, and per exposed series its label text and its gauges' values column by column."""

    def __init__(self) -> None:
        self.own: dict[str, str] = {}
        self.monitors: dict[str, tuple[bool, bool, int]] = {}  # Prometheus-backed, source up, points refused
        self.series_counts: dict[str, int] = {}
        self.texts: list[str] = []
        self.columns: list[list[Any]] = [[] for _ in GAUGES]

    def add(self, row: Row[Any]) -> None:
        own = self.own.get(row.id)
        if own is None:
            own = self.own[row.id] = f'monitor_id="{_escape(row.id)}",monitor_name="{_escape(row.name)}"'
            self.monitors[row.id] = (row.prometheus_query is not None, row.source_status == "ok", row.series_refused)
        if row.series_id is None:
            return
        self.series_counts[row.id] = self.series_counts.get(row.id, 0) + 1
        if row.epoch is None:
            return
        extra = public_labels(stored_labels(row.labels), row.series_id) if row.labels not in (None, "{}") else {}
        self.texts.append(own + "".join(f',{name}="{_escape(value)}"' for name, value in extra.items()))
        for column, value in zip(self.columns, row[_FIRST_GAUGE:], strict=True):
            column.append(value)


def _blocks(found: _Collected) -> Iterator[bytes]:
    """The exposition, one gauge's lines a block: a block is encoded as soon as it is written, so a rendering holds
    one gauge's lines and the blocks so far, never every line at once."""
    for (name, help_text, _), column in zip(GAUGES, found.columns, strict=True):
        lines = [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        lines.extend(f"{name}{{{text}}} {value}" for text, value in zip(found.texts, map(_number, column), strict=True))
        yield ("\n".join(lines) + "\n").encode()
    own = found.own
    name, help_text = INFO
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
    lines.extend(f"{name}{{{own[monitor_id]}}} {1 if up else 0}"
                 for monitor_id, (backed, up, _) in found.monitors.items() if backed)
    for (name, help_text), values in ((SERIES, {m: found.series_counts.get(m, 0) for m in found.monitors}),
                                      (REFUSED, {m: refused for m, (_, _, refused) in found.monitors.items()})):
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {'counter' if name.endswith('_total') else 'gauge'}")
        lines.extend(f"{name}{{{own[monitor_id]}}} {value}" for monitor_id, value in values.items())
    yield ("\n".join(lines) + "\n").encode()


def render(*, database: Database, account_id: str) -> tuple[bytes, ...]:
    """The account's exposition as blocks of UTF-8 text (served one after the other)."""
    found = _Collected()
    with database.transaction() as connection:
        for row in connection.execution_options(yield_per=ROWS_AT_ONCE).execute(
                _ROWS.where(_MONITOR.account_id == account_id)):
            found.add(row)
    return tuple(_blocks(found))


# The endpoint is not counted against a key's limits (a scraper calls it every few seconds), so what requests may
# cost is bounded instead. An account's exposition is rendered by one request at a time in a process and served to
# every other: for REUSE_SECONDS at least, and after a rendering for RENDER_COST_FACTOR times as long as it took,
# so a loop of requests keeps a process rendering an account's exposition a small share of the time however large
# the account (a large one is that much older when served). Once it is older, the next request renders it again
# while the others meanwhile get the one before, rather than waiting for the new one.
REUSE_SECONDS = 1.0
RENDER_COST_FACTOR = 10.0
# Accounts whose last rendering a process keeps, and their bytes in all; the least recently rendered goes first,
# the latest is always kept.
CACHED_ACCOUNTS = 1024
CACHED_BYTES = 512 << 20
clock = time.monotonic


class _Rendering:
    __slots__ = ("blocks", "fresh_until", "size")

    def __init__(self, blocks: tuple[bytes, ...], fresh_until: float) -> None:
        self.blocks, self.fresh_until, self.size = blocks, fresh_until, sum(len(block) for block in blocks)


class RenderCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        # By database and account: a process may serve more than one database (an app per test, a tool).
        self._kept: OrderedDict[tuple[str, str], _Rendering] = OrderedDict()
        self._bytes = 0
        # One lock per account: the request that holds it renders; a burst of others renders nothing.
        self._rendering: dict[tuple[str, str], threading.Lock] = {}

    def text(self, *, database: Database, account_id: str) -> tuple[bytes, ...]:
        key = (str(database.engine.url), account_id)
        with self._lock:
            kept = self._kept.get(key)
            lock = self._rendering.setdefault(key, threading.Lock())
        if kept is not None and clock() < kept.fresh_until:
            return kept.blocks
        # The first rendering is waited for; a later one is done by one request while the others get the last.
        if not lock.acquire(blocking=kept is None):
            assert kept is not None
            return kept.blocks
        try:
            with self._lock:
                kept = self._kept.get(key)
            started = clock()
            if kept is not None and started < kept.fresh_until:  # rendered while this request waited
                return kept.blocks
            blocks = render(database=database, account_id=account_id)
            finished = clock()
            rendering = _Rendering(blocks, max(started + REUSE_SECONDS,
                                               finished + RENDER_COST_FACTOR * (finished - started)))
            self._keep(key, rendering)
            return blocks
        finally:
            lock.release()

    def _keep(self, key: tuple[str, str], rendering: _Rendering) -> None:
        with self._lock:
            replaced = self._kept.pop(key, None)
            self._bytes += rendering.size - (replaced.size if replaced is not None else 0)
            self._kept[key] = rendering
            while len(self._kept) > 1 and (len(self._kept) > CACHED_ACCOUNTS or self._bytes > CACHED_BYTES):
                gone, dropped = self._kept.popitem(last=False)
                self._bytes -= dropped.size
                lock = self._rendering.get(gone)
                if lock is not None and not lock.locked():
                    del self._rendering[gone]


renderings = RenderCache()
