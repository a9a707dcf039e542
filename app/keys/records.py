"""The api_keys table, its hourly usage buckets and dashboard sessions (a key's snapshot, ApiKey, is app.api_key's)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, ForeignKey, Integer, String, Table

from app.db import UTCDateTime, metadata

api_keys_table = Table(
    "api_keys", metadata,
    Column("id", String(32), primary_key=True),
    Column("account_id", String(64), index=True, nullable=False),
    Column("name", String(200), default="", nullable=False),
    Column("key_hash", String(64), unique=True, index=True, nullable=False),
    Column("prefix", String(16), nullable=False),
    Column("permissions", String(64), nullable=False),
    Column("tier", String(16), nullable=True),
    Column("per_minute", Integer, nullable=False),
    Column("per_hour", Integer, nullable=False),
    Column("per_day", Integer, nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("expires_at", UTCDateTime(), nullable=True),
    Column("revoked_at", UTCDateTime(), nullable=True),
    Column("usage_count", BigInteger, default=0, nullable=False),
    Column("last_used_at", UTCDateTime(), nullable=True),
    Column("rotated_to", String(32), nullable=True),
    # Keys made before the dashboard existed have no stored tail; they show the prefix only.
    Column("last4", String(4), nullable=True),
    # The key that made this one through the API or the dashboard (None: the operator's command line); a
    # rotation's replacement takes its predecessor's. Revoking a key revokes every key below it.
    Column("created_by", String(32), nullable=True, index=True),
)


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


# Counted requests of one key in one UTC hour, by outcome.
key_usage_buckets_table = Table(
    "key_usage_buckets", metadata,
    Column("key_id", String(32), ForeignKey("api_keys.id", ondelete="CASCADE"), primary_key=True),
    Column("hour", UTCDateTime(), primary_key=True, index=True),
    Column("ok", BigInteger, default=0, nullable=False),
    Column("client_error", BigInteger, default=0, nullable=False),
    Column("rate_limited", BigInteger, default=0, nullable=False),
    Column("server_error", BigInteger, default=0, nullable=False),
)


# Bucket columns by outcome class.
OUTCOME_COLUMNS: dict[str, str] = {"2xx": "ok", "4xx": "client_error", "429": "rate_limited", "5xx": "server_error"}


# A signed-in dashboard browser. Only the hash of the cookie's token is stored, so a leaked table cannot be replayed;
# revoking the row (sign-out) ends the session everywhere at once.
dashboard_sessions_table = Table(
    "dashboard_sessions", metadata,
    Column("token_hash", String(64), primary_key=True),
    Column("key_id", String(32), ForeignKey("api_keys.id", ondelete="CASCADE"), index=True, nullable=False),
    Column("account_id", String(64), nullable=False),
    Column("csrf_token", String(64), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("expires_at", UTCDateTime(), index=True, nullable=False),
    Column("revoked_at", UTCDateTime(), nullable=True),
)
