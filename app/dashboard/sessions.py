"""Dashboard sessions: an admin key is exchanged once for a revocable server-side session.

The browser holds only a random session token (HttpOnly, SameSite=Strict cookie); the table holds its
hash, the key's id and the session's CSRF token. The plain API key is never stored anywhere.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from flask import Flask, Request, Response, request
from sqlalchemy import delete, insert, select, update

from app.api_key import ApiKey
from app.db import Database
from app.keys.records import dashboard_sessions_table

if TYPE_CHECKING:
    from app.services import KeyLookup

log = logging.getLogger("app.dashboard")

COOKIE_NAME = "dashboard_session"
CSRF_SEED_COOKIE = "dashboard_csrf"
CSRF_HEADER = "X-CSRF-Token"
CSRF_FIELD = "csrf_token"
SESSION_LIFETIME = timedelta(hours=12)
REQUIRED_PERMISSION = "admin"

_SESSIONS = dashboard_sessions_table


@dataclass(frozen=True)
class DashboardSession:
    token_hash: str
    key: ApiKey
    csrf_token: str
    expires_at: datetime


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def start(database: Database, key: ApiKey, *, now: datetime | None = None) -> tuple[str, DashboardSession]:
    """A new session for ``key``; returns the cookie token (shown to the browser only) and the session."""
    now = now or datetime.now(UTC)
    token = secrets.token_urlsafe(32)
    started = DashboardSession(_hash(token), key, secrets.token_urlsafe(32), now + SESSION_LIFETIME)
    with database.transaction() as connection:
        connection.execute(insert(_SESSIONS).values(
            token_hash=started.token_hash,
            key_id=key.id,
            account_id=key.account_id,
            csrf_token=started.csrf_token,
            created_at=now,
            expires_at=started.expires_at,
        ))
        # Housekeeping: sessions past their expiry are of no further use.
        stale = now - timedelta(days=1)
        connection.execute(delete(_SESSIONS).where(_SESSIONS.c.expires_at < stale))
    log.info("dashboard sign-in", extra={"fields": {"key_id": key.id, "account_id": key.account_id,
                                                    "session": started.token_hash[:12]}})
    return token, started


def load(
    database: Database, keys: KeyLookup, token: str | None, *, now: datetime | None = None
) -> DashboardSession | None:
    """The live session for a cookie token, or None (unknown, signed out, expired, or its key no longer usable)."""
    if not token or len(token) > 128:
        return None
    now = now or datetime.now(UTC)
    with database.transaction() as connection:
        record = connection.execute(select(_SESSIONS).where(_SESSIONS.c.token_hash == _hash(token))).one_or_none()
    if record is None or record.revoked_at is not None or record.expires_at <= now:
        return None
    key = keys.get_by_id(record.key_id)
    if key is None or not key.is_active(now) or REQUIRED_PERMISSION not in key.permissions:
        return None
    return DashboardSession(record.token_hash, key, record.csrf_token, record.expires_at)


def end(database: Database, token_hash: str, *, now: datetime | None = None) -> None:
    log.info("dashboard sign-out", extra={"fields": {"session": token_hash[:12]}})
    with database.transaction() as connection:
        connection.execute(
            update(_SESSIONS).where(_SESSIONS.c.token_hash == token_hash).values(revoked_at=now or datetime.now(UTC))
        )


def set_cookie(response: Response, token: str, expires_at: datetime, *, secure: bool) -> None:
    # Path "/" so the playground's calls to /forecast carry it; SameSite=Strict keeps other sites' pages
    # from sending it at all.
    response.set_cookie(
        COOKIE_NAME, token, expires=expires_at, path="/", secure=secure, httponly=True, samesite="Strict"
    )


def clear_cookie(response: Response, *, secure: bool) -> None:
    response.delete_cookie(COOKIE_NAME, path="/", secure=secure, httponly=True, samesite="Strict")


def tokens_match(expected: str, presented: str | None) -> bool:
    return presented is not None and hmac.compare_digest(expected.encode(), presented.encode())


# --- the sign-in form's CSRF token, before any session exists ------------------------------------


def sign_in_seed(current: Request) -> str:
    seed = current.cookies.get(CSRF_SEED_COOKIE, "")
    return seed if 16 <= len(seed) <= 128 else secrets.token_urlsafe(24)


def sign_in_token(secret: str, seed: str) -> str:
    """The sign-in form's token: bound to a cookie only this browser holds, signed so it cannot be forged."""
    return hmac.new(secret.encode(), b"dashboard-sign-in:" + seed.encode(), hashlib.sha256).hexdigest()


def set_seed_cookie(response: Response, seed: str, *, secure: bool) -> None:
    response.set_cookie(CSRF_SEED_COOKIE, seed, path="/dashboard", secure=secure, httponly=True, samesite="Strict")


# --- the API's identity source ------------------------------------------------------------------


def register_identity_source(app: Flask, database: Database, keys: KeyLookup) -> None:
    """Lets a signed-in dashboard page call the API as its session's key.

    Both the session cookie and the session's CSRF token in the X-CSRF-Token header are needed, so a
    request another site forges (which cannot read the token) is never authenticated by the cookie.
    """
    from app.web.pipeline import add_identity_source

    def from_dashboard_session() -> ApiKey | None:
        token = request.cookies.get(COOKIE_NAME)
        presented = request.headers.get(CSRF_HEADER)
        if not token or not presented:
            return None
        found = load(database, keys, token)
        if found is None or not tokens_match(found.csrf_token, presented):
            return None
        return found.key

    add_identity_source(app, from_dashboard_session)
