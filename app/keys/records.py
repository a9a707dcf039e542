"""The api_keys table, its hourly usage buckets, dashboard sessions, and the snapshot requests work with."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import BigInteger, DateTime, ForeignKey, Integer, String, TypeDecorator
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base

PERMISSIONS: tuple[str, ...] = ("read", "write", "admin", "delete")


class UTCDateTime(TypeDecorator[datetime]):
    """Stores naive UTC (SQLite has no zones) and always hands back aware UTC datetimes."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are ambiguous; pass an aware UTC datetime")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)


class ApiKeyRecord(Base):
    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    account_id: Mapped[str] = mapped_column(String(64), index=True)
    name: Mapped[str] = mapped_column(String(200), default="")
    key_hash: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    prefix: Mapped[str] = mapped_column(String(16))
    permissions: Mapped[str] = mapped_column(String(64))
    tier: Mapped[str | None] = mapped_column(String(16), nullable=True)
    per_minute: Mapped[int] = mapped_column(Integer)
    per_hour: Mapped[int] = mapped_column(Integer)
    per_day: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    usage_count: Mapped[int] = mapped_column(BigInteger, default=0)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    rotated_to: Mapped[str | None] = mapped_column(String(32), nullable=True)
    # Keys made before the dashboard existed have no stored tail; they show the prefix only.
    last4: Mapped[str | None] = mapped_column(String(4), nullable=True)
    # The key that made this one through the API or the dashboard (None: the operator's command line); a
    # rotation's replacement takes its predecessor's. Revoking a key revokes every key below it.
    created_by: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)


# The outcome classes a usage bucket splits requests into, in display order.
OUTCOMES: tuple[str, ...] = ("2xx", "4xx", "429", "5xx")


def outcome_of(status: int) -> str:
    """The bucket column a response status counts in; 1xx and 3xx are answers too, so they count as 2xx."""
    if status == 429:
        return "429"
    if status >= 500:
        return "5xx"
    if status >= 400:
        return "4xx"
    return "2xx"


class KeyUsageBucketRecord(Base):
    """Counted requests of one key in one UTC hour, by outcome."""

    __tablename__ = "key_usage_buckets"

    key_id: Mapped[str] = mapped_column(String(32), ForeignKey("api_keys.id", ondelete="CASCADE"), primary_key=True)
    hour: Mapped[datetime] = mapped_column(UTCDateTime(), primary_key=True, index=True)
    ok: Mapped[int] = mapped_column(BigInteger, default=0)
    client_error: Mapped[int] = mapped_column(BigInteger, default=0)
    rate_limited: Mapped[int] = mapped_column(BigInteger, default=0)
    server_error: Mapped[int] = mapped_column(BigInteger, default=0)


# Bucket columns by outcome class.
OUTCOME_COLUMNS: dict[str, str] = {"2xx": "ok", "4xx": "client_error", "429": "rate_limited", "5xx": "server_error"}


class DashboardSessionRecord(Base):
    """A signed-in dashboard browser. Only the hash of the cookie's token is stored, so a leaked table
    cannot be replayed; revoking the row (sign-out) ends the session everywhere at once."""

    __tablename__ = "dashboard_sessions"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    key_id: Mapped[str] = mapped_column(String(32), ForeignKey("api_keys.id", ondelete="CASCADE"), index=True)
    account_id: Mapped[str] = mapped_column(String(64))
    csrf_token: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


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
    def from_record(cls, record: ApiKeyRecord) -> ApiKey:
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
