"""The /keys API: an admin key manages the keys of its own account over HTTP.

Every call is authenticated and counted like any other; the rules (own account only, never grant
more than the caller holds) live in app.keys.manage, shared with the dashboard.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from flask import Blueprint, Response, jsonify, request
from marshmallow import EXCLUDE, RAISE, Schema, ValidationError, fields, validate, validates_schema

from app.keys import manage
from app.keys.answers import bucket_body, key_body, rate_windows
from app.keys.limits import TIERS
from app.keys.records import OUTCOMES, PERMISSIONS
from app.keys.store import KeyInputError
from app.keys.verify import verify_body
from app.services import current_services
from app.web.body import read_body
from app.web.errors import Forbidden, InvalidRequest, NotFound, UnsupportedMediaType
from app.web.fields import StoredText
from app.web.pipeline import current_key, limit_status, requires, uncounted
from app.web.validation import parse_json_body, refuse_unstorable_request_values

bp = Blueprint("keys", __name__)
# For every route, not only these: an id in the path (404) or a query value (400) that no database can hold
# (NUL, a lone surrogate) is answered before any view looks it up, instead of the driver's 500 (PostgreSQL
# refuses NUL). Registered with the app's first blueprint that takes ids from the path; it runs after the
# pipeline's own checks, so a bad key still answers 401 first. It belongs with app.web.pipeline's stages.
bp.before_app_request(refuse_unstorable_request_values)

MAX_HISTORY_HOURS = 90 * 24
DEFAULT_HISTORY_HOURS = 168
MAX_NAME_LENGTH = 200


def _no_control_characters(value: str) -> None:
    # No name needs control characters (NUL, which no database here stores, is refused by StoredText too).
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ValidationError("Must not contain control characters.")


def _representable(value: datetime) -> None:
    # An offset can carry 9999-12-31 past the last instant a datetime holds; storing it in UTC would fail.
    try:
        value.astimezone(UTC)
    except OverflowError:
        raise ValidationError("Must be at most 9999-12-31T23:59:59Z once its UTC offset is applied.") from None


# --- schemas -------------------------------------------------------------------------------------

class _Instant(fields.AwareDateTime):
    """An ISO 8601 date-time and nothing else: marshmallow's own reading stops where its pattern does, so
    "2099-01-01T00:00:00Zjunk" would pass as 2099-01-01 (and fromisoformat, in C, stops at a NUL)."""

    def _deserialize(self, value: Any, attr: str | None, data: Mapping[str, Any] | None, **kwargs: Any) -> datetime:
        if isinstance(value, str):
            try:
                if "\x00" in value:
                    raise ValueError(value)
                datetime.fromisoformat(value)
            except ValueError:
                raise self.make_error("invalid", input=value, obj_type=self.OBJ_TYPE) from None
        return super()._deserialize(value, attr, data, **kwargs)  # type: ignore[no-any-return]


class LimitsSchema(Schema):
    class Meta:
        unknown = RAISE

    per_minute = fields.Integer(strict=True, validate=validate.Range(min=1))
    per_hour = fields.Integer(strict=True, validate=validate.Range(min=1))
    per_day = fields.Integer(strict=True, validate=validate.Range(min=1))


class KeyLimitsOutSchema(Schema):
    per_minute = fields.Integer(required=True)
    per_hour = fields.Integer(required=True)
    per_day = fields.Integer(required=True)


class KeySchema(Schema):
    id = fields.String(required=True, metadata={"example": "key_0123456789abcdef"})
    name = fields.String(required=True)
    prefix = fields.String(required=True, metadata={"description": "First 11 characters of the key."})
    last4 = fields.String(allow_none=True, metadata={"description": "Last 4 characters (null for older keys)."})
    display = fields.String(required=True, metadata={"example": "ak_1a2b3c4d…9f0e"})
    permissions = fields.List(fields.String(validate=validate.OneOf(PERMISSIONS)), required=True)
    tier = fields.String(allow_none=True, metadata={"enum": list(TIERS)})
    limits = fields.Nested(KeyLimitsOutSchema, required=True)
    status = fields.String(required=True, metadata={"enum": ["active", "expired", "revoked"]})
    created = fields.String(required=True, metadata={"format": "date-time"})
    expires = fields.String(allow_none=True, metadata={"format": "date-time"})
    revoked = fields.String(allow_none=True, metadata={"format": "date-time"})
    last_used = fields.String(allow_none=True, metadata={"format": "date-time"})
    usage_count = fields.Integer(required=True)
    rotated_to = fields.String(allow_none=True, metadata={"description": "Id of the key that replaced this one."})
    created_by = fields.String(allow_none=True, metadata={
        "description": "Id of the key that created this one (a replacement: its predecessor's); null for a key "
                       "made with the command line. Revoking a key revokes every key it created, and theirs."})


class RevokedKeySchema(KeySchema):
    revoked_with = fields.List(fields.String(), required=True, metadata={
        "description": "Ids of the keys revoked with this one: every key it created, and every key those created."})


class KeyListSchema(Schema):
    keys = fields.List(fields.Nested(KeySchema), required=True)


class CreatedKeySchema(KeySchema):
    key = fields.String(
        required=True, metadata={"description": "The plain key. Shown in this response only; store it now."}
    )


class RotatedKeySchema(Schema):
    new_key = fields.Nested(CreatedKeySchema, required=True)
    old_key = fields.Nested(KeySchema, required=True)


class CreateKeySchema(Schema):
    class Meta:
        unknown = RAISE

    name = StoredText(load_default="", validate=[validate.Length(max=MAX_NAME_LENGTH), _no_control_characters])
    permissions = fields.List(
        fields.String(validate=validate.OneOf(PERMISSIONS)),
        required=True,
        validate=validate.Length(min=1),
        metadata={"description": "No permission the calling key lacks."},
    )
    tier = fields.String(load_default=None, allow_none=True, validate=validate.OneOf(list(TIERS)))
    limits = fields.Nested(
        LimitsSchema, load_default=None, allow_none=True,
        metadata={"description": "Custom limits; each at most the calling key's own."},
    )
    expires_at = _Instant(
        load_default=None, allow_none=True, format="iso", default_timezone=UTC, validate=_representable,
        metadata={"description": "When the key stops working; at most the calling key's own expiry. Left out: "
                  "the calling key's expiry (none when the calling key never expires)."},
    )


class UpdateKeySchema(Schema):
    class Meta:
        unknown = RAISE

    name = StoredText(validate=[validate.Length(max=MAX_NAME_LENGTH), _no_control_characters])
    tier = fields.String(validate=validate.OneOf(list(TIERS)))
    limits = fields.Nested(LimitsSchema)

    @validates_schema
    def _asks_for_a_change(self, data: Mapping[str, Any], **_: Any) -> None:
        if not data:
            raise ValidationError("Give at least one of name, tier, limits.", field_name="_schema")


class RotateKeySchema(Schema):
    class Meta:
        unknown = RAISE

    grace_seconds = fields.Integer(
        strict=True,
        load_default=int(manage.DEFAULT_GRACE.total_seconds()),
        validate=validate.Range(min=0, max=int(manage.MAX_GRACE.total_seconds())),
        metadata={"description": "How long the old key keeps working: 0 (now) to 604800 (7 days)."},
    )


class UsageQuerySchema(Schema):
    class Meta:
        unknown = EXCLUDE

    hours = fields.Integer(
        load_default=DEFAULT_HISTORY_HOURS, validate=validate.Range(min=1, max=MAX_HISTORY_HOURS)
    )


class UsageBucketSchema(Schema):
    hour = fields.String(required=True, metadata={"format": "date-time", "description": "Start of the UTC hour."})
    total = fields.Integer(required=True)


for _outcome in OUTCOMES:
    UsageBucketSchema._declared_fields[_outcome] = fields.Integer(required=True)


class RateWindowSchema(Schema):
    window = fields.String(required=True, metadata={"enum": ["minute", "hour", "day"]})
    limit = fields.Integer(required=True)
    remaining = fields.Integer(required=True)
    reset = fields.Integer(required=True, metadata={"description": "Epoch seconds when a request frees up."})


class KeyUsageSchema(Schema):
    key_id = fields.String(required=True)
    hours = fields.Integer(required=True)
    totals = fields.Dict(keys=fields.String(), values=fields.Integer(), required=True)
    buckets = fields.List(fields.Nested(UsageBucketSchema), required=True)
    rate_limits = fields.List(fields.Nested(RateWindowSchema), required=True)


# --- request helpers -----------------------------------------------------------------------------


def _first_issue(messages: Any, prefix: str = "") -> tuple[str, str]:
    """The first (field path, message) out of marshmallow's nested error dict."""
    if isinstance(messages, dict):
        for name, inner in messages.items():
            path = prefix if name == "_schema" else (f"{prefix}.{name}" if prefix else str(name))
            return _first_issue(inner, path)
    if isinstance(messages, list) and messages:
        return _first_issue(messages[0], prefix)
    return prefix or "body", str(messages).rstrip(".")


def _provided(payload: Any, path: str) -> Any:
    value = payload
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


def _load(schema: Schema, payload: Any) -> dict[str, Any]:
    try:
        return schema.load(payload)
    except ValidationError as exc:
        field, issue = _first_issue(exc.messages)
        details: dict[str, Any] = {"field": field, "issue": issue}
        provided = _provided(payload, field)
        if provided is not None:
            details["provided"] = provided
        position = field.rsplit(".", 1)[-1]
        if position.isdigit():
            details["index"] = int(position)
        raise InvalidRequest(f"Invalid request: {field}: {issue}.", details=details) from None


def _json_body(*, optional: bool = False) -> Any:
    raw = read_body(current_services().settings.max_body_bytes)
    if not raw.strip():
        if optional:
            return {}
        raise InvalidRequest("A JSON body is required.", details={"field": "body", "issue": "missing"})
    if not (request.mimetype or "").endswith("json"):
        raise UnsupportedMediaType("The request body must be JSON (Content-Type: application/json).")
    payload = parse_json_body(raw)  # malformed or nested too deeply: its own 400, saying which
    if not isinstance(payload, dict):
        raise InvalidRequest("The body must be a JSON object.", details={"field": "body", "issue": "not a JSON object"})
    return payload


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


# --- views ---------------------------------------------------------------------------------------


@bp.get("/keys")
@requires("admin")
def list_keys() -> Response:
    keys = manage.list_keys(current_services().database, current_key())
    now = datetime.now(UTC)
    return jsonify({"keys": [key_body(key, now) for key in keys]})


@bp.post("/keys")
@requires("admin")
def create_key() -> Response:
    data = _load(CreateKeySchema(), _json_body())
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
    data = _load(RotateKeySchema(), _json_body(optional=True))
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
    data = _load(UpdateKeySchema(), _json_body())
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
    query = _load(UsageQuerySchema(), request.args.to_dict())
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


# --- OpenAPI -------------------------------------------------------------------------------------


@bp.get("/verify")
@uncounted
def verify() -> Response:
    return jsonify(verify_body(current_key(), limit_status()))


def document(spec: Any, errors: Callable[..., dict[str, Any]], ok_headers: dict[str, Any]) -> None:
    """Adds the /keys operations to the service's OpenAPI document (app.web.openapi builds the rest)."""
    for name, schema in (("Key", KeySchema), ("KeyList", KeyListSchema), ("CreatedKey", CreatedKeySchema),
                         ("RotatedKey", RotatedKeySchema), ("RevokedKey", RevokedKeySchema),
                         ("CreateKeyRequest", CreateKeySchema),
                         ("UpdateKeyRequest", UpdateKeySchema), ("RotateKeyRequest", RotateKeySchema),
                         ("KeyUsage", KeyUsageSchema)):
        spec.components.schema(name, schema=schema)
    secured = [{"bearerAuth": []}]
    key_id = {"in": "path", "name": "key_id", "required": True, "schema": {"type": "string"},
              "description": "A key id of the caller's account (another account's key is a 404)."}

    def json_ok(status: str, description: str, schema: str) -> dict[str, Any]:
        return {status: {"description": description, "headers": ok_headers,
                         "content": {"application/json": {"schema": schema}}}}

    def operation(op_id: str, summary: str, responses: dict[str, Any], *, body: str | None = None,
                  body_required: bool = True, parameters: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = {
            "operationId": op_id, "tags": ["Keys"], "summary": summary, "security": secured,
            "description": "Needs a key with the admin permission; counted against its rate limits. A key "
                           "gives no more than it holds (permissions, limits, expiry), changes, rotates or revokes "
                           "only keys whose permissions it holds, and manages no keys once it has been rotated "
                           "(403). Every change is logged with the acting key's id.",
            "responses": responses,
        }
        if parameters:
            result["parameters"] = parameters
        if body:
            result["requestBody"] = {"required": body_required, "content": {"application/json": {"schema": body}}}
        return result

    spec.path(path="/keys", operations={
        "get": operation("listKeys", "The keys of the caller's account (never the plain key or its hash)",
                         {**json_ok("200", "The keys.", "KeyList"), **errors("401", "403", "429", "500")}),
        "post": operation(
            "createKey", "Create a key; the plain key is in this response only",
            {**json_ok("201", "The new key, with the plain key in `key`.", "CreatedKey"),
             **errors("400", "401", "403", "415", "429", "500")},
            body="CreateKeyRequest",
        ),
    })
    spec.path(path="/keys/{key_id}", operations={
        "get": operation("getKey", "One key", {**json_ok("200", "The key.", "Key"),
                                               **errors("401", "403", "404", "429", "500")}, parameters=[key_id]),
        "patch": operation(
            "updateKey", "Change a key's name, tier or custom limits (never above the caller's own)",
            {**json_ok("200", "The key as changed.", "Key"), **errors("400", "401", "403", "404", "415", "429", "500")},
            body="UpdateKeyRequest", parameters=[key_id],
        ),
    })
    spec.path(path="/keys/{key_id}/revoke", operations={
        "post": operation("revokeKey", "Revoke a key at once, and every key it created (and theirs)", {
            **json_ok("200", "The revoked key, and the ids of the keys revoked with it.", "RevokedKey"),
            **errors("401", "403", "404", "429", "500")},
            parameters=[key_id]),
    })
    spec.path(path="/keys/{key_id}/rotate", operations={
        "post": operation(
            "rotateKey", "Replace a key; the old one keeps working for the grace period (default 24 h)",
            {**json_ok("201", "The replacement (plain key included, once) and the old key.", "RotatedKey"),
             **errors("400", "401", "403", "404", "415", "429", "500")},
            body="RotateKeyRequest", body_required=False, parameters=[key_id],
        ),
    })
    spec.path(path="/keys/{key_id}/usage", operations={
        "get": operation(
            "keyUsage", "Counted requests per UTC hour by outcome (kept 90 days) and the live rate-limit windows",
            {**json_ok("200", "Hourly buckets, oldest first, zeros included.", "KeyUsage"),
             **errors("400", "401", "403", "404", "429", "500")},
            parameters=[key_id, {"in": "query", "name": "hours", "required": False,
                                 "schema": {"type": "integer", "minimum": 1, "maximum": MAX_HISTORY_HOURS,
                                            "default": DEFAULT_HISTORY_HOURS}}],
        ),
    })
