"""What a rate limit says about a key: each window as it stands (WindowStatus) and what counting a request did
(Count). app.web.ratelimit computes them; the request pipeline, the key pages and the services' interfaces read
them, so they sit below all of those and import nothing of the app.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from limits import RateLimitItem
    from limits.util import WindowStats

WINDOW_NAMES = {60: "minute", 3600: "hour", 86400: "day"}


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

    @classmethod
    def of(cls, item: RateLimitItem, stats: WindowStats) -> WindowStatus:
        return cls(item.amount, max(0, stats.remaining), stats.reset_time, item.get_expiry())


@dataclass(frozen=True)
class Count:
    """What counting one request did: the window the headers show, and the full window if it was refused."""

    status: WindowStatus
    breached: WindowStatus | None
