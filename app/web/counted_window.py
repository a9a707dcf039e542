"""A moving-window strategy whose hit also tells how full the window is, read in the same atomic step, and
which spends a request from several windows (a key's minute, hour and day) all together or not at all.

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

# limits' acquire_moving_window.lua and moving_window.lua, over several windows at once: a request is spent
# from every window or from none (a request refused by a full day window must not use up minute slots).
# KEYS: the windows; ARGV: now, cost, then each window's limit and expiry. Returns the 1-based index of the
# first full window (0 when the request was spent), then each window's oldest live entry and entry count.
_ACQUIRE_ALL_AND_COUNT = """
local timestamp = tonumber(ARGV[1])
local amount = tonumber(ARGV[2])
local refused = 0
for k = 1, #KEYS do
    local limit, expiry = tonumber(ARGV[1 + 2 * k]), tonumber(ARGV[2 + 2 * k])
    local entry = amount <= limit and redis.call('lindex', KEYS[k], limit - amount)
    if amount > limit or (entry and tonumber(entry) >= timestamp - expiry) then
        refused = k
        break
    end
end
if refused == 0 then
    local entries = {}
    for i = 1, amount do entries[i] = timestamp end
    for k = 1, #KEYS do
        local limit, expiry = tonumber(ARGV[1 + 2 * k]), tonumber(ARGV[2 + 2 * k])
        redis.call('lpush', KEYS[k], unpack(entries))
        redis.call('ltrim', KEYS[k], 0, limit - 1)
        redis.call('expire', KEYS[k], expiry)
    end
end
local out = {refused}
for k = 1, #KEYS do
    local expiry = tonumber(ARGV[2 + 2 * k])
    local low, high, oldest = 0, redis.call('llen', KEYS[k]) - 1, nil
    while low <= high do
        local mid = math.floor((low + high) / 2)
        local value = tonumber(redis.call('lindex', KEYS[k], mid))
        if value and value >= timestamp - expiry then
            oldest = mid
            low = mid + 1
        else
            high = mid - 1
        end
    end
    if oldest then
        out[#out + 1] = tostring(redis.call('lindex', KEYS[k], oldest))
        out[#out + 1] = oldest + 1
    else
        out[#out + 1] = tostring(timestamp)
        out[#out + 1] = 0
    end
end
return out
"""


class MemoryWindows:
    """Moving windows of one process, kept here rather than in limits' MemoryStorage.

    MemoryStorage trims expired entries from a threading.Timer that it starts again on almost every hit
    once the previous one (10 ms) has run: a new thread per counted request, only to drop entries that the
    next read of their window can drop itself. Here expired entries are dropped when their window is next read,
    and a sweep, run by a hit at most every ``sweep_seconds``, empties and drops the windows nobody reads. The answers
    are limits' own: a hit is refused when the window already holds ``limit`` entries newer than
    ``expiry`` seconds, and the reset time is the oldest entry in the window plus ``expiry``.
    """

    def __init__(self, sweep_seconds: float = 60.0) -> None:
        self._windows: dict[str, tuple[int, deque[float]]] = {}
        self._lock = threading.Lock()
        self._sweep_seconds = sweep_seconds
        self._swept_at = _memory_clock()

    def hit_all(self, windows: list[tuple[str, int, int]], cost: int) -> tuple[int | None, list[WindowStats]]:
        """Spends ``cost`` from every (key, limit, expiry) window, or from none when one is full; returns the
        index of the first full window (None when spent) and each window's figures right after."""
        now = _memory_clock()
        with self._lock:
            deques = []
            refused: int | None = None
            for index, (key, limit, expiry) in enumerate(windows):
                window = self._windows.setdefault(key, (expiry, deque()))[1]
                _drop_expired(window, now - expiry)
                deques.append(window)
                if refused is None and not (cost <= limit and len(window) + cost <= limit):
                    refused = index
            if refused is None:
                for window in deques:
                    window.extend([now] * cost)
            stats = [
                _stats(window, now, limit, expiry)
                for window, (_, limit, expiry) in zip(deques, windows, strict=True)
            ]
            if now - self._swept_at >= self._sweep_seconds:
                self._sweep(now)
        return refused, stats

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
            self._script = storage.get_connection().register_script(_ACQUIRE_ALL_AND_COUNT)
        else:
            self._memory = MemoryWindows()

    def hit_all(
        self, items: list[RateLimitItem], *identifiers: str, cost: int = 1
    ) -> tuple[int | None, list[WindowStats]]:
        """Spends ``cost`` from every window when all allow it, else from none, in one atomic step; returns
        the index of the first full window (None when spent) and every window's figures right after."""
        windows = [(item.key_for(*identifiers), item.amount, item.get_expiry()) for item in items]
        if self._memory is not None:
            return self._memory.hit_all(windows, cost)
        now = time.time()
        keys = [self.storage.prefixed_key(key) for key, _, _ in windows]  # type: ignore[attr-defined]
        args: list[float] = [now, cost]
        for _, limit, expiry in windows:
            args += [limit, expiry]
        try:
            refused, *figures = self._script(keys, args)  # type: ignore[misc]
        except Exception as exc:  # the same wrapping limits gives its own calls (wrap_exceptions)
            raise StorageError(exc) from exc
        stats = []
        for (_, limit, expiry), oldest, count in zip(windows, figures[0::2], figures[1::2], strict=True):
            reset = float(oldest) + expiry if int(count) else now + expiry
            stats.append(WindowStats(reset, limit - int(count)))
        return (int(refused) - 1 if int(refused) else None), stats

    def hit_counted(self, item: RateLimitItem, *identifiers: str, cost: int = 1) -> tuple[bool, WindowStats]:
        """Spends ``cost`` when the window allows it; returns whether it did and the window right after."""
        refused, [stats] = self.hit_all([item], *identifiers, cost=cost)
        return refused is None, stats

    def hit(self, item: RateLimitItem, *identifiers: str, cost: int = 1) -> bool:
        return self.hit_counted(item, *identifiers, cost=cost)[0]

    def get_window_stats(self, item: RateLimitItem, *identifiers: str) -> WindowStats:
        if self._memory is not None:
            return self._memory.stats(item.key_for(*identifiers), item.amount, item.get_expiry())
        return super().get_window_stats(item, *identifiers)
