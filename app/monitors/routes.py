"""The monitor endpoints: thin views over the schemas and the keyword-only service functions."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify, request

from app.compute.forecast.catalog import DEFAULT_MODEL_ID, MODEL_IDS
from app.monitors import label_sets, service, sources
from app.monitors.alerts.webhooks import WebhookAddressError, check_url
from app.monitors.intake import ingest, selectors
from app.monitors.intake.points import check_points, point_epoch
from app.monitors.payloads import exposition, forecasting
from app.monitors.prometheus import poller
from app.monitors.schemas import FeedbackRequestSchema, MonitorCreateSchema, MonitorPatchSchema, PointsRequestSchema
from app.monitors.state.runtime import MonitorRuntime
from app.services import current_services
from app.web.body import read_json
from app.web.errors import InvalidRequest
from app.web.pipeline import current_key, requires, uncounted
from app.web.validation import load_object, problem

bp = Blueprint("monitors", __name__)

MAX_LIST_POINTS = 1000
MAX_POINTS_QUERY = 10_000
MAX_HORIZON = 100
MAX_LIST_LIMIT = 1000
MAX_DELIVERIES = 1000
MAX_SERIES_PAGE = 1000
DEFAULT_SERIES_PAGE = 100

_create_schema = MonitorCreateSchema()
_patch_schema = MonitorPatchSchema()
_points_schema = PointsRequestSchema()
_feedback_schema = FeedbackRequestSchema()


def _runtime() -> MonitorRuntime:
    from flask import current_app

    return current_app.extensions["monitors"]


def _json_body() -> Any:
    return read_json(current_services().settings.max_body_bytes)


def _int_arg(name: str, default: int, low: int, high: int) -> int:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        issue = f"Must be an integer between {low} and {high}"
        raise InvalidRequest(f"Invalid request: {name}: {issue}.", details=problem(name, issue, raw))
    return value


def _checked_webhook(fields: dict[str, Any]) -> None:
    url = fields.get("webhook_url")
    if url is None:
        return
    try:
        check_url(url, allow_private=current_services().settings.allow_private_webhooks)
    except WebhookAddressError as exc:
        raise InvalidRequest(f"Invalid request: webhook_url: {exc}.", details=problem("webhook_url", str(exc), url)) \
            from exc


@bp.post("/monitors")
@requires("write")
def create() -> tuple[Response, int]:
    fields = load_object(_create_schema, _json_body(), [])
    _checked_webhook(fields)
    sources.check_fields(fields, None, allow_private=current_services().settings.allow_private_webhooks)
    settings = current_services().settings
    view = service.create_monitor(database=current_services().database, account_id=current_key().account_id,
                                  fields=fields, limit=settings.max_monitors_per_account)
    if fields.get("prometheus_query") is not None:
        poller.start_poller(current_services().jobs)
    response = jsonify(view)
    response.headers["Location"] = f"/monitors/{view['id']}"
    return response, 201


@bp.get("/monitors")
@requires("read")
def list_all() -> Response:
    points = _int_arg("points", 0, 0, MAX_LIST_POINTS)
    limit = _int_arg("limit", 100, 1, MAX_LIST_LIMIT)
    after = request.args.get("after") or None
    views, next_after = service.list_monitors(
        database=current_services().database, account_id=current_key().account_id, points=points, limit=limit,
        after=after,
    )
    return jsonify({"monitors": views, "next_after": next_after})


@bp.get("/monitors/metrics")
@requires("admin")
@uncounted
def metrics() -> Response:
    """The latest verdict of each of the account's monitors in Prometheus' text exposition (docs/monitors.md)."""
    text = exposition.renderings.text(database=current_services().database, account_id=current_key().account_id)
    return Response(text, mimetype=exposition.CONTENT_TYPE)


def _forecast_args() -> tuple[int, str]:
    horizon = _int_arg("horizon", 0, 0, MAX_HORIZON)
    model_id = request.args.get("model") or DEFAULT_MODEL_ID
    if model_id not in MODEL_IDS:
        issue = "Must be one of: " + ", ".join(MODEL_IDS)
        raise InvalidRequest(f"Invalid request: model: {issue}.", details=problem("model", issue, model_id))
    return horizon, model_id


def _forecast(monitor_id: str, series_id: str | None, horizon: int, model_id: str) -> dict[str, Any]:
    services = current_services()
    monitor, epochs, texts, values = service.history_for_forecast(
        database=services.database, account_id=current_key().account_id, monitor_id=monitor_id,
        max_points=forecasting.FORECAST_HISTORY_POINTS, series_id=series_id,
    )
    return forecasting.forecast(
        pool=services.pool, model_id=model_id, data_frequency=monitor.data_frequency,
        confidence=monitor.confidence, horizon=horizon, epochs=epochs, texts=texts, values=values,
    )


@bp.get("/monitors/<monitor_id>")
@requires("read")
def get_one(monitor_id: str) -> Response:
    points = _int_arg("points", 10, 0, MAX_POINTS_QUERY)
    series_page = _int_arg("series", DEFAULT_SERIES_PAGE, 0, MAX_SERIES_PAGE)
    horizon, model_id = _forecast_args()
    services = current_services()
    view = service.get_monitor(database=services.database, account_id=current_key().account_id,
                               monitor_id=monitor_id, points=points, series=series_page)
    view["forecast"] = _forecast(monitor_id, None, horizon, model_id) if horizon else None
    return jsonify(view)


@bp.get("/monitors/<monitor_id>/series")
@requires("read")
def list_series(monitor_id: str) -> Response:
    limit = _int_arg("limit", DEFAULT_SERIES_PAGE, 1, MAX_SERIES_PAGE)
    points = _int_arg("points", 0, 0, MAX_LIST_POINTS)
    after = _int_arg("after", 0, 0, 2**63 - 1) or None
    match = None
    text = request.args.get("match")
    if text:
        try:
            match = selectors.parse(text)
        except selectors.SelectorError as exc:
            issue = f"Not a series selector: {exc}"
            raise InvalidRequest(f"Invalid request: match: {issue}.", details=problem("match", issue, text)) from None
    anomalous = request.args.get("anomalous", "").lower() in ("1", "true")
    views, next_after = service.list_series(
        database=current_services().database, account_id=current_key().account_id, monitor_id=monitor_id,
        limit=limit, after=after, points=points, match=match, anomalous=anomalous)
    return jsonify({"monitor_id": monitor_id, "series": views, "next_after": next_after})


@bp.get("/monitors/<monitor_id>/series/<series_id>")
@requires("read")
def get_series(monitor_id: str, series_id: str) -> Response:
    points = _int_arg("points", 10, 0, MAX_POINTS_QUERY)
    horizon, model_id = _forecast_args()
    view = service.get_series(database=current_services().database, account_id=current_key().account_id,
                              monitor_id=monitor_id, series_id=series_id, points=points)
    view["forecast"] = _forecast(monitor_id, series_id, horizon, model_id) if horizon else None
    return jsonify(view)


@bp.patch("/monitors/<monitor_id>")
@requires("write")
def patch(monitor_id: str) -> Response:
    changes = load_object(_patch_schema, _json_body(), [])
    _checked_webhook(changes)
    view = service.update_monitor(
        database=current_services().database, account_id=current_key().account_id, monitor_id=monitor_id,
        changes=changes, allow_private=current_services().settings.allow_private_webhooks,
    )
    return jsonify(view)


@bp.delete("/monitors/<monitor_id>")
@requires("delete")
def remove(monitor_id: str) -> tuple[str, int]:
    service.delete_monitor(
        database=current_services().database, runtime=_runtime(), account_id=current_key().account_id,
        monitor_id=monitor_id,
    )
    return "", 204


@bp.post("/monitors/<monitor_id>/points")
@requires("write")
def add_points(monitor_id: str) -> Response:
    services = current_services()
    body = load_object(_points_schema, _json_body(), [])
    points = check_points(body["timestamps"], body["values"], max_points=services.settings.max_points)
    answer = ingest.append_points(
        database=services.database, pool=services.pool, runtime=_runtime(), account_id=current_key().account_id,
        monitor_id=monitor_id, points=points, labels=label_sets.checked_labels(body.get("labels")),
    )
    if points.missing:  # null values: their points were left out, as points not sent are
        answer["missing_values"] = points.missing
    return jsonify(answer)


@bp.post("/monitors/<monitor_id>/feedback")
@requires("write")
def feedback(monitor_id: str) -> Response:
    body = load_object(_feedback_schema, _json_body(), [])
    view = service.mark_not_anomaly(
        database=current_services().database, runtime=_runtime(), account_id=current_key().account_id,
        monitor_id=monitor_id, epoch=point_epoch(body["timestamp"]), series_id=body.get("series_id"),
    )
    return jsonify(view)


@bp.post("/monitors/<monitor_id>/webhook-secret")
@requires("write")
def rotate(monitor_id: str) -> Response:
    secret = service.rotate_secret(
        database=current_services().database, account_id=current_key().account_id, monitor_id=monitor_id
    )
    return jsonify({"webhook_secret": secret})


@bp.get("/monitors/<monitor_id>/deliveries")
@requires("read")
def list_deliveries(monitor_id: str) -> Response:
    limit = _int_arg("limit", 100, 1, MAX_DELIVERIES)
    items = service.deliveries(
        database=current_services().database, account_id=current_key().account_id, monitor_id=monitor_id,
        limit=limit,
    )
    return jsonify({"monitor_id": monitor_id, "deliveries": items})
