"""Rate limits: each key's rolling minute, hour and day windows, failed authentications per address,
the X-RateLimit-* headers and the 429 body.

The storage (memory, or Redis with REDIS_URL) comes from ``limits`` with the strategy from
app.web.counted_window; the request pipeline (app.web.pipeline) decides when a request is counted and calls
``RateLimits`` here, which returns the window figures instead of stashing them anywhere. Flask-Limiter, which
the service used first, is not used: its request hooks had no limit declared to check, since a key's limits
come from the key store, yet they ran on every request in the web process.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import lru_cache
from typing import TYPE_CHECKING, cast

from flask import Flask, Response
from limits import RateLimitItem, RateLimitItemPerDay, RateLimitItemPerHour, RateLimitItemPerMinute, parse
from limits.errors import StorageError as LimitsStorageError
from limits.storage import Storage, storage_from_string

from app.errors import Unavailable
from app.rate_windows import Count, WindowStatus
from app.settings import Settings
from app.web.counted_window import CountedMovingWindowRateLimiter
from app.web.errors import RateLimitExceeded

if TYPE_CHECKING:
    from app.api_key import ApiKey

# Namespaces our counters in a shared Redis; every stored window's identifier starts with it.
KEY_PREFIX = "forecast"
# A key's three windows are shared by every endpoint.
KEY_SCOPE = "global"
AUTH_FAILURE_SCOPE = "auth-failures"


def key_windows(key: ApiKey) -> list[RateLimitItem]:
    return list(_windows(key.per_minute, key.per_hour, key.per_day))


@lru_cache(maxsize=1024)
def _windows(per_minute: int, per_hour: int, per_day: int) -> tuple[RateLimitItem, ...]:
    # In this order: when several are full, a 429 names the first. Built once per set of limits: the items are
    # immutable, so making three per counted request would be work thrown away each time.
    return (RateLimitItemPerMinute(per_minute), RateLimitItemPerHour(per_hour), RateLimitItemPerDay(per_day))


def most_constraining(statuses: list[WindowStatus]) -> WindowStatus:
    """The window with the fewest requests remaining, the shortest on a tie: what the headers describe."""
    return min(statuses, key=lambda s: (s.remaining, s.seconds))


class RateLimits:
    def __init__(self, storage: Storage, *, auth_failure_limit: str) -> None:
        self._storage = storage
        self._strategy = CountedMovingWindowRateLimiter(storage)
        self._auth_failure_item = parse(auth_failure_limit)

    def storage_ok(self) -> bool:
        return bool(self._storage.check())

    def count(self, key: ApiKey) -> Count:
        """Spends one request from all of the key's windows, or from none when one of them is full (the first
        full one, minute before hour before day, is the one a 429 names)."""
        items = key_windows(key)
        with _fail_closed():
            refused, stats = self._strategy.hit_all(items, KEY_PREFIX, key.id, KEY_SCOPE)
        statuses = [WindowStatus.of(item, window) for item, window in zip(items, stats, strict=True)]
        return Count(most_constraining(statuses), None if refused is None else statuses[refused])

    def spend_long_windows(self, key: ApiKey, cost: int) -> Count:
        """Spends ``cost`` requests from the key's hour and day windows together, or none when either cannot
        take them all (a batch's series beyond the request itself). The minute window is left out: it paces
        requests, and a batch of thousands of series would never fit it."""
        items = key_windows(key)[1:]
        with _fail_closed():
            refused, stats = self._strategy.hit_all(items, KEY_PREFIX, key.id, KEY_SCOPE, cost=cost)
        statuses = [WindowStatus.of(item, window) for item, window in zip(items, stats, strict=True)]
        return Count(most_constraining(statuses), None if refused is None else statuses[refused])

    def status(self, key: ApiKey) -> WindowStatus:
        """The key's windows as they stand, without spending (for endpoints that are not counted)."""
        with _fail_closed():
            return most_constraining(
                [
                    WindowStatus.of(item, self._strategy.get_window_stats(item, KEY_PREFIX, key.id, KEY_SCOPE))
                    for item in key_windows(key)
                ]
            )

    def windows(self, key: ApiKey) -> list[WindowStatus]:
        """Each of the key's windows as it stands, without spending (the dashboard shows all three)."""
        with _fail_closed():
            return [
                WindowStatus.of(item, self._strategy.get_window_stats(item, KEY_PREFIX, key.id, KEY_SCOPE))
                for item in key_windows(key)
            ]

    def count_failed_authentication(self, address: str) -> Count:
        """A failed authentication spends from the caller's address; past the limit the answer is 429."""
        item = self._auth_failure_item
        with _fail_closed():
            acquired, stats = self._strategy.hit_counted(item, KEY_PREFIX, address, AUTH_FAILURE_SCOPE)
        status = WindowStatus.of(item, stats)
        return Count(status, None if acquired else status)


@contextmanager
def _fail_closed() -> Iterator[None]:
    # An unreachable Redis is a 500, never an unlimited pass.
    try:
        yield
    except LimitsStorageError as exc:
        raise Unavailable("The rate-limit store is unreachable; try again shortly.") from exc


def too_many(status: WindowStatus, message: str) -> RateLimitExceeded:
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


def set_headers(response: Response, status: WindowStatus) -> None:
    response.headers["X-RateLimit-Limit"] = str(status.limit)
    response.headers["X-RateLimit-Remaining"] = str(status.remaining)
    response.headers["X-RateLimit-Reset"] = str(status.reset_seconds)


def init_rate_limits(_app: Flask, settings: Settings) -> RateLimits:
    # Short timeouts so an unreachable Redis fails a request fast (fail closed) rather than hanging it.
    options = (
        {"socket_connect_timeout": 2, "socket_timeout": 2, "health_check_interval": 10, "wrap_exceptions": True}
        if settings.redis_url
        else {}
    )
    # memory:// and redis:// name synchronous storages (the asynchronous ones are async+...).
    storage = cast(Storage, storage_from_string(settings.redis_url or "memory://", **options))
    return RateLimits(storage, auth_failure_limit=settings.auth_failure_limit)
