"""The dashboard's monitor and batch pages (on the dashboard's blueprint)."""

from __future__ import annotations

from typing import Any

from flask import (
    Response,
    current_app,
    make_response,
    request,
    url_for,
)

from app.dashboard.sessions import DashboardSession
from app.dashboard.views import base_context, bp, current_session, page, signed_in
from app.errors import NotFound, ServiceError
from app.services import current_services
from app.web.errors import api_error_for

MONITOR_CHART_POINTS = 500
# A monitor of several series lists this many of them on its own page (a quarter in the list of monitors), each
# with its last MONITOR_SERIES_VERDICTS verdicts.
MONITOR_SERIES_ROWS = 200
MONITOR_SERIES_VERDICTS = 30
MONITOR_FEEDBACK_ROWS = 5


@bp.get("/monitors")
@signed_in
def monitors(notice: str | None = None) -> Response:
    """The account's monitors, each charted; a monitor of several series lists them with their latest verdicts and
    charts one (``?monitor=<id>&series=<series id>`` charts that one, on that monitor's own page)."""
    if "monitors" not in current_app.extensions:
        return page("dashboard/error.html", 404, title="No monitors", message="This server has no monitors.",
                     **base_context())
    from app.monitors import service as monitor_service

    session = current_session()
    assert session is not None
    database, account_id = current_services().database, session.key.account_id
    only = request.args.get("monitor")
    if only:
        try:
            views = [monitor_service.get_monitor(database=database, account_id=account_id, monitor_id=only,
                                                 points=MONITOR_CHART_POINTS, series=0)]
        except NotFound as error:  # the one refusal of a lookup by id (another account's monitor included)
            return page("dashboard/error.html", 404, title="No such monitor", message=error.message,
                         **base_context())
    else:
        views, _ = monitor_service.list_monitors(database=database, account_id=account_id,
                                                 points=MONITOR_CHART_POINTS, limit=50, after=None)
    charts = []
    for view in views:
        chart = _chart(view, view.get("points") or [])
        if view["series_count"] > 1:
            rows, _ = monitor_service.list_series(
                database=database, account_id=account_id, monitor_id=view["id"],
                limit=MONITOR_SERIES_ROWS if only else MONITOR_SERIES_ROWS // 4, after=None,
                points=MONITOR_SERIES_VERDICTS, match=None, anomalous=False)
            chosen = _chosen(rows, request.args.get("series") if only else None)
            chart["series_rows"] = [_series_row(row) for row in rows]
            chart["more_series"] = view["series_count"] - len(rows)
            if chosen is not None:
                shown = monitor_service.get_series(database=database, account_id=account_id,
                                                   monitor_id=view["id"], series_id=str(chosen["id"]),
                                                   points=MONITOR_CHART_POINTS)
                chart.update(_chart(view, shown["points"]), series_rows=chart["series_rows"],
                             more_series=chart["more_series"], charted=_labels_text(chosen["labels"]),
                             charted_id=chosen["id"])
        charts.append(chart)
    can_write = "write" in session.key.permissions
    return page("dashboard/monitors.html", charts=charts, shown_points=MONITOR_CHART_POINTS, can_write=can_write,
                 notice=notice, single=bool(only), **base_context())


def _chart(view: dict[str, Any], points: list[dict[str, Any]]) -> dict[str, Any]:
    flagged = [p for p in points if p["is_anomaly"]]
    return {
        "id": view["id"],
        "name": view["name"],
        "frequency": view["data_frequency"],
        "point_count": view["point_count"],
        "series_count": view["series_count"],
        "sensitivity": view["sensitivity"],
        "confidence": view["confidence"],
        "false_alarms_per_week": view["false_alarms_per_week"],
        "min_deviation": view["min_deviation"],
        "min_relative_deviation": view["min_relative_deviation"],
        "anomalies": len(flagged),
        "source": view["source"],
        "remote_write_selector": view.get("remote_write_selector"),
        "alertmanager_url": view["alertmanager_url"],
        # The latest flagged points, newest first, each with the feedback a user gave it.
        "recent_anomalies": [
            {"timestamp": p["timestamp"], "value": p["value"], "expected": p["expected"],
             "direction": p["direction"], "reason": p.get("reason"), "feedback": p["feedback"],
             "series_id": p.get("series_id")}
            for p in reversed(flagged[-MONITOR_FEEDBACK_ROWS:])
        ],
        "series": {
            "timestamps": [p["timestamp"] for p in points],
            "value": [p["value"] for p in points],
            "expected": [p["expected"] for p in points],
            "lower": [p["lower_bound"] for p in points],
            "upper": [p["upper_bound"] for p in points],
            "anomaly": [p["is_anomaly"] for p in points],
        },
    }


def _chosen(rows: list[dict[str, Any]], wanted: str | None) -> dict[str, Any] | None:
    """The series to chart: the one asked for, else the first with an open incident, else the first."""
    for row in rows:
        if wanted is not None and str(row["id"]) == wanted:
            return row
    return next((row for row in rows if row["open_anomaly_since"]), rows[0] if rows else None)


def _labels_text(labels: dict[str, str]) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _series_row(row: dict[str, Any]) -> dict[str, Any]:
    last = row["last_point"]
    return {
        "id": row["id"],
        "labels": _labels_text(row["labels"]),
        "point_count": row["point_count"],
        "last": last,
        "open_since": row["open_anomaly_since"],
        "incident": row.get("open_incident"),
        # Its latest verdicts, oldest first: "a" anomaly, "w" warm-up, "n" normal.
        "verdicts": "".join("a" if p["is_anomaly"] else ("w" if p["warmup"] else "n") for p in row["points"]),
    }


@bp.post("/monitors/<monitor_id>/feedback")
@signed_in
def monitor_feedback(monitor_id: str) -> Response:
    """The dashboard's "Not an anomaly" button: the same change as POST /monitors/{id}/feedback."""
    from app.monitors import service as monitor_service
    from app.monitors.intake.points import point_epoch

    session = current_session()
    assert session is not None
    if "write" not in session.key.permissions:
        return page("dashboard/error.html", 403, title="Not allowed",
                     message="Marking a point needs a key with the write permission.", **base_context())
    stamp = request.form.get("timestamp", "")
    series_id = request.form.get("series_id") or None
    try:
        monitor_service.mark_not_anomaly(
            database=current_services().database, runtime=current_app.extensions["monitors"],
            account_id=session.key.account_id, monitor_id=monitor_id, epoch=point_epoch(stamp),
            series_id=int(series_id) if series_id and series_id.isdigit() else series_id,
        )
    except ServiceError as error:
        # The page answers with the status the API gives the same refusal.
        return page("dashboard/error.html", api_error_for(error).status, title="Not marked", message=error.message,
                     **base_context())
    return monitors(notice=f"The point at {stamp} is marked as not an anomaly; the detector learns it as normal.")


# --- batches -------------------------------------------------------------------------------------

BATCH_ROWS = 100
# Results can be downloaded once some exist: while running (the series finished so far) and when done.
BATCH_DOWNLOADABLE = ("running", "done")


def _batch_rows(account_id: str) -> list[dict[str, Any]]:
    from app.batches import store
    from app.batches.schemas import batch_json

    rows = []
    for batch in store.list_batches(current_services().database, account_id, limit=BATCH_ROWS):
        row = batch_json(batch)
        progress = row["progress"]
        row["finished_series"] = progress["done"] + progress["failed"]
        # A backtest compares every model it lists; the model header names only the first of them.
        row["models"] = (row["parameters"].get("models") or [row["model_id"]]) if batch.kind == "backtest" \
            else [row["model_id"]]
        row["shares"] = _shares(progress)
        row["download_url"] = (url_for("dashboard.batch_results", batch_id=batch.id)
                               if batch.status in BATCH_DOWNLOADABLE else None)
        row["backtest_url"] = (url_for("dashboard.backtest", batch_id=batch.id)
                               if batch.kind == "backtest" and batch.status in BATCH_DOWNLOADABLE else None)
        rows.append(row)
    return rows


def _shares(progress: dict[str, int]) -> dict[str, float]:
    """The widths (percent of the bar) of the series done and of those failed, failed drawn apart in red."""
    total = progress["total"] or 1
    return {"done": round(100 * progress["done"] / total, 2), "failed": round(100 * progress["failed"] / total, 2)}


def _reader() -> DashboardSession | Response:
    session = current_session()
    assert session is not None
    if "read" not in session.key.permissions:
        return page("dashboard/error.html", 403, title="Not allowed",
                     message="Seeing batches needs a key with the read permission.", **base_context())
    return session


@bp.get("/batches")
@signed_in
def batches() -> Response:
    session = _reader()
    if isinstance(session, Response):
        return session
    return page("dashboard/batches.html", batches=_batch_rows(session.key.account_id), shown=BATCH_ROWS,
                 ttl_hours=current_services().settings.batch_result_ttl_hours, **base_context())


@bp.get("/batches.json")
@signed_in
def batches_json() -> Response:
    """What the batches page polls while a batch is unfinished: the same rows, as JSON."""
    session = _reader()
    if isinstance(session, Response):
        return session
    response = make_response({"batches": _batch_rows(session.key.account_id)})
    response.headers["Cache-Control"] = "no-store"
    return response


@bp.get("/batches/<batch_id>/results.csv")
@signed_in
def batch_results(batch_id: str) -> Response:
    """The batch's results as GET /batches/{id}/results?format=csv gives them, streamed, as a download."""
    from app.batches import store, stored_results
    from app.batches.results import csv_rows

    session = _reader()
    if isinstance(session, Response):
        return session
    database = current_services().database
    batch = store.get_batch(database, session.key.account_id, batch_id)
    if batch is None or batch.status == "cancelled":
        return page("dashboard/error.html", 404, title="No such batch",
                     message="There is no batch with that id in this account, or it was cancelled.",
                     **base_context())
    response = Response(csv_rows(stored_results.done_outputs(database, batch.id), batch.kind), mimetype="text/csv")
    response.headers["Content-Disposition"] = f'attachment; filename="{batch.id}.csv"'
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Batch-Status"] = batch.status
    return response


@bp.get("/batches/<batch_id>/backtest")
@signed_in
def backtest(batch_id: str) -> Response:
    """A backtest's scores per model, and one series' windows (``?series=``, default the first) as a chart."""
    from app.batches import backtest as backtests
    from app.batches import store, stored_results
    from app.batches.schemas import batch_json
    from app.dashboard import backtests as shown

    session = _reader()
    if isinstance(session, Response):
        return session
    database = current_services().database
    batch = store.get_batch(database, session.key.account_id, batch_id)
    if batch is None or batch.kind != "backtest" or batch.status == "cancelled":
        return page("dashboard/error.html", 404, title="No such backtest",
                     message="There is no backtest with that id in this account, or it was cancelled.",
                     **base_context())
    summary = backtests.summarize(stored_results.done_outputs(database, batch.id))
    ids = shown.series_ids(stored_results.done_outputs(database, batch.id))
    chosen = request.args.get("series") or (ids[0] if ids else None)
    result = shown.series_result(stored_results.done_outputs(database, batch.id), chosen) if chosen in ids else None
    return page("dashboard/backtest.html", batch=batch_json(batch), summary=summary, series_ids=ids,
                 chosen=chosen if result else None, error=result.get("error") if result else None,
                 scores=[row for row in summary["series"] if row["unique_id"] == chosen],
                 chart=shown.chart_data(result) if result and "windows" in result else None,
                 download_url=url_for("dashboard.batch_results", batch_id=batch.id), **base_context())
