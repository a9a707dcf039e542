"""What is safe to show about a key, as the API, GET /verify and the dashboard show it: never the plain key, never
its hash."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from app.api_key import ApiKey
from app.keys.usage import UsageBucket
from app.services import current_services

if TYPE_CHECKING:
    from app.rate_windows import WindowStatus


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def display_form(key: ApiKey) -> str:
    """How a key is shown to people: its prefix and, when stored, its last four characters."""
    return f"{key.prefix}…{key.last4}" if key.last4 else f"{key.prefix}…"


def shown_expiry(key: ApiKey) -> datetime | None:
    """The expiry worth showing: a revoked key stopped at its revocation, so an expiry after that never comes and
    showing it would promise a key that works until then (a rotated key's grace end, say)."""
    if key.revoked_at is not None and (key.expires_at is None or key.expires_at > key.revoked_at):
        return None
    return key.expires_at


def key_body(key: ApiKey, now: datetime | None = None) -> dict[str, Any]:
    """Everything safe to show about a key: never the plain key, never its hash."""
    now = now or datetime.now(UTC)
    return {
        "id": key.id,
        "name": key.name,
        "prefix": key.prefix,
        "last4": key.last4,
        "display": display_form(key),
        "permissions": list(key.permissions),
        "tier": key.tier,
        "limits": {"per_minute": key.per_minute, "per_hour": key.per_hour, "per_day": key.per_day},
        "status": key.status(now),
        "created": iso(key.created_at),
        "expires": iso(shown_expiry(key)),
        "revoked": iso(key.revoked_at),
        "last_used": iso(key.last_used_at),
        "usage_count": key.usage_count,
        "rotated_to": key.rotated_to,
        "created_by": key.created_by,
    }


def bucket_body(bucket: UsageBucket) -> dict[str, Any]:
    return {"hour": iso(bucket.hour), **bucket.counts, "total": bucket.total}


def rate_windows(key: ApiKey) -> list[dict[str, Any]]:
    """The key's three live rolling windows as the rate limiter sees them now, without spending from them."""
    return [
        {"window": status.window, "limit": status.limit, "remaining": status.remaining, "reset": status.reset_seconds}
        for status in current_services().limits.windows(key)
    ]


def verify_body(key: ApiKey, status: WindowStatus) -> dict[str, Any]:
    """GET /verify's answer, built by hand to VerifyResponseSchema (which documents it): dumping it through the
    schema on every call would make the cheapest request in the service noticeably dearer."""
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
