"""A monitor's series: one per label set its source yields (remote-written series its selector matches, series its
PromQL query returns, labelled pushed points), each its own stream with its own points, detector state, incidents
and alert sequence. A monitor fed one unlabelled stream has one series, with the empty label set.

Here: the labels' canonical form and key, finding (or creating, within the per-monitor cap) the series of label
sets, and retiring labelled series that stopped coming. The points themselves are app.monitors.store's.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, bindparam, func, select, update

from app.db import Database, dialect_insert
from app.errors import InvalidInput, NotFound, ServiceError
from app.monitors import sources
from app.monitors.records import monitor_series_table, monitors_table
from app.web.validation import problem

log = logging.getLogger("app.monitors.label_sets")

# Bounds on one series' labels. Prometheus sets none, but a receiver must: each series' labels are matched against
# every selector of the account and stored with the series. The limits are far above what exporters produce
# (Mimir's defaults are 30 labels and 2,048-character values).
MAX_LABELS = 128
MAX_LABEL_NAME_CHARS = 1024
MAX_LABEL_VALUE_CHARS = 4096
# Labels of ours on alerts and gauges; a series label of the same name is carried as exported_<name>, as
# Prometheus does on a clash.
OWN_LABELS = ("alertname", "monitor_id", "monitor_name", "series_id")
# Series ids a process remembers by (monitor, labels); beyond it the memory starts again (ids are re-read).
REMEMBERED_SERIES = 200_000
# A new series is created only after this many of the monitor's series were read back in one query.
IN_CHUNK = 500

Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs: a label set as a dict key
NO_LABELS: Labels = ()

# The nominal spacing of each data_frequency: a series is retired only after several of them without a point.
NOMINAL_SECONDS = {**sources.STEP_SECONDS, "Monthly": 31 * 86_400, "Quarterly": 92 * 86_400,
                   "Yearly": 366 * 86_400}
RETIRE_STEPS = 3
# Prometheus' label names (the gauges and alerts carry the labels as they are).
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def canonical(labels: Labels) -> str:
    return json.dumps(dict(labels), separators=(",", ":"), ensure_ascii=False)


def labels_key(labels: Labels) -> str:
    """"" for the empty label set; else a 128-bit digest of the canonical labels (what the unique index holds)."""
    if not labels:
        return ""
    return hashlib.blake2b(canonical(labels).encode(), digest_size=16).hexdigest()


def stored_labels(text: str | None) -> dict[str, str]:
    return {} if not text else dict(json.loads(text))


def label_problem(labels: Mapping[str, str]) -> str | None:
    """Why a label set cannot name a series ("too_large" or "invalid"), or None when it can."""
    if len(labels) > MAX_LABELS:
        return "too_large"
    for name, value in labels.items():
        if len(name) > MAX_LABEL_NAME_CHARS or len(value) > MAX_LABEL_VALUE_CHARS:
            return "too_large"
        if not LABEL_NAME.fullmatch(name) or "\x00" in value:  # PostgreSQL's text holds no NUL
            return "invalid"
    return None


def checked_labels(raw: Any, *, field_name: str = "labels", **extra: Any) -> Labels:
    """A label set given in a JSON body (an object of strings), sorted; a 422 naming the field otherwise."""
    if raw is None:
        return NO_LABELS
    issue = None
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        issue = "must be an object of label names to string values"
    else:
        found = label_problem(raw)
        if found == "too_large":
            issue = (f"at most {MAX_LABELS} labels, names of at most {MAX_LABEL_NAME_CHARS} and values of at most "
                     f"{MAX_LABEL_VALUE_CHARS} characters")
        elif found == "invalid":
            issue = "label names are Prometheus' ([a-zA-Z_][a-zA-Z0-9_]*), and no value may hold a NUL"
    if issue is not None:
        provided = raw if not isinstance(raw, dict) else f"{len(raw)} labels"
        raise InvalidInput(f"Invalid points: {field_name}: {issue}.",
                                  details=problem(field_name, issue, provided, **extra))
    return tuple(sorted(raw.items()))


def public_labels(labels: Mapping[str, str], series_id: int) -> dict[str, str]:
    """A labelled series' labels as alerts and gauges carry them beside the monitor's own: ``__name__`` left out
    (as Prometheus' alerting rules do), a clash with ours renamed exported_<name>, and its ``series_id``."""
    out: dict[str, str] = {}
    for name, value in labels.items():
        if name == "__name__":
            continue
        out[f"exported_{name}" if name in OWN_LABELS else name] = value
    out["series_id"] = str(series_id)
    return out


class SeriesIds:
    """This process's memory of series ids by (monitor id, labels): a hit costs no query. A retired series' id
    may linger; its state read finds no row, and the caller forgets it and asks again."""

    def __init__(self, limit: int = REMEMBERED_SERIES) -> None:
        self._ids: dict[tuple[str, Labels], int] = {}
        self._lock = threading.Lock()
        self._limit = limit

    def get(self, monitor_id: str, labels: Labels) -> int | None:
        return self._ids.get((monitor_id, labels))

    def put_many(self, found: Mapping[tuple[str, Labels], int]) -> None:
        with self._lock:
            if len(self._ids) + len(found) > self._limit:
                self._ids.clear()
            self._ids.update(found)

    def forget_monitor(self, monitor_id: str) -> None:
        with self._lock:
            for key in [k for k in self._ids if k[0] == monitor_id]:
                del self._ids[key]

    def forget(self, monitor_id: str, labels: Labels) -> None:
        with self._lock:
            self._ids.pop((monitor_id, labels), None)


@dataclass
class Resolved:
    """The series of the label sets asked for; per monitor, the refusal of all its label sets, or how many of its
    label sets the cap turned away (their points are the caller's to count)."""

    ids: dict[tuple[str, Labels], int] = field(default_factory=dict)
    errors: dict[str, ServiceError] = field(default_factory=dict)
    over_cap: set[tuple[str, Labels]] = field(default_factory=set)


_SERIES = monitor_series_table
_MONITORS = monitors_table


def _insert_ignoring_duplicates(dialect: str) -> Any:
    return dialect_insert(dialect, _SERIES).on_conflict_do_nothing(index_elements=["monitor_id", "labels_key"])


def resolve(database: Database, ids: SeriesIds, *, account_id: str, wanted: Mapping[str, Iterable[Labels]],
            max_series: int, from_source: bool = False, batch: Iterable[Any] = (), now: datetime) -> Resolved:
    """The series id of each (monitor, labels) asked for, creating the missing ones while the monitor follows
    fewer than ``max_series``. A monitor that does not exist or is another account's is a 404 for its label sets;
    a Prometheus-backed one a 400 unless ``from_source``. Label sets beyond the cap are ``over_cap``, and the
    points they carried (in ``batch``, entries with monitor_id, labels and points) are added to the monitor's
    ``series_refused``."""
    resolved = Resolved()
    missing: dict[str, list[Labels]] = {}
    for monitor_id, label_sets in wanted.items():
        for labels in label_sets:
            series_id = ids.get(monitor_id, labels)
            if series_id is None:
                missing.setdefault(monitor_id, []).append(labels)
            else:
                resolved.ids[(monitor_id, labels)] = series_id
    if not missing:
        return resolved
    refused_points = {(e.monitor_id, e.labels): len(e.points.epochs) for e in batch}
    with database.engine.connect() as connection:
        for monitor_id, label_sets in missing.items():
            connection.begin()
            try:
                _resolve_monitor(connection, resolved, account_id=account_id, monitor_id=monitor_id,
                                 label_sets=sorted(set(label_sets)), max_series=max_series, from_source=from_source,
                                 refused_points=refused_points, now=now)
                connection.commit()
            except BaseException:
                connection.rollback()
                raise
    ids.put_many({k: v for k, v in resolved.ids.items() if k[0] in missing})
    return resolved


def _resolve_monitor(connection: Connection, resolved: Resolved, *, account_id: str, monitor_id: str,
                     label_sets: list[Labels], max_series: int, from_source: bool,
                     refused_points: Mapping[tuple[str, Labels], int], now: datetime) -> None:
    monitor = connection.execute(select(_MONITORS.c.account_id, _MONITORS.c.prometheus_query)
                                 .where(_MONITORS.c.id == monitor_id)).first()
    if monitor is None or monitor.account_id != account_id:
        resolved.errors[monitor_id] = not_found(monitor_id)
        return
    if monitor.prometheus_query is not None and not from_source:
        resolved.errors[monitor_id] = sources.pushed_to_reader(monitor_id)
        return
    by_key = {labels_key(labels): labels for labels in label_sets}
    _read_ids(connection, resolved, monitor_id, by_key)
    absent = [labels for key, labels in by_key.items() if (monitor_id, labels) not in resolved.ids]
    if not absent:
        return
    absent.sort()
    adoptable = connection.execute(select(_SERIES.c.id).where(
        _SERIES.c.monitor_id == monitor_id, _SERIES.c.labels.is_(None))).scalar()
    if adoptable is not None:
        # The stream a Prometheus-fed monitor followed before it had series: the first label set to arrive
        # takes it over, history and all (migration 0011).
        labels = absent.pop(0)
        connection.execute(update(_SERIES).where(_SERIES.c.id == adoptable, _SERIES.c.labels.is_(None))
                           .values(labels_key=labels_key(labels), labels=canonical(labels)))
        resolved.ids[(monitor_id, labels)] = adoptable
    followed = connection.execute(select(func.count()).select_from(_SERIES)
                                  .where(_SERIES.c.monitor_id == monitor_id)).scalar() or 0
    room = max(0, max_series - followed)
    created, refused = absent[:room], absent[room:]
    if created:
        connection.execute(_insert_ignoring_duplicates(connection.dialect.name), [
            {"monitor_id": monitor_id, "labels_key": labels_key(labels), "labels": canonical(labels),
             "created_at": now, "last_seen_at": now, "point_count": 0, "revision": 0, "relearn_revision": 0,
             "event_seq": 0} for labels in created])
        _read_ids(connection, resolved, monitor_id, {labels_key(labels): labels for labels in created})
    if refused:
        points = sum(refused_points.get((monitor_id, labels), 1) for labels in refused)
        connection.execute(update(_MONITORS).where(_MONITORS.c.id == monitor_id).values(
            series_refused=_MONITORS.c.series_refused + points, series_refused_at=now))
        resolved.over_cap.update((monitor_id, labels) for labels in refused)
        log.warning("series refused: the monitor follows its most series", extra={"fields": {
            "monitor_id": monitor_id, "refused_series": len(refused), "max_series": max_series}})


def _read_ids(connection: Connection, resolved: Resolved, monitor_id: str, by_key: Mapping[str, Labels]) -> None:
    keys = list(by_key)
    for start in range(0, len(keys), IN_CHUNK):
        rows = connection.execute(select(_SERIES.c.id, _SERIES.c.labels_key).where(
            _SERIES.c.monitor_id == monitor_id,
            _SERIES.c.labels_key.in_(bindparam("keys", expanding=True))), {"keys": keys[start:start + IN_CHUNK]})
        for series_id, key in rows:
            resolved.ids[(monitor_id, by_key[key])] = int(series_id)


def not_found(monitor_id: str) -> NotFound:
    return NotFound("No such monitor.", details={"field": "monitor_id", "issue": "not found",
                                                 "provided": monitor_id[:64]})


def over_cap_error(max_series: int, labels: Labels) -> InvalidInput:
    issue = (f"the monitor already follows {max_series:,} series (MAX_SERIES_PER_MONITOR); a new label set is "
             "refused until one is retired or removed")
    return InvalidInput(f"Invalid points: labels: {issue}.",
                        details=problem("labels", issue, f"{len(labels)} labels", maximum=max_series))


def retire_after(data_frequency: str, retire_seconds: float) -> timedelta:
    """How long a labelled series may go without a point before it is retired."""
    return timedelta(seconds=max(retire_seconds, RETIRE_STEPS * NOMINAL_SECONDS.get(data_frequency, 86_400)))
