"""Liveness and readiness probes; no key, not rate limited."""

from __future__ import annotations

import logging

from flask import Blueprint, Response, jsonify

from app.services import current_services
from app.web.pipeline import public

bp = Blueprint("health", __name__)
log = logging.getLogger("app.health")


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
