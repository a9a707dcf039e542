"""The judging state a process keeps per monitor, and the per-monitor locks of this process.

The state is the history the detector needs, tagged with the monitor's ``revision`` (bumped by every
change to its stored points). It is only ever a cache: an entry whose revision differs from the database
row's is ignored and rebuilt from the stored points, so several processes or hosts can serve one monitor.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field


@dataclass
class History:
    """The monitor's first ``head`` points and its latest points after them.

    The detector derives the series' nominal spacing from its first rows and looks back a bounded number
    of rows (and up to three seasons) from the rows it judges, so head + the last ``tail_rows`` points
    reproduce exactly what judging the whole stored series gives.
    """

    revision: int
    head_epochs: list[int] = field(default_factory=list)
    head_values: list[float] = field(default_factory=list)
    tail_epochs: list[int] = field(default_factory=list)
    tail_values: list[float] = field(default_factory=list)
    after_head: int = 0  # stored points after the head (the tail holds the last of them)

    def usable(self, tail_rows: int) -> bool:
        return len(self.tail_epochs) >= min(tail_rows, self.after_head)

    def series(self, tail_rows: int) -> tuple[list[int], list[float]]:
        return (
            self.head_epochs + self.tail_epochs[-tail_rows:],
            self.head_values + self.tail_values[-tail_rows:],
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
        # Trimming in chunks keeps an append amortised O(1) instead of shifting the lists every time.
        if len(self.tail_epochs) > 2 * tail_rows:
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


class HistoryCache:
    """Bounded LRU of History by monitor id. Callers read and change an entry only while holding the
    monitor's lock (MonitorLocks), so entries need no lock of their own."""

    def __init__(self, *, max_monitors: int = 5000) -> None:
        self._entries: OrderedDict[str, History] = OrderedDict()
        self._max_monitors = max_monitors
        self._lock = threading.Lock()

    def get(self, monitor_id: str, revision: int) -> History | None:
        with self._lock:
            entry = self._entries.get(monitor_id)
            if entry is None or entry.revision != revision:
                return None
            self._entries.move_to_end(monitor_id)
            return entry

    def put(self, monitor_id: str, entry: History) -> None:
        with self._lock:
            self._entries[monitor_id] = entry
            self._entries.move_to_end(monitor_id)
            while len(self._entries) > self._max_monitors:
                self._entries.popitem(last=False)

    def drop(self, monitor_id: str) -> None:
        with self._lock:
            self._entries.pop(monitor_id, None)


class MonitorLocks:
    """One lock per monitor in this process; a lock lives while someone holds or waits for it."""

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[str, threading.Lock] = weakref.WeakValueDictionary()
        self._guard = threading.Lock()

    def lock_for(self, monitor_id: str) -> threading.Lock:
        with self._guard:
            lock = self._locks.get(monitor_id)
            if lock is None:
                lock = threading.Lock()
                self._locks[monitor_id] = lock
            return lock
