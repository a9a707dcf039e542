"""The key store: small keyword-only functions over the api_keys table (the command line, the /keys API and the
dashboard all go through them) and KeyStore, the request path's cached lookup of a presented key."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Row, func, insert, select, update

from app.api_key import PERMISSIONS, ApiKey
from app.db import Database
from app.keys.limits import TIERS, KeyLimits, resolve_limits
from app.keys.records import api_keys_table

KEY_PREFIX = "ak_"
KEY_HEX_LENGTH = 64
DISPLAY_PREFIX_LENGTH = 11  # "ak_" + 8 hex: enough to tell keys apart, far too little to guess one
DEFAULT_ACCOUNT = "default"


class KeyInputError(ValueError):
    """Bad input from an admin (unknown permission, past expiry, unknown key id)."""


@dataclass(frozen=True)
class CreatedKey:
    key: ApiKey
    plain_key: str


def hash_key(plain_key: str) -> str:
    return hashlib.sha256(plain_key.encode("utf-8")).hexdigest()


def generate_plain_key() -> str:
    return KEY_PREFIX + secrets.token_hex(KEY_HEX_LENGTH // 2)


def parse_permissions(raw: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    items = raw.split(",") if isinstance(raw, str) else list(raw)
    wanted = {item.strip().lower() for item in items if item.strip()}
    unknown = sorted(wanted - set(PERMISSIONS))
    if unknown:
        raise KeyInputError(f"unknown permission(s) {', '.join(unknown)}; choose from {', '.join(PERMISSIONS)}")
    if not wanted:
        raise KeyInputError(f"a key needs at least one permission out of {', '.join(PERMISSIONS)}")
    return tuple(p for p in PERMISSIONS if p in wanted)


def _check_limits(limits: KeyLimits) -> None:
    for label, value in (("per-minute", limits.per_minute), ("per-hour", limits.per_hour), ("per-day", limits.per_day)):
        if value < 1:
            raise KeyInputError(f"{label} limit must be at least 1, got {value}")


def _check_tier(tier: str | None) -> None:
    if tier is not None and tier not in TIERS:
        raise KeyInputError(f"unknown tier {tier!r}; choose from {', '.join(TIERS)} (or give custom numbers)")


_KEYS = api_keys_table


def create_key(
    connection: Connection,
    *,
    permissions: tuple[str, ...],
    name: str = "",
    account_id: str = DEFAULT_ACCOUNT,
    expires_at: datetime | None = None,
    tier: str | None = None,
    per_minute: int | None = None,
    per_hour: int | None = None,
    per_day: int | None = None,
    now: datetime | None = None,
    created_by: str | None = None,
) -> CreatedKey:
    now = now or datetime.now(UTC)
    permissions = parse_permissions(permissions)
    _check_tier(tier)
    if expires_at is not None and expires_at <= now:
        raise KeyInputError(f"expiry {expires_at.isoformat()} is not in the future")
    limits = resolve_limits(
        set(permissions), tier=tier, per_minute=per_minute, per_hour=per_hour, per_day=per_day
    )
    _check_limits(limits)
    plain_key = generate_plain_key()
    key = ApiKey(
        id="key_" + secrets.token_hex(8),
        account_id=account_id,
        name=name,
        prefix=plain_key[:DISPLAY_PREFIX_LENGTH],
        permissions=permissions,
        tier=tier,
        per_minute=limits.per_minute,
        per_hour=limits.per_hour,
        per_day=limits.per_day,
        created_at=now,
        expires_at=expires_at,
        revoked_at=None,
        usage_count=0,
        last_used_at=None,
        rotated_to=None,
        last4=plain_key[-4:],
        created_by=created_by,
    )
    connection.execute(insert(_KEYS).values(
        id=key.id,
        account_id=key.account_id,
        name=key.name,
        key_hash=hash_key(plain_key),
        prefix=key.prefix,
        last4=key.last4,
        permissions=",".join(permissions),
        tier=key.tier,
        per_minute=key.per_minute,
        per_hour=key.per_hour,
        per_day=key.per_day,
        created_at=key.created_at,
        expires_at=key.expires_at,
        usage_count=key.usage_count,
        created_by=key.created_by,
    ))
    return CreatedKey(key=key, plain_key=plain_key)


def find_by_hash(connection: Connection, *, key_hash: str) -> ApiKey | None:
    record = connection.execute(select(_KEYS).where(_KEYS.c.key_hash == key_hash)).one_or_none()
    return None if record is None else ApiKey.from_record(record)


def _get_record(connection: Connection, key_id: str) -> Row[Any]:
    record = connection.execute(select(_KEYS).where(_KEYS.c.id == key_id)).first()
    if record is None:
        raise KeyInputError(f"no key with id {key_id!r} (see: keys list)")
    return record


def _change(connection: Connection, key: ApiKey, **values: Any) -> ApiKey:
    """Writes ``values`` (columns that are also ApiKey fields) to the key's row; the key as it now stands."""
    connection.execute(update(_KEYS).where(_KEYS.c.id == key.id).values(**values))
    return replace(key, **values)


def get_key(connection: Connection, *, key_id: str) -> ApiKey:
    return ApiKey.from_record(_get_record(connection, key_id))


def rename_key(connection: Connection, *, key_id: str, name: str) -> ApiKey:
    key = get_key(connection, key_id=key_id)
    return _change(connection, key, name=name)


def list_keys(connection: Connection, *, account_id: str | None = None) -> list[ApiKey]:
    query = select(_KEYS).order_by(_KEYS.c.created_at, _KEYS.c.id)
    if account_id is not None:
        query = query.where(_KEYS.c.account_id == account_id)
    return [ApiKey.from_record(record) for record in connection.execute(query)]


def count_keys(connection: Connection) -> int:
    return connection.scalar(select(func.count()).select_from(_KEYS)) or 0


def revoke_key(connection: Connection, *, key_id: str, now: datetime | None = None) -> ApiKey:
    key = get_key(connection, key_id=key_id)
    now = now or datetime.now(UTC)
    if key.revoked_at is None or key.revoked_at > now:
        key = _change(connection, key, revoked_at=now)
    return key


def revoke_created(connection: Connection, *, key_id: str, now: datetime | None = None) -> list[str]:
    """Revokes every key ``key_id`` created, and every key those created, and so on: a key made with a key's
    authority must not outlive that authority (a leaked key's offspring would otherwise keep working). The
    ids of the keys this revoked, in the order found; keys revoked already are walked through, not listed."""
    now = now or datetime.now(UTC)
    revoked: list[str] = []
    seen, frontier = {key_id}, [key_id]
    while frontier:
        children = connection.execute(
            select(_KEYS.c.id, _KEYS.c.revoked_at).where(_KEYS.c.created_by.in_(frontier))
            .order_by(_KEYS.c.created_at, _KEYS.c.id)
        ).all()
        frontier = []
        level: list[str] = []
        for child in children:
            if child.id in seen:
                continue
            seen.add(child.id)
            frontier.append(child.id)
            if child.revoked_at is None or child.revoked_at > now:
                level.append(child.id)
        if level:
            connection.execute(update(_KEYS).where(_KEYS.c.id.in_(level)).values(revoked_at=now))
            revoked.extend(level)
    return revoked


def rotate_key(
    connection: Connection,
    *,
    key_id: str,
    grace: timedelta = timedelta(hours=24),
    now: datetime | None = None,
    expires_by: datetime | None = None,
) -> tuple[CreatedKey, ApiKey]:
    """A new key with the same account, permissions, limits and expiry (no later than ``expires_by`` when
    given: the expiry of the key that asked for the rotation); the old one ends after the grace."""
    now = now or datetime.now(UTC)
    old_key = get_key(connection, key_id=key_id)
    if not old_key.is_active(now):
        raise KeyInputError(f"key {key_id} is {old_key.status(now)}; only an active key can be rotated")
    if grace < timedelta(0):
        raise KeyInputError("grace must not be negative")
    expires_at = old_key.expires_at
    if expires_by is not None and (expires_at is None or expires_by < expires_at):
        expires_at = expires_by
    created = create_key(
        connection,
        permissions=old_key.permissions,
        name=old_key.name,
        account_id=old_key.account_id,
        expires_at=expires_at,
        tier=old_key.tier,
        per_minute=old_key.per_minute,
        per_hour=old_key.per_hour,
        per_day=old_key.per_day,
        now=now,
        created_by=old_key.created_by,
    )
    ending: dict[str, Any] = {"rotated_to": created.key.id}
    if grace == timedelta(0):
        ending["revoked_at"] = now
    else:
        end = now + grace
        ending["expires_at"] = end if old_key.expires_at is None else min(old_key.expires_at, end)
    return created, _change(connection, old_key, **ending)


def set_limits(
    connection: Connection,
    *,
    key_id: str,
    tier: str | None = None,
    per_minute: int | None = None,
    per_hour: int | None = None,
    per_day: int | None = None,
) -> ApiKey:
    record = _get_record(connection, key_id)
    _check_tier(tier)
    changes: dict[str, Any] = {}
    if tier is not None:
        base = resolve_limits(set(record.permissions.split(",")), tier=tier)
        changes["tier"] = tier
    else:
        base = KeyLimits(record.per_minute, record.per_hour, record.per_day)
    limits = KeyLimits(
        per_minute=per_minute if per_minute is not None else base.per_minute,
        per_hour=per_hour if per_hour is not None else base.per_hour,
        per_day=per_day if per_day is not None else base.per_day,
    )
    _check_limits(limits)
    changes.update(per_minute=limits.per_minute, per_hour=limits.per_hour, per_day=limits.per_day)
    return _change(connection, ApiKey.from_record(record), **changes)


# Compared against when a key is unknown, so a miss costs what a hit costs.
_DUMMY_HASH = hash_key("ak_" + "0" * 64)


class KeyStore:
    def __init__(self, database: Database, *, cache_seconds: float, clock: Callable[[], float] = time.monotonic):
        self._database = database
        self._cache_seconds = cache_seconds
        self._clock = clock
        self._cache: dict[str, tuple[float, ApiKey]] = {}
        self._lock = threading.Lock()

    def lookup(self, plain_key: str) -> ApiKey | None:
        """The key record for a presented key, or None; found by hash, confirmed in constant time."""
        key_hash = hash_key(plain_key)
        now = self._clock()
        with self._lock:
            cached = self._cache.get(key_hash)
        if cached is not None and now - cached[0] < self._cache_seconds:
            return cached[1]
        with self._database.transaction() as connection:
            key = find_by_hash(connection, key_hash=key_hash)
        if key is None:
            hmac.compare_digest(key_hash, _DUMMY_HASH)
            return None
        with self._lock:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[key_hash] = (now, key)
        return key

    def get_by_id(self, key_id: str) -> ApiKey | None:
        """The key with this id (for callers that hold a server-side reference, never the plain key)."""
        now = self._clock()
        cache_id = "id:" + key_id
        with self._lock:
            cached = self._cache.get(cache_id)
        if cached is not None and now - cached[0] < self._cache_seconds:
            return cached[1]
        with self._database.transaction() as connection:
            try:
                key = get_key(connection, key_id=key_id)
            except KeyInputError:
                return None
        with self._lock:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[cache_id] = (now, key)
        return key

    def forget(self) -> None:
        with self._lock:
            self._cache.clear()
