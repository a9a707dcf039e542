"""/batches: submit many series at once, follow the job, stream its results, cancel it (docs/batches.md)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from flask import Blueprint, Response, jsonify, request
from werkzeug.wsgi import LimitedStream

from app.batches import backtest, multipart, quota, store, stored_results
from app.batches.covariates import LIST_FIELDS
from app.batches.results import csv_rows
from app.batches.schemas import batch_json
from app.batches.submit import (
    BatchFields,
    UploadScan,
    fields_from_query,
    pieces,
    read_json_batch,
)
from app.batches.tasks import batch_tasks
from app.forecast.schemas import DEFAULT_CONFIDENCE
from app.services import Services, current_services
from app.web.body import is_json_content_type, read_body
from app.web.errors import InvalidRequest, NotFound, PayloadTooLarge, UnsupportedMediaType
from app.web.pipeline import current_context, current_key, requires
from app.web.ratelimit import too_many
from app.web.validation import parse_json_body

bp = Blueprint("batches", __name__)
log = logging.getLogger("app.batches")

NDJSON = "application/x-ndjson"
LIST_LIMIT = (1, 1000, 100)


@bp.post("/batches")
@requires("write")
def submit() -> Response:
    services = current_services()
    settings = services.settings
    key = current_key()
    if request.mimetype == "text/csv":
        batch = _submit_csv(services)
    elif request.mimetype == "multipart/form-data":
        batch = _submit_csv(services, form=True)
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
            "text/csv, or a multipart/form-data form with the file as its one part).",
            details={"field": "Content-Type", "issue": "Must be application/json, text/csv or multipart/form-data",
                     "provided": request.mimetype},
        )
    response = jsonify(batch_json(batch))
    response.status_code = 202
    response.headers["Location"] = f"/batches/{batch.id}"
    return response


def _submit_csv(services: Services, *, form: bool = False) -> store.Batch:
    """A CSV upload, the body itself or (``form``) the one file part of a multipart/form-data body: streamed to
    the database in pieces either way."""
    settings = services.settings
    key = current_key()
    fields: BatchFields = fields_from_query(request.args, request.headers)
    limit = settings.batch_max_upload_bytes
    boundary = multipart.boundary_of(request.mimetype_params) if form else ""
    slack = multipart.OVERHEAD_BYTES if form else 0
    if request.content_length is not None and request.content_length > limit + slack:
        raise PayloadTooLarge.over(limit)
    stream = request.environ["wsgi.input"]
    if request.content_length is not None:
        stream = LimitedStream(stream, request.content_length)
    if form:
        stream = multipart.FormFile(stream, boundary, max_bytes=limit)
    allowed = settings.batch_account_quota_bytes
    quota.check(services.database, key.account_id, size=request.content_length or 0, quota=allowed)
    chosen = fields.parameters["fields"]
    scan = UploadScan(max_series=settings.batch_max_series,
                      declared={name: chosen[name] for name in LIST_FIELDS if chosen.get(name)},
                      covariates=fields.kind != "anomalies")
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
    outputs = stored_results.done_lines(services.database, batch.id)
    if wants_csv:
        body, mimetype = csv_rows(outputs, batch.kind), "text/csv"
    else:
        body, mimetype = _json_lines(outputs), NDJSON
    response = Response(body, mimetype=mimetype)
    response.headers["X-Batch-Status"] = batch.status
    return response


@bp.get("/batches/<batch_id>/summary")
@requires("read")
def summary(batch_id: str) -> Response:
    """A backtest's scores per series and model, and per model over all series (docs/batches.md)."""
    services = current_services()
    batch = _owned(services, batch_id)
    if batch.kind != "backtest" or batch.status == "cancelled":
        issue = "not a backtest" if batch.kind != "backtest" else "cancelled"
        raise NotFound(f"This batch has no summary: {issue}.",
                       details={"field": "batch_id", "issue": issue, "provided": batch_id})
    body = backtest.summarize(stored_results.done_outputs(services.database, batch.id))
    response = jsonify({"batch_id": batch.id, "status": batch.status,
                        "confidence": batch.parameters["fields"].get("confidence", DEFAULT_CONFIDENCE), **body})
    response.headers["X-Batch-Status"] = batch.status
    return response


def _json_lines(outputs: Iterator[bytes]) -> Iterator[bytes]:
    yield from outputs
