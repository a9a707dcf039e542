"""GET /verify: is this key valid, what may it do, how much of its limit is left."""

from __future__ import annotations

from datetime import UTC, datetime

from flask import Blueprint, Response, jsonify
from marshmallow import Schema, fields, validate

from app.keys.records import PERMISSIONS
from app.web.pipeline import current_key, limit_status, uncounted

bp = Blueprint("verify", __name__)


class VerifyApiKeySchema(Schema):
    permissions = fields.List(fields.String(validate=validate.OneOf(PERMISSIONS)), required=True)


class VerifyRateLimitSchema(Schema):
    limit = fields.String(required=True, metadata={"description": "Request limit (numeric text).", "example": "50"})
    remaining = fields.String(required=True, metadata={"description": "Requests remaining.", "example": "49"})
    resetTime = fields.String(  # noqa: N815 (the contract's spelling)
        required=True, metadata={"description": "Reset time, epoch milliseconds.", "example": "1795318433000"}
    )


class VerifyResponseSchema(Schema):
    success = fields.Boolean(required=True)
    message = fields.String(required=True)
    timestamp = fields.String(required=True, metadata={"example": "2026-11-22T03:33:53.123Z"})
    apiKey = fields.Nested(VerifyApiKeySchema, required=True)  # noqa: N815
    rateLimit = fields.Nested(VerifyRateLimitSchema, required=True)  # noqa: N815


@bp.get("/verify")
@uncounted
def verify() -> Response:
    key = current_key()
    status = limit_status()
    now = datetime.now(UTC)
    body = {
        "success": True,
        "message": "API key is valid.",
        "timestamp": now.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "apiKey": {"permissions": list(key.permissions)},
        "rateLimit": {
            "limit": str(status.limit),
            "remaining": str(status.remaining),
            "resetTime": str(status.reset_seconds * 1000),
        },
    }
    # The body is built to VerifyResponseSchema, which documents it; dumping it again cost ~8% of the request.
    return jsonify(body)
