"""GET /verify's answer: is this key valid, what may it do, how much of its limit is left."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from marshmallow import Schema, fields, validate

from app.keys.records import PERMISSIONS

if TYPE_CHECKING:
    from app.keys.records import ApiKey
    from app.web.ratelimit import WindowStatus


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


def verify_body(key: ApiKey, status: WindowStatus) -> dict[str, Any]:
    """GET /verify's answer, built to VerifyResponseSchema (which documents it; dumping it again cost ~8% of the
    request)."""
    now = datetime.now(UTC)
    return {
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


def document(spec: Any, errors: Callable[..., dict[str, Any]], ok_headers: dict[str, Any]) -> None:
    spec.components.schema("VerifyResponse", schema=VerifyResponseSchema)
    spec.path(
        path="/verify",
        operations={
            "get": {
                "tags": ["Authentication"],
                "summary": "Check a key, its permissions and its rate-limit status",
                "security": [{"bearerAuth": []}],
                "responses": {
                    "200": {"description": "The key is valid.", "headers": ok_headers,
                            "content": {"application/json": {"schema": "VerifyResponse"}}},
                    **errors("401", "403", "429", "500"),
                },
            }
        },
    )
