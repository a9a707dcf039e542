"""The service's own endpoints, apart from any capability: liveness and readiness (no key), the Prometheus
metrics (admin) and the OpenAPI document (any valid key); none is counted."""

from __future__ import annotations

import logging
import os

from flask import Blueprint, Response, jsonify, request
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, multiprocess

from app.services import current_services
from app.web.metrics import WORKERS_READY
from app.web.openapi import served_document
from app.web.pipeline import public, requires, uncounted

bp = Blueprint("service", __name__)
log = logging.getLogger("app.web.health")


@bp.get("/healthz")
@public
def healthz() -> Response:
    return jsonify({"status": "ok"})


@bp.get("/readyz")
@public
def readyz() -> Response:
    services = current_services()
    checks: dict[str, str] = {}
    try:
        services.database.ping()
        checks["database"] = "ok"
    except Exception:
        log.warning("readiness: database unreachable", exc_info=True)
        checks["database"] = "unreachable"
    try:
        checks["rate_limit_storage"] = "ok" if services.limits.storage_ok() else "unreachable"
    except Exception:
        checks["rate_limit_storage"] = "unreachable"
    services.warm_up()  # a server started without gunicorn's hook (flask run) warms up here
    # Counts only workers that can take a job now: an idle one that died is found and replaced here.
    ready_workers = services.pool.check_idle_workers()
    checks["forecast_workers"] = f"{ready_workers}/{services.pool.size}"
    ok = checks["database"] == "ok" and checks["rate_limit_storage"] == "ok" and ready_workers > 0
    response = jsonify({"status": "ready" if ok else "not ready", "checks": checks})
    response.status_code = 200 if ok else 503
    return response


@bp.get("/metrics")
@uncounted
@requires("admin")
def metrics() -> Response:
    WORKERS_READY.set(current_services().pool.ready_workers)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Several gunicorn processes: add up what each one wrote to the shared directory.
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        payload = generate_latest(registry)
    else:
        payload = generate_latest()
    # content_type, not mimetype: CONTENT_TYPE_LATEST already names its charset, and werkzeug would add another.
    return Response(payload, content_type=CONTENT_TYPE_LATEST)


@bp.get("/openapi.json")
@uncounted
def openapi_document() -> Response:
    body, etag = served_document()
    response = Response(body, mimetype="application/json")
    response.set_etag(etag)
    return response.make_conditional(request)
