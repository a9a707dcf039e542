"""The routes of remote-written label sets a process keeps (which monitors a label set feeds), bounded in bytes."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

# Routes of remote-written label sets (app.monitors.intake.remote_write) a process keeps, in bytes: estimated as
# the label strings' own sizes plus ROUTE_OVERHEAD a label, a monitor fed and an entry; at most
# ROUTE_BYTES_PER_ACCOUNT of one account's and ROUTE_BYTES in all.
ROUTE_BYTES_PER_ACCOUNT = 16 << 20
ROUTE_BYTES = 64 << 20
ROUTE_OVERHEAD = 200


class RouteCache:
    """Values by (account, key), each put with its size in bytes, valid while the account's ``generation`` (the
    object the values were computed against) stays the one asked with. Within an account the oldest entries go
    first past ``per_account`` bytes; past ``total``, the account put to least recently goes whole. Reads take no
    lock (one dict lookup); puts do."""

    def __init__(self, *, per_account: int = ROUTE_BYTES_PER_ACCOUNT, total: int = ROUTE_BYTES) -> None:
        self.per_account, self.total = per_account, total
        self.bytes = 0
        self._lock = threading.Lock()
        self._accounts: OrderedDict[str, _AccountEntries] = OrderedDict()

    def get(self, account_id: str, generation: object, key: Hashable) -> Any:
        entries = self._accounts.get(account_id)
        if entries is None or entries.generation is not generation:
            return None
        found = entries.values.get(key)
        return None if found is None else found[0]

    def put(self, account_id: str, generation: object, key: Hashable, value: Any, *, size: int) -> None:
        if size > self.per_account:
            return
        with self._lock:
            entries = self._accounts.get(account_id)
            if entries is None or entries.generation is not generation:
                if entries is not None:
                    self.bytes -= entries.bytes
                entries = self._accounts[account_id] = _AccountEntries(generation)
            if key in entries.values:
                return
            while entries.values and entries.bytes + size > self.per_account:
                self.bytes -= entries.pop_oldest()
            entries.values[key] = (value, size)
            entries.bytes += size
            self.bytes += size
            self._accounts.move_to_end(account_id)
            while self.bytes > self.total:
                oldest = next(iter(self._accounts.values()))
                if oldest is entries:
                    self.bytes -= entries.pop_oldest()
                else:
                    self.bytes -= self._accounts.popitem(last=False)[1].bytes

    def account_bytes(self, account_id: str) -> int:
        entries = self._accounts.get(account_id)
        return 0 if entries is None else entries.bytes

    def account_entries(self, account_id: str) -> int:
        entries = self._accounts.get(account_id)
        return 0 if entries is None else len(entries.values)

    def clear(self) -> None:
        with self._lock:
            self._accounts.clear()
            self.bytes = 0


class _AccountEntries:
    __slots__ = ("bytes", "generation", "values")

    def __init__(self, generation: object) -> None:
        self.generation = generation
        self.values: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self.bytes = 0

    def pop_oldest(self) -> int:
        _, (_, size) = self.values.popitem(last=False)
        self.bytes -= size
        return size
