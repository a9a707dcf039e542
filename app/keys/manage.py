"""Key management on behalf of an acting key: the rules the /keys API and the dashboard share.

A key reaches only its own account's keys (another account's key is "not found", never "forbidden",
so ids do not leak across accounts), and a key never grants what its creator lacks: no permission
beyond the actor's own, no rate limit above the actor's own, and no life beyond the actor's own (a key
made or rotated by an expiring key expires no later than it). A key changes, rotates or revokes only
keys whose permissions it holds itself, so a narrower admin key cannot lock out a broader one; reading
the account's keys needs only admin. A key that has been rotated keeps working through its grace
period but manages no keys any more: whoever holds it (perhaps because it leaked) cannot rotate the
owner's replacement or mint a fresh key. docs/contract.md (section 2, The key) says the same.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from app.api_key import PERMISSIONS, ApiKey
from app.db import Database
from app.keys import store
from app.keys.limits import TIERS, KeyLimits, resolve_limits
from app.keys.usage import UsageBucket, usage_history

log = logging.getLogger("app.keys.audit")

MAX_GRACE = timedelta(days=7)
DEFAULT_GRACE = timedelta(hours=24)
LIMIT_FIELDS = ("per_minute", "per_hour", "per_day")


class KeyNotFound(LookupError):
    def __init__(self, key_id: str) -> None:
        super().__init__(f"No key with id {key_id!r} in this account.")
        self.key_id = key_id


class Refused(Exception):
    """The request is well formed but asks for more than the actor may grant, or for an impossible change."""

    def __init__(
        self, message: str, *, field: str, issue: str, provided: object = None, beyond_actor: bool = False
    ) -> None:
        super().__init__(message)
        self.beyond_actor = beyond_actor
        self.message = message
        self.field = field
        self.issue = issue
        self.provided = provided


def _audit(action: str, actor: ApiKey, key: ApiKey, **fields: object) -> None:
    log.info(
        "key %s",
        action,
        extra={"fields": {"action": action, "actor_key_id": actor.id, "key_id": key.id,
                          "account_id": key.account_id, **fields}},
    )


def _own(database: Database, actor: ApiKey, key_id: str) -> ApiKey:
    with database.transaction() as connection:
        try:
            key = store.get_key(connection, key_id=key_id)
        except store.KeyInputError:
            raise KeyNotFound(key_id) from None
    if key.account_id != actor.account_id:
        raise KeyNotFound(key_id)
    return key


def _check_permissions(actor: ApiKey, permissions: tuple[str, ...]) -> None:
    beyond = [p for p in permissions if p not in actor.permissions]
    if beyond:
        raise Refused(
            f"A key cannot grant permissions its creator lacks: {', '.join(beyond)}.",
            field="permissions",
            issue=f"not held by the acting key (it holds {', '.join(actor.permissions)})",
            provided=list(permissions),
            beyond_actor=True,
        )


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _check_may_manage(actor: ApiKey) -> None:
    if actor.rotated_to is not None:
        until = f" until {_iso(actor.expires_at)}" if actor.expires_at is not None else ""
        raise Refused(
            f"This key was rotated (replaced by {actor.rotated_to}): it keeps working{until} for its other calls, "
            "but it can no longer manage keys. Use its replacement.",
            field="Authorization",
            issue=f"the calling key was rotated to {actor.rotated_to} and is in its grace period",
            provided=actor.id,
            beyond_actor=True,
        )


def _check_target(actor: ApiKey, key: ApiKey) -> None:
    beyond = [p for p in key.permissions if p not in actor.permissions]
    if beyond:
        raise Refused(
            f"Key {key.id} has permissions the acting key lacks ({', '.join(beyond)}); a key may only change, "
            "rotate or revoke keys whose permissions it holds itself.",
            field="id",
            issue=f"the key holds {', '.join(beyond)}, which the acting key lacks",
            provided=key.id,
            beyond_actor=True,
        )


def _expiry_within_actor(actor: ApiKey, expires_at: datetime | None) -> datetime | None:
    """The expiry a key made by ``actor`` gets: none asked for is the actor's own (None when the actor never
    expires); one later than the actor's is refused, as limits above the actor's are."""
    if actor.expires_at is None:
        return expires_at
    if expires_at is None:
        return actor.expires_at
    if expires_at > actor.expires_at:
        raise Refused(
            f"A key cannot outlive its creator: the acting key expires at {_iso(actor.expires_at)}.",
            field="expires_at",
            issue=f"must be at most {_iso(actor.expires_at)}, the acting key's own expiry",
            provided=_iso(expires_at),
            beyond_actor=True,
        )
    return expires_at


def _check_limits(actor: ApiKey, limits: KeyLimits) -> None:
    for name in LIMIT_FIELDS:
        wanted, own = getattr(limits, name), getattr(actor, name)
        if wanted > own:
            raise Refused(
                f"A key cannot have a higher {name.replace('_', '-')} limit than its creator ({own}).",
                field=name,
                issue=f"must be at most {own}, the acting key's own limit",
                provided=wanted,
                beyond_actor=True,
            )
        if wanted < 1:
            raise Refused(f"The {name.replace('_', '-')} limit must be at least 1.", field=name,
                          issue="must be at least 1", provided=wanted)


def list_keys(database: Database, actor: ApiKey) -> list[ApiKey]:
    with database.transaction() as connection:
        return store.list_keys(connection, account_id=actor.account_id)


def get_key(database: Database, actor: ApiKey, key_id: str) -> ApiKey:
    return _own(database, actor, key_id)


def create_key(
    database: Database,
    actor: ApiKey,
    *,
    permissions: tuple[str, ...],
    name: str = "",
    expires_at: datetime | None = None,
    tier: str | None = None,
    per_minute: int | None = None,
    per_hour: int | None = None,
    per_day: int | None = None,
) -> store.CreatedKey:
    _check_may_manage(actor)
    permissions = store.parse_permissions(permissions)
    _check_permissions(actor, permissions)
    if tier is not None and tier not in TIERS:
        raise Refused(f"Unknown tier {tier!r}.", field="tier", issue=f"must be one of {', '.join(TIERS)}",
                      provided=tier)
    limits = resolve_limits(set(permissions), tier=tier, per_minute=per_minute, per_hour=per_hour, per_day=per_day)
    if tier is None and per_minute is None and per_hour is None and per_day is None:
        # A default that would exceed the creator is capped rather than refused: the caller asked for nothing.
        limits = KeyLimits(*(min(getattr(limits, n), getattr(actor, n)) for n in LIMIT_FIELDS))
    _check_limits(actor, limits)
    if expires_at is not None and expires_at <= datetime.now(UTC):
        raise Refused("The expiry must be in the future.", field="expires_at", issue="must be in the future",
                      provided=expires_at.isoformat())
    expires_at = _expiry_within_actor(actor, expires_at)
    with database.transaction() as connection:
        created = store.create_key(
            connection,
            permissions=permissions,
            name=name,
            account_id=actor.account_id,
            expires_at=expires_at,
            tier=tier,
            per_minute=limits.per_minute,
            per_hour=limits.per_hour,
            per_day=limits.per_day,
            created_by=actor.id,
        )
    _audit("created", actor, created.key, permissions=list(permissions), tier=tier,
           per_minute=limits.per_minute, per_hour=limits.per_hour, per_day=limits.per_day)
    return created


def revoke_key(database: Database, actor: ApiKey, key_id: str) -> tuple[ApiKey, list[str]]:
    """The revoked key and the ids of the keys revoked with it (every key it created, and theirs)."""
    _check_may_manage(actor)
    _check_target(actor, _own(database, actor, key_id))
    with database.transaction() as connection:
        key = store.revoke_key(connection, key_id=key_id)
        cascade = store.revoke_created(connection, key_id=key_id)
    _audit("revoked", actor, key, revoked_with=cascade)
    return key, cascade


def rotate_key(
    database: Database, actor: ApiKey, key_id: str, *, grace: timedelta = DEFAULT_GRACE
) -> tuple[store.CreatedKey, ApiKey]:
    if grace < timedelta(0) or grace > MAX_GRACE:
        raise Refused("The grace period must be between 0 seconds and 7 days.", field="grace_seconds",
                      issue="must be between 0 and 604800", provided=int(grace.total_seconds()))
    _check_may_manage(actor)
    old = _own(database, actor, key_id)
    if not old.is_active(datetime.now(UTC)):
        raise Refused(f"Key {key_id} is {old.status(datetime.now(UTC))}; only an active key can be rotated.",
                      field="id", issue=f"key is {old.status(datetime.now(UTC))}", provided=key_id)
    # The replacement copies the old key's grants, so the actor must be able to grant them itself; it lives
    # no longer than the old key nor than the actor.
    _check_target(actor, old)
    _check_limits(actor, KeyLimits(old.per_minute, old.per_hour, old.per_day))
    with database.transaction() as connection:
        created, old_after = store.rotate_key(connection, key_id=key_id, grace=grace, expires_by=actor.expires_at)
    _audit("rotated", actor, old_after, new_key_id=created.key.id, grace_seconds=int(grace.total_seconds()))
    return created, old_after


def update_key(
    database: Database,
    actor: ApiKey,
    key_id: str,
    *,
    name: str | None = None,
    tier: str | None = None,
    per_minute: int | None = None,
    per_hour: int | None = None,
    per_day: int | None = None,
) -> ApiKey:
    _check_may_manage(actor)
    key = _own(database, actor, key_id)
    _check_target(actor, key)
    if tier is not None and tier not in TIERS:
        raise Refused(f"Unknown tier {tier!r}.", field="tier", issue=f"must be one of {', '.join(TIERS)}",
                      provided=tier)
    changes_limits = tier is not None or any(v is not None for v in (per_minute, per_hour, per_day))
    if changes_limits:
        base = TIERS[tier] if tier is not None else KeyLimits(key.per_minute, key.per_hour, key.per_day)
        wanted = KeyLimits(
            per_minute=per_minute if per_minute is not None else base.per_minute,
            per_hour=per_hour if per_hour is not None else base.per_hour,
            per_day=per_day if per_day is not None else base.per_day,
        )
        _check_limits(actor, wanted)
    with database.transaction() as connection:
        if name is not None:
            key = store.rename_key(connection, key_id=key_id, name=name)
        if changes_limits:
            key = store.set_limits(
                connection, key_id=key_id, tier=tier, per_minute=wanted.per_minute, per_hour=wanted.per_hour,
                per_day=wanted.per_day,
            )
    _audit("updated", actor, key, name=name, tier=tier, per_minute=key.per_minute, per_hour=key.per_hour,
           per_day=key.per_day)
    return key


def usage(database: Database, actor: ApiKey, key_id: str, *, hours: int) -> tuple[ApiKey, list[UsageBucket]]:
    key = _own(database, actor, key_id)
    with database.transaction() as connection:
        return key, usage_history(connection, key_id=key_id, hours=hours)


__all__ = ["PERMISSIONS", "KeyNotFound", "Refused"]
