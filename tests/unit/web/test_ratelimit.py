"""A request is spent from a key's minute, hour and day windows together or from none of them.

Requests answered 429 do not count (docs/contract.md, rate limits): one refused by a full hour or day window
must leave the other windows as they were, in memory (one process) and in Redis (every process), where the
three windows are checked and spent in one script.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import cast

import pytest
from limits.storage import Storage, storage_from_string

from app.api_key import ApiKey
from app.web.ratelimit import RateLimits
from tests.support import REDIS_URL, flush_redis, missing_service, redis_available


@pytest.fixture(params=["memory", "redis"])
def limits(request: pytest.FixtureRequest) -> Iterator[RateLimits]:
    if request.param == "memory":
        yield RateLimits(cast(Storage, storage_from_string("memory://")), auth_failure_limit="10/minute")
        return
    if not redis_available():
        missing_service(f"Redis is not reachable at {REDIS_URL}")
    flush_redis()
    yield RateLimits(cast(Storage, storage_from_string(REDIS_URL)), auth_failure_limit="10/minute")
    flush_redis()


def _key(*, per_minute: int, per_hour: int, per_day: int) -> ApiKey:
    return ApiKey(
        id=f"key_{uuid.uuid4().hex[:16]}", account_id="default", name="", prefix="ak_00000000",
        permissions=("read",), tier=None, per_minute=per_minute, per_hour=per_hour, per_day=per_day,
        created_at=datetime.now(UTC), expires_at=None, revoked_at=None, usage_count=0, last_used_at=None,
        rotated_to=None,
    )


def _remaining(limits: RateLimits, key: ApiKey) -> dict[str, int]:
    return {status.window: status.remaining for status in limits.windows(key)}


def test_a_request_refused_by_the_hour_window_spends_no_minute_or_day_slot(limits: RateLimits) -> None:
    key = _key(per_minute=10, per_hour=2, per_day=100)
    assert [limits.count(key).breached for _ in range(2)] == [None, None]
    assert _remaining(limits, key) == {"minute": 8, "hour": 0, "day": 98}
    for _ in range(5):
        breached = limits.count(key).breached
        assert breached is not None and breached.window == "hour"
    assert _remaining(limits, key) == {"minute": 8, "hour": 0, "day": 98}


def test_a_request_refused_by_the_day_window_spends_nothing(limits: RateLimits) -> None:
    key = _key(per_minute=10, per_hour=10, per_day=3)
    for _ in range(3):
        assert limits.count(key).breached is None
    refused = limits.count(key)
    assert refused.breached is not None and refused.breached.window == "day"
    assert refused.status.window == "day" and refused.status.remaining == 0
    assert _remaining(limits, key) == {"minute": 7, "hour": 7, "day": 0}


def test_the_first_full_window_is_the_one_named(limits: RateLimits) -> None:
    key = _key(per_minute=2, per_hour=2, per_day=2)
    limits.count(key), limits.count(key)
    refused = limits.count(key)
    assert refused.breached is not None and refused.breached.window == "minute"
    assert _remaining(limits, key) == {"minute": 0, "hour": 0, "day": 0}


def test_spent_requests_count_down_every_window_by_one(limits: RateLimits) -> None:
    key = _key(per_minute=5, per_hour=6, per_day=7)
    seen = [limits.count(key) for _ in range(5)]
    assert [count.status.remaining for count in seen] == [4, 3, 2, 1, 0]
    assert all(count.status.window == "minute" for count in seen)
    assert _remaining(limits, key) == {"minute": 0, "hour": 1, "day": 2}
