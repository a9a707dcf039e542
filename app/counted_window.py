"""A moving-window strategy whose hit also tells how full the window is, read in the same atomic step.

X-RateLimit-Remaining must count down by one per counted request. Reading the window again after the
hit mixes in requests that other threads or processes counted meanwhile, so two answers could show the
same number. Here the count is taken with the hit: under a lock for in-memory storage (one process),
inside one Lua script for Redis (every process). The data layout is limits' own, so its
get_window_stats keeps reading the same windows. Nothing here knows about Flask: the figures go back to
the caller.
"""

from __future__ import annotations

import threading
import time

from limits import RateLimitItem
from limits.errors import StorageError
from limits.storage import RedisStorage, Storage
from limits.strategies import MovingWindowRateLimiter
from limits.util import WindowStats

# limits' acquire_moving_window.lua followed by its moving_window.lua, as one script.
_ACQUIRE_AND_COUNT = """
local timestamp = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local expiry = tonumber(ARGV[3])
local amount = tonumber(ARGV[4])
local acquired = 0
if amount <= limit then
    local entry = redis.call('lindex', KEYS[1], limit - amount)
    if not (entry and tonumber(entry) >= timestamp - expiry) then
        local entries = {}
        for i = 1, amount do entries[i] = timestamp end
        redis.call('lpush', KEYS[1], unpack(entries))
        redis.call('ltrim', KEYS[1], 0, limit - 1)
        redis.call('expire', KEYS[1], expiry)
        acquired = 1
    end
end
local low, high, oldest = 0, redis.call('llen', KEYS[1]) - 1, nil
while low <= high do
    local mid = math.floor((low + high) / 2)
    local value = tonumber(redis.call('lindex', KEYS[1], mid))
    if value and value >= timestamp - expiry then
        oldest = mid
        low = mid + 1
    else
        high = mid - 1
    end
end
if oldest then
    return {acquired, tostring(redis.call('lindex', KEYS[1], oldest)), oldest + 1}
end
return {acquired, tostring(timestamp), 0}
"""


class CountedMovingWindowRateLimiter(MovingWindowRateLimiter):
    def __init__(self, storage: Storage) -> None:
        super().__init__(storage)
        self._lock = threading.Lock()
        self._script = None
        if isinstance(storage, RedisStorage):
            self._script = storage.get_connection().register_script(_ACQUIRE_AND_COUNT)

    def hit_counted(self, item: RateLimitItem, *identifiers: str, cost: int = 1) -> tuple[bool, WindowStats]:
        """Spends ``cost`` when the window allows it; returns whether it did and the window right after."""
        if self._script is None:
            with self._lock:
                acquired = super().hit(item, *identifiers, cost=cost)
                return acquired, self.get_window_stats(item, *identifiers)
        key = self.storage.prefixed_key(item.key_for(*identifiers))  # type: ignore[attr-defined]
        now = time.time()
        expiry = item.get_expiry()
        try:
            acquired, oldest, count = self._script([key], [now, item.amount, expiry, cost])
        except Exception as exc:  # the same wrapping limits gives its own calls (wrap_exceptions)
            raise StorageError(exc) from exc
        reset = float(oldest) + expiry if int(count) else now + expiry
        return bool(acquired), WindowStats(reset, item.amount - int(count))

    def hit(self, item: RateLimitItem, *identifiers: str, cost: int = 1) -> bool:
        return self.hit_counted(item, *identifiers, cost=cost)[0]

