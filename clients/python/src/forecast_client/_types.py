"""What the calls return: plain frozen dataclasses, plus pandas views when pandas is installed."""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import TYPE_CHECKING, Any

from forecast_client._covariates import CovariateSummary

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
    # The answer's covariates object when the forecast was asked with covariates, holidays or calendar features.
    covariates: CovariateSummary | None = None

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


@dataclass(frozen=True)
class AnomalyResult:
    """POST /anomalies: a verdict for every input row. ``values`` are the values sent (None where missing);
    rows before ``warmup_points`` only taught the detector (score 0). ``score`` is the probability that a row
    is not normal and ``is_anomaly`` is ``score >= threshold``; ``threshold`` is the service's, one for the
    whole answer, from the false alarms a week allowed or the confidence asked for. ``confidence`` is the one
    asked for, None when not."""

    timestamps: list[str]
    values: list[float | None]
    expected: list[float]
    lower: list[float]
    upper: list[float]
    score: list[float]
    is_anomaly: list[bool]
    direction: list[str | None]
    warmup_points: int
    period: int | None
    model: str
    frequency: str
    confidence: float | None
    threshold: float
    fallback: str | None = None
    rate_limit: RateLimit | None = None
    request_id: str | None = None
    input_tz: tzinfo | None = field(default=None, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.timestamps)

    @property
    def anomalies(self) -> list[int]:
        """Positions of the rows judged anomalous."""
        return [position for position, flagged in enumerate(self.is_anomaly) if flagged]

    def to_pandas(self) -> pd.DataFrame:
        """Columns value, expected, lower, upper, score, is_anomaly, direction; indexed like ForecastResult."""
        import pandas as pd

        return pd.DataFrame(
            {
                "value": [float("nan") if v is None else v for v in self.values],
                "expected": self.expected,
                "lower": self.lower,
                "upper": self.upper,
                "score": self.score,
                "is_anomaly": self.is_anomaly,
                "direction": self.direction,
            },
            index=_datetime_index(self.timestamps, self.input_tz),
        )


@dataclass(frozen=True)
class LastPointResult:
    """POST /anomalies/last: the verdict on the series' last row only; ``threshold`` and ``confidence`` as in
    AnomalyResult."""

    timestamp: str
    value: float | None
    expected: float
    lower: float
    upper: float
    score: float
    is_anomaly: bool
    direction: str | None
    warmup_points: int
    period: int | None
    model: str
    frequency: str
    confidence: float | None
    threshold: float
    fallback: str | None = None
    rate_limit: RateLimit | None = None
    request_id: str | None = None


@dataclass(frozen=True)
class KeyLimits:
    per_minute: int
    per_hour: int
    per_day: int


@dataclass(frozen=True)
class KeyInfo:
    """What the service shows about a key: never the plain key nor its hash."""

    id: str
    name: str
    prefix: str
    last4: str | None
    display: str
    permissions: tuple[str, ...]
    tier: str | None
    limits: KeyLimits
    status: str
    created: datetime | None
    expires: datetime | None
    revoked: datetime | None
    last_used: datetime | None
    usage_count: int
    rotated_to: str | None

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> KeyInfo:
        return cls(**_key_fields(body))


@dataclass(frozen=True)
class CreatedKey(KeyInfo):
    """A new key. ``key`` is the plain key, given this once: store it now. It is left out of repr()."""

    key: str = field(default="", repr=False)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> CreatedKey:
        return cls(**_key_fields(body), key=str(body["key"]))


@dataclass(frozen=True)
class RotatedKey:
    new_key: CreatedKey
    old_key: KeyInfo


@dataclass(frozen=True)
class UsageBucket:
    hour: datetime
    total: int
    counts: dict[str, int]


@dataclass(frozen=True)
class RateWindow:
    window: str
    limit: int
    remaining: int
    reset: int


@dataclass(frozen=True)
class KeyUsage:
    """GET /keys/{id}/usage: requests per hour by outcome, and the key's three live windows."""

    key_id: str
    hours: int
    totals: dict[str, int]
    buckets: list[UsageBucket]
    rate_limits: list[RateWindow]


def _instant(value: Any) -> datetime | None:
    if value is None:
        return None
    return datetime.fromisoformat(_zulu_to_offset(str(value)))


def _key_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    limits = body["limits"]
    return {
        "id": str(body["id"]),
        "name": str(body.get("name") or ""),
        "prefix": str(body["prefix"]),
        "last4": body.get("last4"),
        "display": str(body.get("display") or body["prefix"]),
        "permissions": tuple(body["permissions"]),
        "tier": body.get("tier"),
        "limits": KeyLimits(int(limits["per_minute"]), int(limits["per_hour"]), int(limits["per_day"])),
        "status": str(body["status"]),
        "created": _instant(body.get("created")),
        "expires": _instant(body.get("expires")),
        "revoked": _instant(body.get("revoked")),
        "last_used": _instant(body.get("last_used")),
        "usage_count": int(body.get("usage_count") or 0),
        "rotated_to": body.get("rotated_to"),
    }


def read_usage(body: Mapping[str, Any]) -> KeyUsage:
    return KeyUsage(
        key_id=str(body["key_id"]),
        hours=int(body["hours"]),
        totals={str(k): int(v) for k, v in body["totals"].items()},
        buckets=[
            UsageBucket(
                hour=datetime.fromisoformat(_zulu_to_offset(str(b["hour"]))),
                total=int(b["total"]),
                counts={str(k): int(v) for k, v in b.items() if k not in ("hour", "total")},
            )
            for b in body["buckets"]
        ],
        rate_limits=[
            RateWindow(str(w["window"]), int(w["limit"]), int(w["remaining"]), int(w["reset"]))
            for w in body["rate_limits"]
        ],
    )


@dataclass(frozen=True)
class MonitorPoint:
    """One stored point of a monitor with the verdict it got when it arrived."""

    timestamp: str
    value: float
    expected: float
    lower: float
    upper: float
    score: float
    is_anomaly: bool
    direction: str | None
    warmup: bool
    series_id: int | None = None  # the point's series, when it is a labelled series of its monitor

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> MonitorPoint:
        return cls(
            timestamp=str(body["timestamp"]),
            value=float(body["value"]),
            expected=float(body["expected"]),
            lower=float(body["lower_bound"]),
            upper=float(body["upper_bound"]),
            score=float(body["anomaly_score"]),
            is_anomaly=bool(body["is_anomaly"]),
            direction=body["direction"],
            warmup=bool(body["warmup"]),
            series_id=None if body.get("series_id") is None else int(body["series_id"]),
        )


def _forecast_of(body: Mapping[str, Any], frequency: str) -> ForecastResult | None:
    forecast = body.get("forecast")
    return None if not forecast else ForecastResult(
        timestamps=[str(t) for t in forecast["forecast_timestamps"]],
        median=[float(v) for v in forecast["median"]],
        lower=[float(v) for v in forecast["lower_bound"]],
        upper=[float(v) for v in forecast["upper_bound"]],
        model=str(forecast["model"]),
        frequency=frequency,
        confidence=float(forecast["confidence"]),
    )


@dataclass(frozen=True)
class MonitorSeries:
    """One series of a monitor (one label set its source yields; ``labels`` is empty for a monitor's unlabelled
    stream), with its latest point and verdict. ``points`` holds the last points asked for; ``open_anomalies``,
    ``monitor_id`` and ``forecast`` come with get_series()."""

    id: int
    labels: dict[str, str]
    point_count: int
    first_timestamp: str | None
    last_timestamp: str | None
    last_point: MonitorPoint | None
    open_anomaly_since: str | None
    points: list[MonitorPoint]
    open_anomalies: list[MonitorPoint] = field(default_factory=list)
    monitor_id: str | None = None
    forecast: ForecastResult | None = None

    @property
    def is_anomalous(self) -> bool:
        """An incident of this series is open (its last anomalies are not yet followed by a normal point)."""
        return self.open_anomaly_since is not None

    @classmethod
    def from_body(cls, body: Mapping[str, Any], frequency: str = "") -> MonitorSeries:
        last = body.get("last_point")
        return cls(
            id=int(body["id"]),
            labels={str(k): str(v) for k, v in (body.get("labels") or {}).items()},
            point_count=int(body.get("point_count") or 0),
            first_timestamp=body.get("first_timestamp"),
            last_timestamp=body.get("last_timestamp"),
            last_point=None if not last else MonitorPoint.from_body(last),
            open_anomaly_since=body.get("open_anomaly_since"),
            points=[MonitorPoint.from_body(p) for p in body.get("points") or []],
            open_anomalies=[MonitorPoint.from_body(p) for p in body.get("open_anomalies") or []],
            monitor_id=body.get("monitor_id"),
            forecast=_forecast_of(body, frequency),
        )


@dataclass(frozen=True)
class MonitorSeriesPage:
    """One page of list_series(); pass ``next_after`` as ``after=`` for the next (None on the last page)."""

    series: list[MonitorSeries]
    next_after: int | None


@dataclass(frozen=True)
class Monitor:
    """A monitor: a stored series judged point by point. ``points`` holds the last points asked for,
    ``forecast`` the forecast asked for (``get_monitor(..., horizon=H)``). ``webhook_secret`` is given only by
    the call that creates it (create with a webhook, or rotate) and is left out of repr(). At most one of
    ``false_alarms_per_week``, ``confidence`` and ``sensitivity`` is set; all None: one false alarm a week."""

    id: str
    name: str
    frequency: str
    confidence: float | None
    model: str
    retention_points: int
    webhook_url: str | None
    created_at: datetime | None
    updated_at: datetime | None
    point_count: int
    last_timestamp: str | None
    open_anomalies: list[MonitorPoint]
    points: list[MonitorPoint]
    forecast: ForecastResult | None
    webhook_secret: str | None = field(default=None, repr=False)
    false_alarms_per_week: float | None = None
    sensitivity: int | None = None
    # Its series (one per label set its source yields): how many, the first page of them (get_monitor), and the
    # points refused because a new series would have passed the server's per-monitor cap.
    series_count: int = 0
    series: list[MonitorSeries] = field(default_factory=list)
    series_refused: int = 0

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Monitor:
        return cls(
            id=str(body["id"]),
            name=str(body["name"]),
            frequency=str(body["data_frequency"]),
            confidence=_optional_float(body.get("confidence")),
            model=str(body["model"]),
            retention_points=int(body["retention_points"]),
            webhook_url=body.get("webhook_url"),
            created_at=_instant(body.get("created_at")),
            updated_at=_instant(body.get("updated_at")),
            point_count=int(body.get("point_count") or 0),
            last_timestamp=body.get("last_timestamp"),
            open_anomalies=[MonitorPoint.from_body(p) for p in body.get("open_anomalies") or []],
            points=[MonitorPoint.from_body(p) for p in body.get("points") or []],
            forecast=_forecast_of(body, str(body["data_frequency"])),
            webhook_secret=body.get("webhook_secret"),
            false_alarms_per_week=_optional_float(body.get("false_alarms_per_week")),
            sensitivity=None if body.get("sensitivity") is None else int(body["sensitivity"]),
            series_count=int(body.get("series_count") or 0),
            series=[MonitorSeries.from_body(s) for s in body.get("series") or []],
            series_refused=int(body.get("series_refused") or 0),
        )


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class MonitorPage:
    """One page of list_monitors(); pass ``next_after`` as ``after=`` for the next (None on the last page)."""

    monitors: list[Monitor]
    next_after: str | None


@dataclass(frozen=True)
class PointsResult:
    """POST /monitors/{id}/points: the verdict for every point sent (a point already stored with the same value
    is answered as stored and counted in ``duplicate_points``, so a repeated request is harmless)."""

    monitor_id: str
    timestamps: list[str]
    values: list[float]
    expected: list[float]
    lower: list[float]
    upper: list[float]
    score: list[float]
    is_anomaly: list[bool]
    direction: list[str | None]
    warmup_points: int
    new_points: int
    duplicate_points: int
    point_count: int
    rate_limit: RateLimit | None = None
    request_id: str | None = None
    input_tz: tzinfo | None = field(default=None, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.timestamps)

    @property
    def anomalies(self) -> list[int]:
        return [position for position, flagged in enumerate(self.is_anomaly) if flagged]

    def to_pandas(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(
            {
                "value": self.values,
                "expected": self.expected,
                "lower": self.lower,
                "upper": self.upper,
                "score": self.score,
                "is_anomaly": self.is_anomaly,
                "direction": self.direction,
            },
            index=_datetime_index(self.timestamps, self.input_tz),
        )


@dataclass(frozen=True)
class DeliveryAttempt:
    attempt: int
    attempted_at: datetime | None
    duration_ms: float
    status_code: int | None
    error: str | None


@dataclass(frozen=True)
class Delivery:
    """One webhook event of a monitor and every attempt to deliver it."""

    event_id: str
    type: str
    sequence: int
    status: str
    created_at: datetime | None
    next_attempt_at: datetime | None
    delivered_at: datetime | None
    attempts: list[DeliveryAttempt]

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Delivery:
        return cls(
            event_id=str(body["event_id"]),
            type=str(body["type"]),
            sequence=int(body["sequence"]),
            status=str(body["status"]),
            created_at=_instant(body.get("created_at")),
            next_attempt_at=_instant(body.get("next_attempt_at")),
            delivered_at=_instant(body.get("delivered_at")),
            attempts=[
                DeliveryAttempt(
                    attempt=int(a["attempt"]),
                    attempted_at=_instant(a.get("attempted_at")),
                    duration_ms=float(a["duration_ms"]),
                    status_code=a.get("status_code"),
                    error=a.get("error"),
                )
                for a in body.get("attempts") or []
            ],
        )
