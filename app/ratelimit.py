"""Per-key rolling limits (D3) through Flask-Limiter, failed-auth limits per address (D2.7), D3.4 headers."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from flask import Flask, Response, current_app, g, request
from flask_limiter import Limiter
from flask_limiter import RateLimitExceeded as LimiterBreach
from limits import RateLimitItem, RateLimitItemPerDay, RateLimitItemPerHour, RateLimitItemPerMinute, parse
from limits.errors import StorageError as LimitsStorageError

from app.counted_window import STRATEGY_NAME, recorded_window
from app.errors import RateLimitExceeded, ServiceUnavailable, error_response
from app.keys.records import ApiKey

# Flask-Limiter stores a key's three windows under this scope, shared by every endpoint.
KEY_SCOPE = "global"
# Namespaces our counters in a shared Redis; Flask-Limiter puts it first in every identifier.
KEY_PREFIX = "forecast"
AUTH_FAILURE_SCOPE = "auth-failures"
WINDOW_NAMES = {60: "minute", 3600: "hour", 86400: "day"}



def _current_key_id() -> str:
    key: ApiKey | None = g.get("api_key")
    return key.id if key is not None else ""


def _current_key_limits() -> str:
    key: ApiKey | None = g.get("api_key")
    if key is None:
        return ""
    return f"{key.per_minute}/minute;{key.per_hour}/hour;{key.per_day}/day"


def _not_counted() -> bool:
    if g.get("api_key") is None:
        return True
    view = current_app.view_functions.get(request.endpoint or "")
    return bool(getattr(view, "uncounted", False))


def build_limiter() -> Limiter:
    # One per app: Flask-Limiter keeps its storage on the instance, not on the app.
    return Limiter(
        key_func=_current_key_id,
        application_limits=[_current_key_limits],
        application_limits_exempt_when=_not_counted,
        strategy=STRATEGY_NAME,  # D3.2: rolling windows, counted atomically with each hit (D3.4)
        headers_enabled=False,  # D3.4 picks the header window differently; see _rate_limit_headers
        fail_on_first_breach=True,
        swallow_errors=False,  # D3.7: fail closed
        # Unrouted paths (404) from a valid key still count (D3.3): give them an identity.
        request_identifier=lambda: request.endpoint or "unrouted",
    )


def current_limiter() -> Limiter:
    return current_app.extensions["forecast_limiter"]


@dataclass(frozen=True)
class WindowStatus:
    limit: int
    remaining: int
    reset_epoch: float
    seconds: int

    @property
    def window(self) -> str:
        return WINDOW_NAMES.get(self.seconds, f"{self.seconds}s")

    @property
    def reset_seconds(self) -> int:
        return max(0, math.ceil(self.reset_epoch))


def key_windows(key: ApiKey) -> list[RateLimitItem]:
    return [
        RateLimitItemPerMinute(key.per_minute),
        RateLimitItemPerHour(key.per_hour),
        RateLimitItemPerDay(key.per_day),
    ]


def _status(item: RateLimitItem, *identifiers: str) -> WindowStatus:
    recorded = recorded_window(item, *identifiers)
    if recorded is not None:
        return WindowStatus(item.amount, max(0, recorded.remaining), recorded.reset_time, item.get_expiry())
    try:
        stats = current_limiter().limiter.get_window_stats(item, *identifiers)
    except LimitsStorageError as exc:
        raise ServiceUnavailable("The rate-limit store is unreachable.") from exc
    return WindowStatus(item.amount, max(0, stats.remaining), stats.reset_time, item.get_expiry())


def most_constraining(key: ApiKey) -> WindowStatus:
    """D3.4: the window with the fewest requests remaining, the shortest on a tie.

    Read once per request: the limiter has already counted by the time anyone asks, and the body of
    /verify and the headers must describe the same moment.
    """
    cached: WindowStatus | None = g.get("rate_window_status")
    if cached is not None:
        return cached
    statuses = [_status(item, KEY_PREFIX, key.id, KEY_SCOPE) for item in key_windows(key)]
    status = min(statuses, key=lambda s: (s.remaining, s.seconds))
    g.rate_window_status = status
    return status


def _auth_failure_item() -> RateLimitItem:
    from app.services import current_services

    return parse(current_services().settings.auth_failure_limit)


def _client_address() -> str:
    return request.remote_addr or "unknown"


def count_failed_authentication() -> None:
    """D2.7: a failed authentication spends from the caller's address; past the limit the answer is 429."""
    g.auth_failed = True
    item = _auth_failure_item()
    try:
        allowed = current_limiter().limiter.hit(item, KEY_PREFIX, _client_address(), AUTH_FAILURE_SCOPE)
    except LimitsStorageError as exc:
        raise ServiceUnavailable("The rate-limit store is unreachable.") from exc
    if not allowed:
        status = _status(item, KEY_PREFIX, _client_address(), AUTH_FAILURE_SCOPE)
        raise _too_many(status, "Too many failed authentication attempts from this address.")


def _too_many(status: WindowStatus, message: str) -> RateLimitExceeded:
    reset = datetime.fromtimestamp(status.reset_seconds, UTC)
    retry_after = max(1, status.reset_seconds - int(time.time()))
    return RateLimitExceeded(
        message,
        details={
            "limit": status.limit,
            "reset_time": reset.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "window": status.window,
        },
        headers={"Retry-After": str(retry_after)},
    )


def _headers_for_response() -> WindowStatus | None:
    key: ApiKey | None = g.get("api_key")
    if key is not None:
        return most_constraining(key)
    if g.get("auth_failed"):
        return _status(_auth_failure_item(), KEY_PREFIX, _client_address(), AUTH_FAILURE_SCOPE)
    return None


def init_rate_limits(app: Flask) -> None:
    settings = app.extensions["forecast_service"].settings
    app.config["RATELIMIT_STORAGE_URI"] = settings.redis_url or "memory://"
    app.config["RATELIMIT_STORAGE_OPTIONS"] = (
        {"socket_connect_timeout": 2, "socket_timeout": 2, "health_check_interval": 10, "wrap_exceptions": True}
        if settings.redis_url
        else {}
    )
    app.config["RATELIMIT_KEY_PREFIX"] = KEY_PREFIX
    limiter = build_limiter()
    limiter.init_app(app)
    app.extensions["forecast_limiter"] = limiter

    @app.errorhandler(LimiterBreach)
    def _limit_breached(_exc: LimiterBreach) -> Response:
        permission_error = g.get("permission_error")
        if permission_error is not None:
            return error_response(permission_error)
        key: ApiKey = g.api_key
        status = most_constraining(key)
        return error_response(_too_many(status, f"Rate limit exceeded: {status.limit} requests per {status.window}."))

    @app.errorhandler(LimitsStorageError)
    def _storage_down(exc: LimitsStorageError) -> Response:
        # D3.7: fail closed; never an unlimited pass while Redis is away.
        error = ServiceUnavailable("The rate-limit store is unreachable; try again shortly.")
        error.__cause__ = exc
        return app.handle_user_exception(error)

    @app.after_request
    def _rate_limit_headers(response: Response) -> Response:
        try:
            status = _headers_for_response()
        except ServiceUnavailable:
            # The request already failed or succeeded on its own terms; a missing header beats a lie.
            return response
        if status is not None:
            response.headers["X-RateLimit-Limit"] = str(status.limit)
            response.headers["X-RateLimit-Remaining"] = str(status.remaining)
            response.headers["X-RateLimit-Reset"] = str(status.reset_seconds)
        return response
