"""A moving-window strategy whose hit also tells how full the window is, read in the same atomic step.

X-RateLimit-Remaining must count down by one per counted request. Reading the window again after the
hit mixes in requests that other threads or processes counted meanwhile, so two answers could show the
same number. Here the count is taken with the hit: under a lock in MemoryWindows for in-memory storage
(one process), inside one Lua script for Redis (every process), whose data layout is limits' own, so its
get_window_stats keeps reading the same windows. Nothing here knows about Flask: the figures go back to
the caller.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from limits import RateLimitItem
from limits.errors import StorageError
from limits.storage import RedisStorage, Storage
from limits.storage import memory as limits_memory
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


class MemoryWindows:
    """Moving windows of one process, kept here rather than in limits' MemoryStorage.

    MemoryStorage trims expired entries from a threading.Timer that it starts again on almost every hit
    once the previous one (10 ms) has run: a new thread per counted request, measured at about 1 ms of the
    web process's CPU a request. Here expired entries are dropped when their window is next read, and a
    sweep, run by a hit at most every ``sweep_seconds``, empties and drops the windows nobody reads. The answers
    are limits' own: a hit is refused when the window already holds ``limit`` entries newer than
    ``expiry`` seconds, and the reset time is the oldest entry in the window plus ``expiry``.
    """

    def __init__(self, sweep_seconds: float = 60.0) -> None:
        self._windows: dict[str, tuple[int, deque[float]]] = {}
        self._lock = threading.Lock()
        self._sweep_seconds = sweep_seconds
        self._swept_at = _memory_clock()

    def hit(self, key: str, limit: int, expiry: int, cost: int) -> tuple[bool, WindowStats]:
        now = _memory_clock()
        with self._lock:
            window = self._windows.setdefault(key, (expiry, deque()))[1]
            _drop_expired(window, now - expiry)
            acquired = cost <= limit and len(window) + cost <= limit
            if acquired:
                window.extend([now] * cost)
            stats = _stats(window, now, limit, expiry)
            if now - self._swept_at >= self._sweep_seconds:
                self._sweep(now)
        return acquired, stats

    def stats(self, key: str, limit: int, expiry: int) -> WindowStats:
        now = _memory_clock()
        with self._lock:
            entry = self._windows.get(key)
            if entry is None:
                return WindowStats(now + expiry, limit)
            window = entry[1]
            _drop_expired(window, now - expiry)
            return _stats(window, now, limit, expiry)

    def _sweep(self, now: float) -> None:
        self._swept_at = now
        for key, (expiry, window) in list(self._windows.items()):
            _drop_expired(window, now - expiry)
            if not window:
                del self._windows[key]


def _memory_clock() -> float:
    # The clock limits' MemoryStorage reads, so whatever sets that clock (the tests do) sets these windows too.
    return limits_memory.time.time()


def _drop_expired(window: deque[float], horizon: float) -> None:
    while window and window[0] <= horizon:
        window.popleft()


def _stats(window: deque[float], now: float, limit: int, expiry: int) -> WindowStats:
    if not window:
        return WindowStats(now + expiry, limit)
    return WindowStats(window[0] + expiry, limit - len(window))


class CountedMovingWindowRateLimiter(MovingWindowRateLimiter):
    def __init__(self, storage: Storage) -> None:
        super().__init__(storage)
        self._script = None
        self._memory: MemoryWindows | None = None
        if isinstance(storage, RedisStorage):
            self._script = storage.get_connection().register_script(_ACQUIRE_AND_COUNT)
        else:
            self._memory = MemoryWindows()

    def hit_counted(self, item: RateLimitItem, *identifiers: str, cost: int = 1) -> tuple[bool, WindowStats]:
        """Spends ``cost`` when the window allows it; returns whether it did and the window right after."""
        key = item.key_for(*identifiers)
        expiry = item.get_expiry()
        if self._memory is not None:
            return self._memory.hit(key, item.amount, expiry, cost)
        key = self.storage.prefixed_key(key)  # type: ignore[attr-defined]
        now = time.time()
        try:
            acquired, oldest, count = self._script([key], [now, item.amount, expiry, cost])  # type: ignore[misc]
        except Exception as exc:  # the same wrapping limits gives its own calls (wrap_exceptions)
            raise StorageError(exc) from exc
        reset = float(oldest) + expiry if int(count) else now + expiry
        return bool(acquired), WindowStats(reset, item.amount - int(count))

    def hit(self, item: RateLimitItem, *identifiers: str, cost: int = 1) -> bool:
        return self.hit_counted(item, *identifiers, cost=cost)[0]

    def get_window_stats(self, item: RateLimitItem, *identifiers: str) -> WindowStats:
        if self._memory is not None:
            return self._memory.stats(item.key_for(*identifiers), item.amount, item.get_expiry())
        return super().get_window_stats(item, *identifiers)
