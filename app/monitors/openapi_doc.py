"""The monitor operations in the service's OpenAPI document (app.web.openapi builds the rest)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.compute.forecast.catalog import DEFAULT_MODEL_ID, MODEL_IDS
from app.monitors.alerts.webhooks import EVENT_ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER
from app.monitors.schemas import (
    DeliveriesSchema,
    FeedbackRequestSchema,
    MonitorCreateSchema,
    MonitorListSchema,
    MonitorPatchSchema,
    MonitorSchema,
    PointsRequestSchema,
    PointsResponseSchema,
    SecretSchema,
    SeriesListSchema,
    SeriesSchema,
)

MONITOR_DESCRIPTION = (
    "A monitor keeps a metric stream, judges each new point causally against its stored history exactly as "
    "POST /anomalies would, forecasts ahead with the /forecast models, and POSTs signed alert events to its "
    f"webhook: headers {EVENT_ID_HEADER} (stable per event), {TIMESTAMP_HEADER} (Unix seconds of the attempt) "
    f"and {SIGNATURE_HEADER}: sha256=HMAC-SHA256(secret, timestamp + '.' + body) in hex. A monitor of another "
    "account answers 404 exactly like a missing one."
)


def document(spec: Any, errors: Callable[..., dict[str, Any]], ok_headers: dict[str, Any]) -> None:
    # A schema is named here before any schema that nests it: apispec names a nested schema it has not seen after
    # its class, and /forecast's SeriesSchema already holds "Series" (it would publish this one as "Series1").
    for name, schema in (("MonitorSeries", SeriesSchema), ("MonitorSeriesList", SeriesListSchema),
                         ("MonitorCreateRequest", MonitorCreateSchema), ("MonitorUpdateRequest", MonitorPatchSchema),
                         ("Monitor", MonitorSchema), ("MonitorList", MonitorListSchema),
                         ("PointsRequest", PointsRequestSchema), ("PointsResponse", PointsResponseSchema),
                         ("Deliveries", DeliveriesSchema), ("WebhookSecret", SecretSchema),
                         ("FeedbackRequest", FeedbackRequestSchema)):
        spec.components.schema(name, schema=schema)
    secured = [{"bearerAuth": []}]
    monitor_id = {"in": "path", "name": "monitor_id", "required": True, "schema": {"type": "string"},
                  "description": "A monitor of the caller's account."}
    model = {"in": "query", "name": "model", "required": False, "description": "The forecast model.",
             "schema": {"type": "string", "enum": list(MODEL_IDS), "default": DEFAULT_MODEL_ID}}

    def query(name: str, description: str, default: Any, maximum: int, minimum: int = 0) -> dict[str, Any]:
        return {"in": "query", "name": name, "required": False, "description": description,
                "schema": {"type": "integer", "minimum": minimum, "maximum": maximum, "default": default}}

    def json_ok(status: str, description: str, schema: str) -> dict[str, Any]:
        return {status: {"description": description, "headers": ok_headers,
                         "content": {"application/json": {"schema": schema}}}}

    def fail(*statuses: str) -> dict[str, Any]:
        out = errors(*statuses)
        if "404" in out:
            out["404"] = {**out["404"], "description": "INVALID_REQUEST: no such monitor in the caller's account."}
        return out

    def operation(op_id: str, summary: str, permission: str, responses: dict[str, Any], *,
                  body: str | None = None, parameters: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = {
            "operationId": op_id, "tags": ["Monitors"], "summary": summary, "security": secured,
            "description": f"Needs a key with the {permission} permission; counted against its rate limits. "
                           + MONITOR_DESCRIPTION,
            "responses": responses,
        }
        if parameters:
            result["parameters"] = parameters
        if body:
            result["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
        return result

    spec.path(path="/monitors", operations={
        "post": operation(
            "createMonitor", "Create a monitor; its webhook secret is in this response only", "write",
            {**json_ok("201", "The monitor, with webhook_secret.", "Monitor"),
             **fail("400", "401", "403", "413", "415", "429", "500")},
            body="MonitorCreateRequest",
        ),
        "get": operation(
            "listMonitors", "The caller's monitors, by id", "read",
            {**json_ok("200", "A page of monitors; pass next_after as ?after= for the next.", "MonitorList"),
             **fail("400", "401", "403", "429", "500")},
            parameters=[query("points", "Last points to include per monitor.", 0, 1000),
                        query("limit", "Monitors per page.", 100, 1000, 1),
                        {"in": "query", "name": "after", "required": False, "schema": {"type": "string"},
                         "description": "Continue after this monitor id."}],
        ),
    })
    spec.path(path="/monitors/{monitor_id}", operations={
        "get": operation(
            "getMonitor", "A monitor, its last points with verdicts, open anomalies and a forecast", "read",
            {**json_ok("200", "The monitor.", "Monitor"), **fail("400", "401", "403", "404", "422", "429", "500")},
            parameters=[monitor_id, query("points", "Last points to include.", 10, 10_000),
                        query("series", "Series to include (the first, by id).", 100, 1000),
                        query("horizon", "Forecast this many steps ahead (0: no forecast; a monitor of several "
                              "series forecasts each one on its own page).", 0, 100), model],
        ),
        "patch": operation(
            "updateMonitor", "Change a monitor's name, judging, webhook, Alertmanager or Prometheus query", "write",
            {**json_ok("200", "The monitor as changed.", "Monitor"),
             **fail("400", "401", "403", "404", "415", "429", "500")},
            body="MonitorUpdateRequest", parameters=[monitor_id],
        ),
        "delete": operation(
            "deleteMonitor", "Delete a monitor, every stored point and its alert log", "delete",
            {"204": {"description": "Deleted.", "headers": ok_headers}, **fail("401", "403", "404", "429", "500")},
            parameters=[monitor_id],
        ),
    })
    spec.path(path="/monitors/{monitor_id}/series", operations={
        "get": operation(
            "listMonitorSeries", "A monitor's series (one per label set), each with its latest verdict", "read",
            {**json_ok("200", "A page of series; pass next_after as ?after= for the next.", "MonitorSeriesList"),
             **fail("400", "401", "403", "404", "429", "500")},
            parameters=[monitor_id, query("limit", "Series per page.", 100, 1000, 1),
                        query("after", "Continue after this series id.", 0, 2**63 - 1),
                        query("points", "Last points to include per series.", 0, 1000),
                        {"in": "query", "name": "match", "required": False, "schema": {"type": "string"},
                         "description": "A series selector on the labels, e.g. {instance=~\"web-.*\"}."},
                        {"in": "query", "name": "anomalous", "required": False, "schema": {"type": "boolean"},
                         "description": "Only the series with an open incident."}],
        ),
    })
    spec.path(path="/monitors/{monitor_id}/series/{series_id}", operations={
        "get": operation(
            "getMonitorSeries", "One series: its last points with verdicts, open anomalies and a forecast", "read",
            {**json_ok("200", "The series.", "MonitorSeries"), **fail("400", "401", "403", "404", "422", "429",
                                                                      "500")},
            parameters=[monitor_id, {"in": "path", "name": "series_id", "required": True,
                                     "schema": {"type": "integer"}, "description": "A series of the monitor."},
                        query("points", "Last points to include.", 10, 10_000),
                        query("horizon", "Forecast this many steps ahead (0: no forecast).", 0, 100), model],
        ),
    })
    spec.path(path="/monitors/{monitor_id}/points", operations={
        "post": operation(
            "addMonitorPoints", "Append points and get their verdicts (re-sent points answer as stored)", "write",
            {**json_ok("200", "One entry per sent point, as POST /anomalies answers.", "PointsResponse"),
             **fail("400", "401", "403", "404", "413", "415", "422", "429", "500")},
            body="PointsRequest", parameters=[monitor_id],
        ),
    })
    _document_intake(spec, operation, json_ok, fail, ok_headers, errors, secured)
    spec.path(path="/monitors/{monitor_id}/feedback", operations={
        "post": operation(
            "markMonitorPointNormal", "Say a stored point is not an anomaly; the detector learns it as normal", "write",
            {**json_ok("200", "The point, with its feedback; its verdict stays as given.", "Point"),
             **fail("400", "401", "403", "404", "415", "422", "429", "500")},
            body="FeedbackRequest", parameters=[monitor_id],
        ),
    })
    spec.path(path="/monitors/{monitor_id}/webhook-secret", operations={
        "post": operation(
            "rotateMonitorSecret", "Replace the webhook secret; the new one is in this response only", "write",
            {**json_ok("200", "The new secret; it signs every delivery from now on.", "WebhookSecret"),
             **fail("401", "403", "404", "429", "500")},
            parameters=[monitor_id],
        ),
    })
    spec.path(path="/monitors/metrics", operations={
        "get": {
            "operationId": "getMonitorMetrics", "tags": ["Monitors"], "security": secured,
            "summary": "Every monitor's latest verdict as Prometheus gauges (value, expected, bounds, score, flag)",
            "description": "Needs a key with the admin permission; not counted. The caller's account's monitors, "
                           "one line per series of each monitor per gauge, labelled monitor_id and monitor_name, "
                           "and for a labelled series its labels (without __name__) and series_id.",
            "responses": {"200": {"description": "Prometheus text format.",
                                  "content": {"text/plain": {"schema": {"type": "string"}}}},
                          **errors("401", "403", "500")},
        },
    })
    spec.path(path="/monitors/{monitor_id}/deliveries", operations={
        "get": operation(
            "listMonitorDeliveries", "The monitor's alert events and every delivery attempt, newest first", "read",
            {**json_ok("200", "The delivery log.", "Deliveries"), **fail("400", "401", "403", "404", "429", "500")},
            parameters=[monitor_id, query("limit", "Events to include.", 100, 1000, 1)],
        ),
    })


def _document_intake(spec: Any, operation: Callable[..., dict[str, Any]], json_ok: Callable[..., dict[str, Any]],
                     fail: Callable[..., dict[str, Any]], ok_headers: dict[str, Any],
                     errors: Callable[..., dict[str, Any]], secured: list[dict[str, Any]]) -> None:
    """POST /monitors/points and POST /api/v1/write (app/monitors/intake/routes.py)."""
    row = {"type": "object", "required": ["monitor_id", "timestamp", "value"], "properties": {
        "monitor_id": {"type": "string", "minLength": 1, "maxLength": 64},
        "timestamp": {"type": "string", "format": "date-time"}, "value": {"type": "number"}}}
    spec.components.schema("BulkPointsRequest", component={
        "type": "object", "required": ["points"],
        "properties": {"points": {"type": "array", "items": row, "description": "Each monitor's rows in time "
                                  "order, interleaved as you like; at most MAX_POINTS rows."}}})
    error = {"type": "object", "properties": {"code": {"type": "string"}, "message": {"type": "string"},
                                              "details": {"type": "object"}}}
    spec.components.schema("BulkPointsResponse", component={
        "type": "object", "required": ["monitors", "rejected_rows", "rows", "stored_points", "failed_rows"],
        "properties": {
            "monitors": {"type": "array", "items": {"type": "object", "required": ["monitor_id", "status", "rows"],
                                                    "properties": {"monitor_id": {"type": "string"},
                                                                   "status": {"type": "integer"},
                                                                   "rows": {"type": "array",
                                                                            "items": {"type": "integer"}},
                                                                   "error": error},
                                                    "description": "The single append's answer with status 200, "
                                                                   "or status and error."}},
            "rejected_rows": {"type": "array", "items": {"type": "object", "properties": {
                "row": {"type": "integer"}, "status": {"type": "integer"}, "error": error}}},
            "rows": {"type": "integer"}, "stored_points": {"type": "integer"}, "failed_rows": {"type": "integer"}}})
    bulk = operation(
        "addPointsToMonitors", "Points for many monitors in one body (JSON or NDJSON rows); per monitor, the single "
        "append's answer", "write",
        {**json_ok("200", "Every row stored or answered as stored.", "BulkPointsResponse"),
         **json_ok("207", "Some rows or monitors failed: see rejected_rows and each monitor's status.",
                   "BulkPointsResponse"),
         **fail("400", "401", "403", "413", "415", "422", "429", "500")},
        body="BulkPointsRequest",
    )
    bulk["requestBody"]["content"]["application/x-ndjson"] = {"schema": {"type": "string", "description": "One "
                                                              "row object per line."}}
    spec.path(path="/monitors/points", operations={"post": bulk})
    spec.path(path="/api/v1/write", operations={"post": {
        "operationId": "prometheusRemoteWrite", "tags": ["Monitors"], "security": secured,
        "summary": "Prometheus remote write 1.0: samples go to the monitors whose remote_write_selector matches",
        "description": "Needs a key with the write permission; counted against its rate limits. A snappy "
                       "block-compressed WriteRequest (Content-Encoding: snappy). Samples that cannot be stored "
                       "(no matching monitor, NaN, stale markers, late or conflicting) are counted in "
                       "forecast_remote_write_samples_total and dropped.",
        "requestBody": {"required": True, "content": {"application/x-protobuf": {
            "schema": {"type": "string", "format": "binary"}}}},
        "responses": {"204": {"description": "Every sample stored or counted and dropped.", "headers": {
            **ok_headers, "X-Samples-Stored": {"schema": {"type": "integer"}},
            "X-Samples-Dropped": {"schema": {"type": "integer"}}}},
            **errors("400", "401", "403", "413", "415", "429", "500")},
    }})
