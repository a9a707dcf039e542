"""GET /verify (SPEC 2.5, 4.2): is this key valid, what may it do, how much of its limit is left."""

from __future__ import annotations

from datetime import UTC, datetime

from flask import Blueprint, Response, g, jsonify

from app.keys.records import ApiKey
from app.ratelimit import most_constraining

bp = Blueprint("verify", __name__)


@bp.get("/verify")
def verify() -> Response:
    key: ApiKey = g.api_key
    status = most_constraining(key)
    now = datetime.now(UTC)
    return jsonify(
        {
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
    )
