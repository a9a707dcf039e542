"""A key as requests, the rate limiter and the key store share it: ApiKey, the snapshot of one api_keys row
(app.keys.records), and the permissions a key may hold.

It sits below the web side and the keys package, which both use it and import each other's modules only one way
(the keys' routes use the web pipeline), so it imports nothing of the app.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy import Row

PERMISSIONS: tuple[str, ...] = ("read", "write", "admin", "delete")


@dataclass(frozen=True)
class ApiKey:
    """What a request knows about its caller's key; never holds the plain key or its hash."""

    id: str
    account_id: str
    name: str
    prefix: str
    permissions: tuple[str, ...]
    tier: str | None
    per_minute: int
    per_hour: int
    per_day: int
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    usage_count: int
    last_used_at: datetime | None
    rotated_to: str | None
    last4: str | None = None
    created_by: str | None = None

    @classmethod
    def from_record(cls, record: Row[Any]) -> ApiKey:
        return cls(
            id=record.id,
            account_id=record.account_id,
            name=record.name,
            prefix=record.prefix,
            permissions=tuple(p for p in PERMISSIONS if p in record.permissions.split(",")),
            tier=record.tier,
            per_minute=record.per_minute,
            per_hour=record.per_hour,
            per_day=record.per_day,
            created_at=record.created_at,
            expires_at=record.expires_at,
            revoked_at=record.revoked_at,
            usage_count=record.usage_count,
            last_used_at=record.last_used_at,
            rotated_to=record.rotated_to,
            last4=record.last4,
            created_by=record.created_by,
        )

    def is_active(self, now: datetime) -> bool:
        if self.revoked_at is not None and now >= self.revoked_at:
            return False
        return self.expires_at is None or now < self.expires_at

    def status(self, now: datetime) -> str:
        if self.revoked_at is not None and now >= self.revoked_at:
            return "revoked"
        if self.expires_at is not None and now >= self.expires_at:
            return "expired"
        return "active"
