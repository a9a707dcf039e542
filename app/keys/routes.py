"""The /keys API (an admin key manages the keys of its own account over HTTP) and GET /verify.

Every call is authenticated and counted like any other; the rules (own account only, never grant more than the
caller holds) live in app.keys.manage, shared with the dashboard. Bodies are validated by app.keys.schemas
through the shared loader, so a bad one gets the same 400 as on every other endpoint.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from flask import Blueprint, Response, jsonify, request

from app.keys import manage
from app.keys.records import OUTCOMES
from app.keys.safe_view import bucket_body, key_body, rate_windows, verify_body
from app.keys.schemas import CreateKeySchema, RotateKeySchema, UpdateKeySchema, UsageQuerySchema
from app.keys.store import KeyInputError
from app.services import current_services
from app.web.body import read_body
from app.web.errors import Forbidden, InvalidRequest, NotFound, UnsupportedMediaType
from app.web.pipeline import current_key, limit_status, requires, uncounted
from app.web.validation import load_object, parse_json_body, refuse_unstorable_request_values

bp = Blueprint("keys", __name__)
# For every route, not only these: an id in the path (404) or a query value (400) that no database can hold
# (NUL, a lone surrogate) is answered before any view looks it up, instead of the driver's 500 (PostgreSQL
# refuses NUL). Registered with the app's first blueprint that takes ids from the path; it runs after the
# pipeline's own checks, so a bad key still answers 401 first. It belongs with app.web.pipeline's stages.
bp.before_app_request(refuse_unstorable_request_values)


def _json_body(*, optional: bool = False) -> Any:
    raw = read_body(current_services().settings.max_body_bytes)
    if not raw.strip():
        if optional:
            return {}
        raise InvalidRequest("A JSON body is required.", details={"field": "body", "issue": "missing"})
    if not (request.mimetype or "").endswith("json"):
        raise UnsupportedMediaType("The request body must be JSON (Content-Type: application/json).")
    # Malformed or nested too deeply: its own 400, saying which; a body that is not an object: load_object's.
    return parse_json_body(raw)


def _refused(error: manage.Refused) -> InvalidRequest | Forbidden:
    details: dict[str, Any] = {"field": error.field, "issue": error.issue}
    if error.provided is not None:
        details["provided"] = error.provided
    # Asking for more than the caller holds is a matter of authority (403); the rest is a bad request.
    if error.beyond_actor:
        return Forbidden(error.message, details=details)
    return InvalidRequest(error.message, details=details)


def _not_found(key_id: str) -> NotFound:
    return NotFound(f"No key with id {key_id!r} in this account.", details={"field": "id", "provided": key_id})


@bp.get("/verify")
@uncounted
def verify() -> Response:
    return jsonify(verify_body(current_key(), limit_status()))


@bp.get("/keys")
@requires("admin")
def list_keys() -> Response:
    keys = manage.list_keys(current_services().database, current_key())
    now = datetime.now(UTC)
    return jsonify({"keys": [key_body(key, now) for key in keys]})


@bp.post("/keys")
@requires("admin")
def create_key() -> Response:
    data = load_object(CreateKeySchema(), _json_body(), [])
    limits = data["limits"] or {}
    try:
        created = manage.create_key(
            current_services().database,
            current_key(),
            permissions=tuple(data["permissions"]),
            name=data["name"],
            expires_at=data["expires_at"],
            tier=data["tier"],
            per_minute=limits.get("per_minute"),
            per_hour=limits.get("per_hour"),
            per_day=limits.get("per_day"),
        )
    except manage.Refused as error:
        raise _refused(error) from None
    except KeyInputError as error:
        raise InvalidRequest(str(error), details={"field": "body", "issue": str(error)}) from None
    response = jsonify({**key_body(created.key), "key": created.plain_key})
    response.status_code = 201
    response.headers["Cache-Control"] = "no-store"
    response.headers["Location"] = f"/keys/{created.key.id}"
    return response


@bp.get("/keys/<key_id>")
@requires("admin")
def get_key(key_id: str) -> Response:
    try:
        key = manage.get_key(current_services().database, current_key(), key_id)
    except manage.KeyNotFound:
        raise _not_found(key_id) from None
    return jsonify(key_body(key))


@bp.post("/keys/<key_id>/revoke")
@requires("admin")
def revoke_key(key_id: str) -> Response:
    try:
        key, cascade = manage.revoke_key(current_services().database, current_key(), key_id)
    except manage.KeyNotFound:
        raise _not_found(key_id) from None
    except manage.Refused as error:
        raise _refused(error) from None
    current_services().keys.forget()
    return jsonify({**key_body(key), "revoked_with": cascade})


@bp.post("/keys/<key_id>/rotate")
@requires("admin")
def rotate_key(key_id: str) -> Response:
    data = load_object(RotateKeySchema(), _json_body(optional=True), [])
    try:
        created, old = manage.rotate_key(
            current_services().database, current_key(), key_id, grace=timedelta(seconds=data["grace_seconds"])
        )
    except manage.KeyNotFound:
        raise _not_found(key_id) from None
    except manage.Refused as error:
        raise _refused(error) from None
    current_services().keys.forget()
    response = jsonify({"new_key": {**key_body(created.key), "key": created.plain_key}, "old_key": key_body(old)})
    response.status_code = 201
    response.headers["Cache-Control"] = "no-store"
    return response


@bp.patch("/keys/<key_id>")
@requires("admin")
def update_key(key_id: str) -> Response:
    data = load_object(UpdateKeySchema(), _json_body(), [])
    limits = data.get("limits") or {}
    try:
        key = manage.update_key(
            current_services().database,
            current_key(),
            key_id,
            name=data.get("name"),
            tier=data.get("tier"),
            per_minute=limits.get("per_minute"),
            per_hour=limits.get("per_hour"),
            per_day=limits.get("per_day"),
        )
    except manage.KeyNotFound:
        raise _not_found(key_id) from None
    except manage.Refused as error:
        raise _refused(error) from None
    current_services().keys.forget()
    return jsonify(key_body(key))


@bp.get("/keys/<key_id>/usage")
@requires("admin")
def key_usage(key_id: str) -> Response:
    query = load_object(UsageQuerySchema(), request.args.to_dict(), [])
    try:
        key, buckets = manage.usage(current_services().database, current_key(), key_id, hours=query["hours"])
    except manage.KeyNotFound:
        raise _not_found(key_id) from None
    totals = {outcome: sum(b.counts[outcome] for b in buckets) for outcome in OUTCOMES}
    return jsonify({
        "key_id": key.id,
        "hours": query["hours"],
        "totals": {**totals, "total": sum(totals.values())},
        "buckets": [bucket_body(b) for b in buckets],
        "rate_limits": rate_windows(key),
    })
