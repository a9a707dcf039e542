"""The /keys and /verify request and response schemas: they validate what a client sends and, through
app.keys.openapi_doc, document every answer."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from marshmallow import EXCLUDE, RAISE, Schema, ValidationError, fields, validate, validates_schema

from app.api_key import PERMISSIONS
from app.keys.limits import TIERS
from app.keys.manage import DEFAULT_GRACE, MAX_GRACE
from app.keys.records import OUTCOMES
from app.web.fields import StoredText

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
        load_default=int(DEFAULT_GRACE.total_seconds()),
        validate=validate.Range(min=0, max=int(MAX_GRACE.total_seconds())),
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
