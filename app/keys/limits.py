"""Default rate limits of a key: custom numbers win over a tier, which wins over the permission level."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KeyLimits:
    per_minute: int
    per_hour: int
    per_day: int


TIERS: dict[str, KeyLimits] = {
    "free": KeyLimits(10, 100, 1000),
    "standard": KeyLimits(100, 1000, 50000),
    "premium": KeyLimits(500, 5000, 250000),
}

FULL_ACCESS = KeyLimits(500, 5000, 250000)
ADMIN = KeyLimits(200, 2000, 100000)
READ_WRITE = KeyLimits(100, 1000, 50000)
READ_ONLY = KeyLimits(50, 500, 10000)


def limits_for_permissions(permissions: set[str]) -> KeyLimits:
    if permissions >= {"read", "write", "admin", "delete"}:
        return FULL_ACCESS
    if "admin" in permissions:
        return ADMIN
    if "write" in permissions:
        return READ_WRITE
    return READ_ONLY


def resolve_limits(
    permissions: set[str],
    *,
    tier: str | None = None,
    per_minute: int | None = None,
    per_hour: int | None = None,
    per_day: int | None = None,
) -> KeyLimits:
    base = TIERS[tier] if tier else limits_for_permissions(permissions)
    return KeyLimits(
        per_minute=per_minute if per_minute is not None else base.per_minute,
        per_hour=per_hour if per_hour is not None else base.per_hour,
        per_day=per_day if per_day is not None else base.per_day,
    )
