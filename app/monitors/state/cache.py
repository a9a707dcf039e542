"""The judging state a process keeps per series, and the per-series locks of this process.

The state is the history the detector needs, tagged with the series' ``revision`` (bumped by every
change to its stored points). It is only ever a cache: an entry whose revision differs from the database
row's is ignored and rebuilt from the stored points, so several processes or hosts can serve one monitor.
"""

from __future__ import annotations

import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy loads on the first series, so the admin CLI never pays for it
    import numpy as np

    from app.compute.detect.streaming import DetectorState



@dataclass
class History:
    """The series' first ``head`` points and its latest points after them.

    A detector may read a series' first rows (its nominal spacing) and a bounded look-back before the rows
    it judges, so the first ``head`` points plus the last ``tail_rows`` points reproduce what judging the
    whole stored series gives; when ``tail_rows`` covers the retention, the two together are every point.
    Tails are typed arrays: 16 bytes a point, since a process may cache thousands of monitors.
    """

    revision: int
    head_epochs: list[int] = field(default_factory=list)
    head_values: list[float] = field(default_factory=list)
    tail_epochs: array = field(default_factory=lambda: array("q"))
    tail_values: array = field(default_factory=lambda: array("d"))
    after_head: int = 0  # stored points after the head (the tail holds the last of them)

    @property
    def size(self) -> int:
        return len(self.head_epochs) + len(self.tail_epochs)

    def usable(self, tail_rows: int) -> bool:
        return len(self.tail_epochs) >= min(tail_rows, self.after_head)

    def series(self, tail_rows: int) -> tuple[np.ndarray, np.ndarray]:
        import numpy as np
        tail_e = np.frombuffer(self.tail_epochs, dtype=np.int64) if self.tail_epochs else np.empty(0, np.int64)
        tail_v = np.frombuffer(self.tail_values, dtype=np.float64) if self.tail_values else np.empty(0)
        return (
            np.concatenate([np.asarray(self.head_epochs, dtype=np.int64), tail_e[-tail_rows:]]),
            np.concatenate([np.asarray(self.head_values, dtype=np.float64), tail_v[-tail_rows:]]),
        )

    def append(self, epochs: list[int], values: list[float], *, head_rows: int, tail_rows: int) -> None:
        position = 0
        while len(self.head_epochs) < head_rows and position < len(epochs) and self.after_head == 0:
            self.head_epochs.append(epochs[position])
            self.head_values.append(values[position])
            position += 1
        self.tail_epochs.extend(epochs[position:])
        self.tail_values.extend(values[position:])
        self.after_head += len(epochs) - position
        # Trimming in chunks keeps an append amortised O(1) instead of shifting the arrays every time.
        if len(self.tail_epochs) > tail_rows + max(64, tail_rows // 4):
            del self.tail_epochs[:-tail_rows]
            del self.tail_values[:-tail_rows]

    def replace_head(self, epochs: list[int], values: list[float], stored_count: int) -> None:
        """After retention dropped the oldest points: the new head (read back from the database)."""
        self.head_epochs, self.head_values = list(epochs), list(values)
        newest_head = epochs[-1] if epochs else None
        if newest_head is not None:
            keep = next((i for i, e in enumerate(self.tail_epochs) if e > newest_head), len(self.tail_epochs))
            del self.tail_epochs[:keep]
            del self.tail_values[:keep]
        self.after_head = stored_count - len(epochs)


@dataclass
class JudgeState:
    """The default detector's state after the series' stored points, at the series' ``revision``."""

    revision: int
    detector: DetectorState
    size: int
    last_epoch: int | None = None  # the newest point the state has seen
    # Kept for series people give feedback on: the state before the last append and that append's points
    # (epoch, value, learnt as normal), so a "not an anomaly" on one of them is relearnt by replaying them alone.
    checkpoint: DetectorState | None = None
    checkpoint_rows: list[tuple[int, float, bool]] | None = None
    unsaved: int = 0  # points the state advanced over since it was last saved (app.monitors.state.snapshots)


class HistoryCache:
    """LRU of History or JudgeState by series id, bounded by the numbers they hold. Callers read and change
    an entry only while holding the series' lock (MonitorLocks), so entries need no lock of their own."""

    # Bounded in numbers, not entries: a state's size grows with its season, so a count of entries would let
    # minute-data monitors take several times the memory of others. 8 bytes a number (typed arrays; a record's
    # one-byte codes count as an eighth): the default is 160 MB per process. What a state holds by season:
    # bench/results/design-notes.md.
    def __init__(self, *, max_points: int = 20_000_000) -> None:
        self._entries: OrderedDict[int, History | JudgeState] = OrderedDict()
        # Each entry's size when last put, and their sum: entries grow in place between get and put.
        self._sizes: dict[int, int] = {}
        self._total = 0
        self._max_points = max_points
        self._lock = threading.Lock()

    def get(self, series_id: int, revision: int) -> History | JudgeState | None:
        with self._lock:
            entry = self._entries.get(series_id)
            if entry is None or entry.revision != revision:
                return None
            self._entries.move_to_end(series_id)
            return entry

    def peek(self, series_id: int) -> History | JudgeState | None:
        """The entry at whatever revision: a detector state can catch up with points stored since."""
        with self._lock:
            entry = self._entries.get(series_id)
            if entry is not None:
                self._entries.move_to_end(series_id)
            return entry

    def put(self, series_id: int, entry: History | JudgeState) -> None:
        with self._lock:
            self._entries[series_id] = entry
            self._entries.move_to_end(series_id)
            self._total += entry.size - self._sizes.get(series_id, 0)
            self._sizes[series_id] = entry.size
            while self._total > self._max_points and len(self._entries) > 1:
                evicted_id, _ = self._entries.popitem(last=False)
                self._total -= self._sizes.pop(evicted_id, 0)

    def drop(self, series_id: int) -> None:
        with self._lock:
            self._entries.pop(series_id, None)
            self._total -= self._sizes.pop(series_id, 0)


class MonitorLocks:
    """One lock per series in this process, kept between appends (a fleet's append would otherwise create a
    lock for each of its series on every request). Entries not held are pruned when they grow past PRUNE_AT; a holder
    checks after acquiring that its lock is still the series' one (a pruned lock is retried), so pruning never
    lets two threads hold one series."""

    PRUNE_AT = 500_000

    def __init__(self) -> None:
        self._locks: dict[int, threading.Lock] = {}
        self._pruning = threading.Lock()

    def acquire(self, series_id: int) -> None:
        locks = self._locks
        while True:
            lock = locks.get(series_id)
            if lock is None:
                lock = locks.setdefault(series_id, threading.Lock())  # atomic: one lock wins
            lock.acquire()
            if locks.get(series_id) is lock:
                return
            lock.release()

    def release(self, series_id: int) -> None:
        self._locks[series_id].release()

    def held(self, series_ids: Iterable[int]) -> HeldLocks:
        return HeldLocks(self, sorted(set(series_ids)))

    def prune(self) -> None:
        if len(self._locks) < self.PRUNE_AT or not self._pruning.acquire(blocking=False):
            return
        try:
            for series_id, lock in list(self._locks.items()):
                if lock.acquire(blocking=False):
                    if self._locks.get(series_id) is lock:
                        del self._locks[series_id]
                    lock.release()
        finally:
            self._pruning.release()


class HeldLocks:
    """The locks of some series, taken in id order (two holders of overlapping sets never wait on each other in a
    circle) for a with block."""

    __slots__ = ("_ids", "_locks")

    def __init__(self, locks: MonitorLocks, series_ids: list[int]) -> None:
        self._locks, self._ids = locks, series_ids

    def __enter__(self) -> None:
        taken = 0
        try:
            for series_id in self._ids:
                self._locks.acquire(series_id)
                taken += 1
        except BaseException:
            for series_id in self._ids[:taken]:
                self._locks.release(series_id)
            raise

    def __exit__(self, *_exc: object) -> None:
        for series_id in self._ids:
            self._locks.release(series_id)
        self._locks.prune()
