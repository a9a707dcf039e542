"""Points for many monitors at once: POST /monitors/points (JSON or newline-delimited JSON rows) and Prometheus
remote write (POST /api/v1/write). Both store and judge through app.monitors.intake.ingest, as the single append
does."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request

from app.errors import MalformedInput, ServiceError
from app.monitors.intake import bulk, ingest, remote_write, transactions
from app.monitors.state.runtime import MonitorRuntime
from app.services import current_services
from app.web.body import read_body, require_json_content_type
from app.web.errors import (
    ApiError,
    DataValidationError,
    InvalidRequest,
    ServiceUnavailable,
    UnsupportedMediaType,
    api_error_for,
)
from app.web.pipeline import current_key, requires
from app.web.validation import parse_json_body, problem

bp = Blueprint("monitor_intake", __name__)

REMOTE_WRITE_CONTENT_TYPE = "application/x-protobuf"
# The message of remote write 1.0; 2.0's (io.prometheus.write.v2.Request) is answered 415.
REMOTE_WRITE_1_MESSAGE = "prometheus.WriteRequest"


def _runtime() -> MonitorRuntime:
    return current_app.extensions["monitors"]  # type: ignore[no-any-return]


@bp.post("/monitors/points")
@requires("write")
def bulk_points() -> tuple[Response, int]:
    services = current_services()
    ndjson = request.mimetype in bulk.NDJSON_TYPES
    if not ndjson:
        require_json_content_type()
    rows = _body_rows(read_body(services.settings.max_body_bytes), ndjson=ndjson,
                      max_rows=services.settings.max_points)
    checked = bulk.check_rows(rows)
    rejected = [_rejected_row(refused) for refused in checked.rejected]
    if not checked.monitors:
        raise _no_usable_row(rejected)
    keys = list(checked.monitors)
    results = transactions.append_chunked(
        database=services.database, pool=services.pool, runtime=_runtime(), account_id=current_key().account_id,
        batch=[ingest.SeriesPoints(monitor_id, labels, checked.monitors[(monitor_id, labels)].points())
               for monitor_id, labels in keys],
    )
    entries: list[dict[str, Any]] = []
    failed_rows = len(checked.rejected)
    for (monitor_id, labels), result in zip(keys, results, strict=True):
        group = checked.monitors[(monitor_id, labels)]
        named = {"labels": dict(labels)} if labels else {}
        if isinstance(result, ServiceError):
            refusal = api_error_for(result)
            error = _error_entry(refusal)
            index = (result.details or {}).get("index")
            if isinstance(index, int) and 0 <= index < len(group.rows):  # the point's place in the body
                error["details"] = {**error.get("details", {}), "row": group.rows[index]}
            entries.append({"monitor_id": monitor_id, **named, "status": refusal.status, "rows": group.rows,
                            "error": error})
            failed_rows += len(group.rows)
        else:
            answer = result.answer()
            if labels:
                answer = {"monitor_id": answer.pop("monitor_id"), **named, "series_id": result.series.series_id,
                          **answer}
            entries.append({"status": 200, "rows": group.rows, **answer})
    body = {
        "monitors": entries,
        "rejected_rows": rejected,
        "rows": checked.rows,
        "stored_points": sum(e.get("new_points", 0) for e in entries),
        "failed_rows": failed_rows,
    }
    return jsonify(body), (207 if failed_rows else 200)


def _body_rows(raw: bytes, *, ndjson: bool, max_rows: int) -> list[Any]:
    """The rows of a body: a JSON body's ``points`` array, or one parsed value per non-blank NDJSON line (a line
    that is not JSON stays in place as its MalformedInput, so it gets its own entry)."""
    if not ndjson:
        body = parse_json_body(raw)
        if not isinstance(body, dict) or not isinstance(body.get("points"), list):
            issue = "Must be a JSON object with a 'points' array of {monitor_id, timestamp, value} rows"
            raise InvalidRequest(f"Invalid request: points: {issue}.", details=problem("points", issue, ""))
        rows = body["points"]
    else:
        rows = []
        for line in raw.split(b"\n"):
            if not line.strip():
                continue
            if len(rows) >= max_rows:
                rows.append(None)  # enough to report the excess below without parsing the rest
                break
            try:
                rows.append(parse_json_body(line))
            except InvalidRequest as exc:
                rows.append(MalformedInput(exc.message, details=exc.details))
    if not rows:
        raise DataValidationError("Invalid points: at least one row is needed.",
                                  details=problem("points", "at least one row is needed", "0 rows", minimum=1))
    if len(rows) > max_rows:
        raise DataValidationError("Invalid points: too many rows.",
                                  details=problem("points", "too many rows", f"more than {max_rows}",
                                                  maximum=max_rows))
    return rows


def _error_entry(error: ApiError) -> dict[str, Any]:
    body: dict[str, Any] = {"code": error.code, "message": error.message}
    if error.details:
        body["details"] = error.details
    return body


def _rejected_row(refused: bulk.RefusedRow) -> dict[str, Any]:
    error = api_error_for(refused.error)
    return {"row": refused.row, "status": error.status, "error": _error_entry(error)}


def _no_usable_row(rejected: list[dict[str, Any]]) -> DataValidationError:
    """The answer when every row was refused: nothing to store, so the request itself is a 422 (its details list
    the rows' own errors, at most the first 100)."""
    first = rejected[0]["error"]
    details = {**first.get("details", {}), "rejected_rows": len(rejected), "errors": rejected[:100]}
    return DataValidationError(f"Invalid points: no usable row; the first: {first['message']}", details=details)


@bp.post("/api/v1/write")
@requires("write")
def prometheus_remote_write() -> Response:
    """Prometheus remote write 1.0: 204 when every sample was dealt with (stored, or counted and dropped)."""
    services = current_services()
    _check_remote_write_headers()
    write_request = remote_write.decode(read_body(services.settings.max_body_bytes))
    remote_write.check_size(write_request, services.settings.max_points)
    received = remote_write.receive(
        database=services.database, pool=services.pool, runtime=_runtime(), account_id=current_key().account_id,
        request=write_request, max_points=services.settings.max_points,
    )
    if received.retry:
        raise ServiceUnavailable("Some samples could not be stored now; the sender should retry the request (the "
                                 "samples already stored are answered as duplicates).")
    response = Response(status=204)
    counts = received.counts
    response.headers["X-Samples-Stored"] = str(counts["stored"] + counts["duplicate"])
    response.headers["X-Samples-Dropped"] = str(sum(counts.values()) - counts["stored"] - counts["duplicate"])
    return response


def _check_remote_write_headers() -> None:
    """415 unless the body is a snappy-compressed remote write 1.0 WriteRequest, as the remote write 2.0 spec asks
    of a receiver that does not speak the message a sender chose (its ``proto`` parameter)."""
    encoding = request.headers.get("Content-Encoding", "").strip().lower()
    if encoding != "snappy":
        raise UnsupportedMediaType(
            "Remote write bodies must be snappy-compressed (Content-Encoding: snappy).",
            details={"field": "Content-Encoding", "issue": "Must be snappy", "provided": encoding[:64]},
            headers={"Accept-Encoding": "snappy"})
    if not request.content_type:
        return
    if request.mimetype != REMOTE_WRITE_CONTENT_TYPE:
        raise UnsupportedMediaType(
            f"Remote write bodies must be protobuf (Content-Type: {REMOTE_WRITE_CONTENT_TYPE}).",
            details={"field": "Content-Type", "issue": f"Must be {REMOTE_WRITE_CONTENT_TYPE}",
                     "provided": request.mimetype[:64]})
    message = request.mimetype_params.get("proto", REMOTE_WRITE_1_MESSAGE)
    if message != REMOTE_WRITE_1_MESSAGE:
        raise UnsupportedMediaType(
            f"This receiver speaks remote write 1.0 only (proto={REMOTE_WRITE_1_MESSAGE}), not {message[:64]}: "
            f"set protobuf_message: {REMOTE_WRITE_1_MESSAGE} in the sender's remote_write block. Nothing of this "
            "request was written.",
            details={"field": "Content-Type", "issue": f"proto must be {REMOTE_WRITE_1_MESSAGE}",
                     "provided": request.content_type[:128]},
            headers={"X-Prometheus-Remote-Write-Samples-Written": "0",
                     "X-Prometheus-Remote-Write-Histograms-Written": "0",
                     "X-Prometheus-Remote-Write-Exemplars-Written": "0"})
