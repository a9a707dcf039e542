"""What the calls return: plain frozen dataclasses, plus pandas views when pandas is installed."""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After as seconds to wait: delta-seconds or an HTTP date (RFC 9110 10.2.3); None when unusable."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = when.timestamp() - time.time()
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


@dataclass(frozen=True)
class RateLimit:
    """The most constraining rate-limit window: ``remaining`` of ``limit`` left, one request frees up at ``reset``
    (epoch seconds)."""

    limit: int
    remaining: int
    reset: int

    @property
    def reset_at(self) -> datetime:
        return datetime.fromtimestamp(self.reset, UTC)

    @classmethod
    def from_headers(cls, headers: Mapping[str, str]) -> RateLimit | None:
        try:
            return cls(
                limit=int(headers["X-RateLimit-Limit"]),
                remaining=int(headers["X-RateLimit-Remaining"]),
                reset=int(headers["X-RateLimit-Reset"]),
            )
        except (KeyError, ValueError):
            return None


@dataclass(frozen=True)
class VerifyResult:
    """GET /verify: the key is valid (an invalid key raises Unauthorized), what it may do, how much is left."""

    message: str
    permissions: tuple[str, ...]
    rate_limit: RateLimit
    timestamp: datetime
    request_id: str | None = None

    @property
    def valid(self) -> bool:
        return True


@dataclass(frozen=True)
class ModelInfo:
    id: str
    description: str


@dataclass(frozen=True)
class ForecastResult:
    """POST /forecast. ``timestamps`` are the service's own text (the input's form: same offset or Z, month ends
    kept); ``median``, ``lower`` and ``upper`` have one entry per timestamp."""

    timestamps: list[str]
    median: list[float]
    lower: list[float]
    upper: list[float]
    model: str
    frequency: str
    confidence: float
    fallback: str | None = None
    warning: str | None = None
    rate_limit: RateLimit | None = None
    request_id: str | None = None
    # The time zone of the input (a pandas index or aware datetimes), so to_pandas() answers in it.
    input_tz: tzinfo | None = field(default=None, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.timestamps)

    @property
    def datetimes(self) -> list[datetime]:
        """The timestamps as datetime objects (aware when the service wrote an offset or Z)."""
        return [datetime.fromisoformat(_zulu_to_offset(text)) for text in self.timestamps]

    def to_pandas(self) -> pd.DataFrame:
        """A DataFrame with columns median, lower, upper indexed by timestamp (a DatetimeIndex named
        "timestamp", in the input's time zone when it had one)."""
        import pandas as pd

        index = _datetime_index(self.timestamps, self.input_tz)
        return pd.DataFrame({"median": self.median, "lower": self.lower, "upper": self.upper}, index=index)


def _zulu_to_offset(text: str) -> str:
    return text[:-1] + "+00:00" if text.endswith("Z") else text


def _datetime_index(timestamps: list[str], input_tz: tzinfo | None) -> pd.DatetimeIndex:
    import pandas as pd

    if not timestamps:
        return pd.DatetimeIndex([], name="timestamp", tz=input_tz)
    naive = not timestamps[0].endswith("Z") and not _has_offset(timestamps[0])
    if naive:
        return pd.DatetimeIndex(pd.to_datetime(timestamps, format="ISO8601"), name="timestamp")
    utc = pd.DatetimeIndex(pd.to_datetime(timestamps, format="ISO8601", utc=True), name="timestamp")
    if input_tz is not None:
        return utc.tz_convert(input_tz)
    offsets = {text[-6:] for text in timestamps} if not timestamps[0].endswith("Z") else {"Z"}
    if len(offsets) == 1 and "Z" not in offsets:
        # One fixed offset written in the input: answer in that offset rather than converting to UTC.
        return utc.tz_convert(datetime.fromisoformat(timestamps[0]).tzinfo)
    return utc


def _has_offset(text: str) -> bool:
    return len(text) >= 6 and text[-6] in "+-" and text[-3] == ":"
