"""GET /monitors/metrics: each monitor's latest verdict as Prometheus gauges, so a Grafana panel draws the value
inside its expected range with plain PromQL.

One series per monitor per gauge, labelled ``monitor_id`` and ``monitor_name`` and nothing else, so the
cardinality is the account's monitor count times the gauges below. Gauges describe the latest stored point;
a monitor with no point yet has only ``forecast_monitor_source_up`` (and only when Prometheus-backed)."""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator

from sqlalchemy import and_, select

from app.db import Database
from app.monitors.records import MonitorPointRecord, MonitorRecord

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


def _lines(rows: list[tuple[MonitorRecord, MonitorPointRecord | None]]) -> Iterator[str]:
    labels = {monitor.id: f'monitor_id="{_escape(monitor.id)}",monitor_name="{_escape(monitor.name)}"'
              for monitor, _ in rows}
    for name, help_text, column in GAUGES:
        yield f"# HELP {name} {help_text}"
        yield f"# TYPE {name} gauge"
        for monitor, point in rows:
            if point is not None:
                yield f"{name}{{{labels[monitor.id]}}} {_number(getattr(point, column))}"
    name, help_text = INFO
    yield f"# HELP {name} {help_text}"
    yield f"# TYPE {name} gauge"
    for monitor, _ in rows:
        if monitor.prometheus_query is not None:
            yield f"{name}{{{labels[monitor.id]}}} {1 if monitor.source_status == 'ok' else 0}"


def render(*, database: Database, account_id: str) -> str:
    with database.session() as session:
        rows = [
            (monitor, point)
            for monitor, point in session.execute(
                select(MonitorRecord, MonitorPointRecord)
                .outerjoin(MonitorPointRecord, and_(MonitorPointRecord.monitor_id == MonitorRecord.id,
                                                    MonitorPointRecord.epoch == MonitorRecord.last_epoch))
                .where(MonitorRecord.account_id == account_id)
                .order_by(MonitorRecord.id)
            ).all()
        ]
        return "\n".join(_lines(rows)) + "\n"


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
