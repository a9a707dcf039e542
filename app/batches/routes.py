"""/batches: submit many series at once, follow the job, stream its results, cancel it (docs/batches.md)."""

from __future__ import annotations

import csv
import io
import json
import logging
from collections.abc import Iterator
from datetime import timedelta
from itertools import islice
from typing import Any

from flask import Blueprint, Response, jsonify, request
from werkzeug.wsgi import LimitedStream

from app.batches import quota, store
from app.batches.compute import FORECAST
from app.batches.schemas import batch_json
from app.batches.submit import (
    BatchFields,
    UploadScan,
    fields_from_query,
    pieces,
    read_json_batch,
)
from app.batches.tasks import batch_tasks
from app.errors import InvalidRequest, NotFound, PayloadTooLarge, UnsupportedMediaType
from app.ratelimit import too_many
from app.services import Services, current_services
from app.web.body import is_json_content_type, read_body
from app.web.pipeline import current_context, current_key, requires
from app.web.validation import parse_json_body

bp = Blueprint("batches", __name__)
log = logging.getLogger("app.batches")

NDJSON = "application/x-ndjson"
FORECAST_CSV_COLUMNS = ("unique_id", "timestamp", "lower", "median", "upper", "error")
ANOMALY_CSV_COLUMNS = ("unique_id", "timestamp", "expected", "lower", "upper", "anomaly_score", "is_anomaly",
                       "direction", "error")
LIST_LIMIT = (1, 1000, 100)


@bp.post("/batches")
@requires("write")
def submit() -> Response:
    services = current_services()
    settings = services.settings
    key = current_key()
    if request.mimetype == "text/csv":
        batch = _submit_csv(services)
    elif not request.content_type or is_json_content_type(request.mimetype):
        raw = read_body(settings.max_body_bytes)
        fields, series = read_json_batch(parse_json_body(raw), request.headers, max_series=settings.batch_max_series,
                                         escaped=b"\\u" in raw)
        quota.check(services.database, key.account_id, size=len(raw), quota=settings.batch_account_quota_bytes)
        _spend(services, len(series))
        batch = store.create_batch(services.database, key_id=key.id, account_id=key.account_id, kind=fields.kind,
                                   parameters=fields.parameters, series=series,
                                   chunk_series=settings.batch_chunk_series,
                                   lease_seconds=settings.batch_lease_seconds, body_bytes=len(raw))
        _enqueue(services, lambda tasks: tasks.enqueue_chunks((batch.id, seq) for seq in range(batch.chunks_total)))
    else:
        raise UnsupportedMediaType(
            "The request body must be JSON (Content-Type: application/json) or a CSV upload (Content-Type: "
            "text/csv).",
            details={"field": "Content-Type", "issue": "Must be application/json or text/csv",
                     "provided": request.mimetype},
        )
    response = jsonify(batch_json(batch))
    response.status_code = 202
    response.headers["Location"] = f"/batches/{batch.id}"
    return response


def _submit_csv(services: Services) -> store.Batch:
    settings = services.settings
    key = current_key()
    fields: BatchFields = fields_from_query(request.args, request.headers)
    limit = settings.batch_max_upload_bytes
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge.over(limit)
    stream = request.environ["wsgi.input"]
    if request.content_length is not None:
        stream = LimitedStream(stream, request.content_length)
    allowed = settings.batch_account_quota_bytes
    quota.check(services.database, key.account_id, size=request.content_length or 0, quota=allowed)
    scan = UploadScan(max_series=settings.batch_max_series)
    batch_id = store.start_upload(services.database, key_id=key.id, account_id=key.account_id, kind=fields.kind,
                                  parameters=fields.parameters)
    try:
        received = 0
        for seq, piece in enumerate(pieces(stream, max_bytes=limit, scan=scan)):
            # Checked as each piece arrives: the stored total includes the account's other uploads under way.
            quota.check(services.database, key.account_id, size=len(piece), quota=allowed, counted=received)
            store.add_upload_piece(services.database, batch_id, seq, piece)
            received += len(piece)
        series_total = scan.finish()
        _spend(services, series_total)
    except BaseException:
        store.discard(services.database, batch_id)
        raise
    batch = store.finish_upload(services.database, batch_id, series_total=series_total, upload_bytes=received,
                                lease_seconds=settings.batch_lease_seconds)
    _enqueue(services, lambda tasks: tasks.enqueue_preparation(batch_id))
    return batch


def _spend(services: Services, series: int) -> None:
    """A batch counts one request per series against the key's hour and day windows; the request itself was
    counted already. All or nothing: 429 when they do not fit."""
    key = current_key()
    if series > 1:
        count = services.limits.spend_long_windows(key, series - 1)
        current_context().limit_status = None  # the headers describe the windows after the spend
        if count.breached is not None:
            raise too_many(count.breached, f"Rate limit exceeded: a batch of {series:,} series counts {series:,} "
                                           f"requests; {count.breached.limit} are allowed per "
                                           f"{count.breached.window}, {count.breached.remaining} are left.")
        services.usage.record(key.id, status=202, count=series - 1)


def _enqueue(services: Services, put: Any) -> None:
    # The batch is stored already: if the queue is unreachable now, the sweep enqueues its work later.
    try:
        put(batch_tasks(services.jobs))
    except Exception:
        log.warning("could not enqueue a batch's work; the sweep will", exc_info=True)


def _owned(services: Services, batch_id: str) -> store.Batch:
    batch = store.get_batch(services.database, current_key().account_id, batch_id)
    if batch is None:
        raise NotFound("No such batch.", details={"field": "batch_id", "issue": "no such batch", "provided": batch_id})
    return batch


@bp.get("/batches/<batch_id>")
@requires("read")
def status(batch_id: str) -> Response:
    return jsonify(batch_json(_owned(current_services(), batch_id)))


@bp.get("/batches")
@requires("read")
def listing() -> Response:
    low, high, default = LIST_LIMIT
    raw = request.args.get("limit")
    limit = default
    if raw is not None:
        if not raw.isdigit() or not low <= int(raw) <= high:
            raise InvalidRequest(f"Invalid request: limit: Must be between {low} and {high}.",
                                 details={"field": "limit", "issue": f"Must be between {low} and {high}",
                                          "provided": raw[:64]})
        limit = int(raw)
    batches = store.list_batches(current_services().database, current_key().account_id, limit=limit)
    return jsonify({"batches": [batch_json(batch) for batch in batches]})


@bp.delete("/batches/<batch_id>")
@requires("delete")
def cancel(batch_id: str) -> Response:
    services = current_services()
    ttl = timedelta(hours=services.settings.batch_result_ttl_hours)
    if not store.cancel(services.database, current_key().account_id, batch_id, ttl=ttl):
        raise NotFound("No such batch.", details={"field": "batch_id", "issue": "no such batch", "provided": batch_id})
    return Response(status=204)


@bp.get("/batches/<batch_id>/results")
@requires("read")
def results(batch_id: str) -> Response:
    services = current_services()
    batch = _owned(services, batch_id)
    if batch.status == "cancelled":
        raise NotFound("This batch was cancelled; its results were deleted.",
                       details={"field": "batch_id", "issue": "cancelled", "provided": batch_id})
    wants_csv = request.args.get("format") == "csv" or (
        request.accept_mimetypes.best_match([NDJSON, "application/json", "text/csv"], default=NDJSON) == "text/csv"
    )
    outputs = store.done_lines(services.database, batch.id)
    if wants_csv:
        body, mimetype = csv_rows(outputs, batch.kind), "text/csv"
    else:
        body, mimetype = _json_lines(outputs), NDJSON
    response = Response(body, mimetype=mimetype)
    response.headers["X-Batch-Status"] = batch.status
    return response


def _json_lines(outputs: Iterator[bytes]) -> Iterator[bytes]:
    yield from outputs


# OWASP's CSV-injection defence: a spreadsheet takes a cell starting with one of these for a formula (a tab or
# carriage return can precede one), so such an id is written with a leading apostrophe, which spreadsheets
# show as text. An id that starts with an apostrophe itself gets one too, so a program reading the CSV undoes
# the defence exactly by removing one leading apostrophe (forecast_client does). Only ids are client text;
# the other cells are numbers, timestamps and the service's JSON.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "'")
# Rows gathered before a piece of the answer is handed on: few enough that a piece stays small (a row is at
# most a 200-character id and a few numbers), many enough that the per-piece cost is small.
_ROWS_PER_PIECE = 64


def safe_cell(text: str) -> str:
    """The id as a spreadsheet shows it without running it; the JSON lines keep every id as submitted."""
    return "'" + text if text.startswith(_FORMULA_STARTS) else text


def csv_rows(outputs: Iterator[bytes], kind: str) -> Iterator[str]:
    """The results as CSV, each series' result read from its stored JSON line and written a few rows at a
    time: what is held is one series' result and one small piece of text, whatever the ids or the horizon.
    Numbers are written by the csv module as repr() writes them: the shortest text that reads back as the
    same double."""
    columns = FORECAST_CSV_COLUMNS if kind == FORECAST else ANOMALY_CSV_COLUMNS
    text = io.StringIO()
    plain = csv.writer(text, lineterminator="\n")
    # The csv module quotes a field holding a line break only if that break is in its line terminator: an id
    # with a carriage return has its rows written with every field quoted, so it stays one field.
    quoted = csv.writer(text, lineterminator="\n", quoting=csv.QUOTE_ALL)
    plain.writerow(columns)
    for output in outputs:
        for line in output.splitlines():
            result = json.loads(line)
            unique_id = safe_cell(result["id"])
            writer = quoted if "\r" in unique_id else plain
            if "error" in result:
                writer.writerow([unique_id, *[""] * (len(columns) - 2),
                                 json.dumps({"error": result["error"]}, separators=(",", ":"))])
                continue
            if kind == FORECAST:
                rows: Iterator[list[Any]] = (
                    [unique_id, *row, ""] for row in zip(result["forecast_timestamps"], result["lower_bound"],
                                                         result["median"], result["upper_bound"], strict=True))
            else:
                rows = (
                    [unique_id, stamp, expected, lower, upper, score, "true" if flag else "false", direction or "",
                     ""]
                    for stamp, expected, lower, upper, score, flag, direction in zip(
                        result["timestamps"], result["expected"], result["lower_bound"], result["upper_bound"],
                        result["anomaly_score"], result["is_anomaly"], result["direction"], strict=True)
                )
            while part := list(islice(rows, _ROWS_PER_PIECE)):
                writer.writerows(part)
                yield text.getvalue()
                text.seek(0)
                text.truncate()
            del result
    yield text.getvalue()
