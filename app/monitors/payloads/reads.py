"""What the monitor answers are built from (GET /monitors, /monitors/{id}, its series, the dashboard): a monitor's
series and their totals, a series' last points and open anomalies, read in the caller's transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row, and_, func, select

from app.errors import MalformedInput, NotFound
from app.monitors.intake.selectors import Selector
from app.monitors.label_sets import stored_labels
from app.monitors.records import monitor_points_table, monitor_series_table
from app.monitors.store import peak_first, standing_anomaly
from app.web.validation import problem

# Open anomalies a monitor or series view lists at most.
OPEN_ANOMALIES = 100

_POINTS = monitor_points_table
_SERIES_TABLE = monitor_series_table
_POINT = _POINTS.c
_SERIES = _SERIES_TABLE.c


@dataclass(frozen=True)
class Totals:
    """A monitor's series taken together: how many, their points, the newest point's timestamp."""

    series_count: int
    point_count: int
    last_timestamp: str | None
    only_series: Row[Any] | None  # the series, when the monitor has exactly one


def totals(connection: Connection, monitors: Sequence[Row[Any]]) -> dict[str, Totals]:
    ids = [m.id for m in monitors]
    if not ids:
        return {}
    counts = {
        row[0]: (int(row[1]), int(row[2] or 0), row[3])
        for row in connection.execute(
            select(_SERIES.monitor_id, func.count(), func.sum(_SERIES.point_count), func.max(_SERIES.last_epoch))
            .where(_SERIES.monitor_id.in_(ids)).group_by(_SERIES.monitor_id))
    }
    singles = {s.monitor_id: s for s in connection.execute(
        select(_SERIES_TABLE).where(_SERIES.monitor_id.in_([m for m, c in counts.items() if c[0] == 1])))}
    out: dict[str, Totals] = {}
    for monitor_id in ids:
        count, points, newest = counts.get(monitor_id, (0, 0, None))
        last_text = None
        if newest is not None:
            newest_series = connection.execute(
                select(_SERIES.id).where(_SERIES.monitor_id == monitor_id, _SERIES.last_epoch == newest).limit(1)
            ).scalar()
            last_text = connection.execute(select(_POINT.timestamp).where(
                _POINT.monitor_id == monitor_id, _POINT.series_id == newest_series, _POINT.epoch == newest)).scalar()
        out[monitor_id] = Totals(count, points, last_text, singles.get(monitor_id))
    return out


def last_points(connection: Connection, series: Row[Any], count: int) -> list[Row[Any]]:
    if count <= 0:
        return []
    rows = list(connection.execute(
        select(_POINTS)
        .where(_POINT.monitor_id == series.monitor_id, _POINT.series_id == series.id)
        .order_by(_POINT.epoch.desc())
        .limit(count)
    ))
    rows.reverse()
    return rows


def open_anomaly_points(connection: Connection, series: Row[Any], limit: int = OPEN_ANOMALIES
                        ) -> list[Row[Any]]:
    """The open incident's anomalies, less those a user marked normal."""
    if series.open_anomaly_epoch is None:
        return []
    return list(connection.execute(
        select(_POINTS).where(*_in_open_incident(series)).order_by(_POINT.epoch).limit(limit)))


def _in_open_incident(series: Row[Any]) -> tuple[Any, ...]:
    """The series' standing anomalies since its open incident's first point."""
    return (_POINT.monitor_id == series.monitor_id, _POINT.series_id == series.id,
            _POINT.epoch >= series.open_anomaly_epoch, standing_anomaly(_POINT))


@dataclass(frozen=True)
class OpenIncident:
    """A series' open incident: its first point, its latest anomaly, its anomalies (less those marked normal) and the
    furthest of them from what was expected."""

    started_epoch: int
    last_anomaly_epoch: int | None
    anomalies: int
    peak: Row[Any] | None


def open_incident(connection: Connection, series: Row[Any]) -> OpenIncident | None:
    if series.open_anomaly_epoch is None:
        return None
    in_incident = _in_open_incident(series)
    count, last = connection.execute(select(func.count(), func.max(_POINT.epoch)).where(*in_incident)).one()
    peak = connection.execute(select(_POINTS).where(*in_incident).order_by(*peak_first(_POINT)).limit(1)).first()
    return OpenIncident(started_epoch=series.open_anomaly_epoch, last_anomaly_epoch=last, anomalies=int(count or 0),
                        peak=peak)


def monitor_open_anomalies(connection: Connection, monitor_id: str, limit: int = OPEN_ANOMALIES
                           ) -> list[tuple[Row[Any], Row[Any]]]:
    """Every series' open anomalies (each series' oldest first, by series), at most ``limit``."""
    points = connection.execute(
        select(_POINTS)
        .join(_SERIES_TABLE, and_(_POINT.monitor_id == _SERIES.monitor_id, _POINT.series_id == _SERIES.id,
                                  _POINT.epoch >= _SERIES.open_anomaly_epoch))
        .where(_SERIES.monitor_id == monitor_id, _SERIES.open_anomaly_epoch.is_not(None), standing_anomaly(_POINT))
        .order_by(_SERIES.id, _POINT.epoch)
        .limit(limit)
    ).all()
    if not points:
        return []
    # The series apart: a row of both tables would have two monitor_id columns.
    series = {s.id: s for s in connection.execute(
        select(_SERIES_TABLE).where(_SERIES.id.in_(sorted({p.series_id for p in points}))))}
    return [(series[p.series_id], p) for p in points]


def last_point_of(connection: Connection, series: Sequence[Row[Any]]) -> dict[int, Row[Any]]:
    """Each series' newest point, by series id."""
    if not series:
        return {}
    monitor_id = series[0].monitor_id
    wanted = {s.id: s.last_epoch for s in series if s.last_epoch is not None}
    if not wanted:
        return {}
    rows = connection.execute(select(_POINTS).join(_SERIES_TABLE, and_(_SERIES.id == _POINT.series_id,
                                                                       _SERIES.last_epoch == _POINT.epoch))
                              .where(_POINT.monitor_id == monitor_id, _POINT.series_id.in_(list(wanted))))
    return {p.series_id: p for p in rows}


def series_page(connection: Connection, monitor_id: str, *, limit: int, after: int | None,
                match: Selector | None = None, anomalous: bool = False) -> tuple[list[Row[Any]], int | None]:
    """A page of the monitor's series by id, those ``match`` selects (and with an open incident when
    ``anomalous``); the id to continue after when there are more."""
    statement = select(_SERIES_TABLE).where(_SERIES.monitor_id == monitor_id)
    if after is not None:
        statement = statement.where(_SERIES.id > after)
    if anomalous:
        statement = statement.where(_SERIES.open_anomaly_epoch.is_not(None))
    statement = statement.order_by(_SERIES.id)
    if match is None:
        rows = list(connection.execute(statement.limit(limit + 1)))
        more = len(rows) > limit
        rows = rows[:limit]
        return rows, (rows[-1].id if more and rows else None)
    found: list[Row[Any]] = []
    for row in connection.execute(statement):
        if match.matches(stored_labels(row.labels)):
            if len(found) == limit:
                return found, found[-1].id
            found.append(row)
    return found, None


def owned_series(connection: Connection, monitor_id: str, series_id: Any) -> Row[Any]:
    """The monitor's series of that id (the monitor already found the caller's), or a 404."""
    number = _series_number(series_id)
    row = None if number is None else connection.execute(select(_SERIES_TABLE).where(_SERIES.id == number)).first()
    if row is None or row.monitor_id != monitor_id:
        raise NotFound("No such series.", details={"field": "series_id", "issue": "not found",
                                                   "provided": str(series_id)[:64]})
    return row


def sole_series(connection: Connection, monitor: Row[Any], series_id: Any) -> Row[Any] | None:
    """The series a request about one stream means: ``series_id`` when given; else the monitor's only series (None
    before its first point); a 400 when it has several."""
    if series_id is not None:
        return owned_series(connection, monitor.id, series_id)
    rows = connection.execute(select(_SERIES_TABLE).where(_SERIES.monitor_id == monitor.id).limit(2)).all()
    if len(rows) > 1:
        issue = "This monitor has several series: name one (GET /monitors/{id}/series lists them)"
        raise MalformedInput(f"Invalid request: series_id: {issue}.", details=problem("series_id", issue, None))
    return rows[0] if rows else None


def _series_number(raw: Any) -> int | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw if 0 < raw < 2**63 else None
    if isinstance(raw, str) and raw.isdigit() and len(raw) <= 18:
        return int(raw)
    return None
