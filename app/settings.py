"""Every setting the service reads, from the environment, in one place."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

DEFAULT_DATA_DIR = Path.cwd() / "instance"


def _bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise SystemExit(f"configuration error: {name} must be an integer, got {raw!r}") from exc


def _float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise SystemExit(f"configuration error: {name} must be a number, got {raw!r}") from exc


def _default_database_url() -> str:
    data_dir = Path(os.environ.get("DATA_DIR") or DEFAULT_DATA_DIR).resolve()
    return f"sqlite:///{data_dir / 'forecast.sqlite3'}"


@dataclass(frozen=True)
class Settings:
    database_url: str = field(default_factory=_default_database_url)
    # None keeps rate counters in this process (exact only with one worker process).
    redis_url: str | None = None
    require_https: bool = False
    # How many proxies in front of us may set X-Forwarded-*; 0 trusts none.
    trusted_proxies: int = 0
    max_body_bytes: int = 16 * 1024 * 1024
    max_points: int = 100_000
    forecast_timeout_seconds: float = 30.0
    forecast_workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    # Forecasts allowed to wait for a busy pool before new ones are turned away.
    forecast_queue_limit: int = 8
    # Failed authentications allowed per client address.
    auth_failure_limit: str = "60/minute"
    # How long a replica may trust a cached key lookup.
    key_cache_seconds: float = 5.0
    # Usage counts reach the database at least this often.
    usage_flush_seconds: float = 1.0
    cors_origins: tuple[str, ...] = ()
    # Signs the dashboard's sign-in form tokens; when unset, a generated one is kept in the data directory
    # so tokens survive restarts (set SECRET_KEY when replicas do not share that directory).
    secret_key: str | None = None
    data_dir: Path = field(default_factory=lambda: Path(os.environ.get("DATA_DIR") or DEFAULT_DATA_DIR).resolve())
    log_level: str = "INFO"
    testing: bool = False
    # Monitor webhooks to loopback, private or link-local addresses are refused unless this is set.
    allow_private_webhooks: bool = False
    # Webhook delivery (docs/monitors.md): exponential backoff from the base, each wait capped; an alert not
    # delivered by the maximum age is marked failed; a claimed alert is reserved for its sender for the lease.
    # Monitors one account may keep: each Prometheus-backed one is a read every step, each pushed one a state in
    # every web process's cache.
    max_monitors_per_account: int = 2000
    # Series one monitor may follow (one per label set its query or selector yields); a new one beyond it is
    # refused and counted. A labelled series that gets no point for the retire time is retired (deleted).
    max_series_per_monitor: int = 10_000
    monitor_series_retire_seconds: float = 86_400.0
    monitor_retry_base_seconds: float = 1.0
    monitor_retry_max_delay_seconds: float = 60.0
    monitor_delivery_max_age_seconds: float = 3600.0
    monitor_delivery_lease_seconds: float = 60.0
    monitor_webhook_timeout_seconds: float = 10.0
    # Background job worker processes per `jobs worker` (0: one per core).
    job_workers: int = 0
    # The address people reach this service at (https://forecast.example.com): alerts sent to Alertmanager link
    # back to their monitor with it. Unset, the links are paths.
    public_url: str | None = None
    # How long one read of a Prometheus-backed monitor may take before it counts as a timeout.
    prometheus_timeout_seconds: float = 10.0
    # Batches (docs/batches.md): the most series one batch may hold, the largest CSV upload, how long a
    # finished batch's results are kept, how long a worker's claim on a chunk of series lasts without renewal,
    # and how many series make one chunk (the unit of work, of retry and of result storage).
    batch_max_series: int = 100_000
    batch_max_upload_bytes: int = 1 << 30
    batch_result_ttl_hours: float = 72.0
    batch_lease_seconds: float = 120.0
    batch_chunk_series: int = 50
    # The most batch data (the bytes of its submissions, CSV or JSON) one account may keep stored at once,
    # whatever its keys' rate limits: uploads cost disk until their batches expire or are deleted.
    batch_account_quota_bytes: int = 2 << 30

    @classmethod
    def from_env(cls, **overrides: Any) -> Settings:
        settings = cls(
            database_url=os.environ.get("DATABASE_URL") or _default_database_url(),
            redis_url=os.environ.get("REDIS_URL") or None,
            require_https=_bool("REQUIRE_HTTPS", False),
            trusted_proxies=_int("TRUSTED_PROXIES", 0),
            max_body_bytes=_int("MAX_BODY_BYTES", 16 * 1024 * 1024),
            max_points=_int("MAX_POINTS", 100_000),
            forecast_timeout_seconds=_float("FORECAST_TIMEOUT_SECONDS", 30.0),
            forecast_workers=_int("FORECAST_WORKERS", os.cpu_count() or 1),
            forecast_queue_limit=_int("FORECAST_QUEUE_LIMIT", 8),
            auth_failure_limit=os.environ.get("AUTH_FAILURE_LIMIT") or "60/minute",
            key_cache_seconds=min(_float("KEY_CACHE_SECONDS", 5.0), 5.0),
            usage_flush_seconds=min(_float("USAGE_FLUSH_SECONDS", 1.0), 5.0),
            cors_origins=tuple(o.strip() for o in os.environ.get("CORS_ORIGINS", "").split(",") if o.strip()),
            secret_key=os.environ.get("SECRET_KEY") or None,
            log_level=os.environ.get("LOG_LEVEL", "INFO").upper(),
            allow_private_webhooks=_bool("ALLOW_PRIVATE_WEBHOOKS", False),
            max_monitors_per_account=_int("MAX_MONITORS_PER_ACCOUNT", 2000),
            max_series_per_monitor=_int("MAX_SERIES_PER_MONITOR", 10_000),
            monitor_series_retire_seconds=_float("MONITOR_SERIES_RETIRE_SECONDS", 86_400.0),
            monitor_retry_base_seconds=_float("MONITOR_RETRY_BASE_SECONDS", 1.0),
            monitor_retry_max_delay_seconds=_float("MONITOR_RETRY_MAX_DELAY_SECONDS", 60.0),
            monitor_delivery_max_age_seconds=_float("MONITOR_DELIVERY_MAX_AGE_SECONDS", 3600.0),
            monitor_delivery_lease_seconds=_float("MONITOR_DELIVERY_LEASE_SECONDS", 60.0),
            monitor_webhook_timeout_seconds=_float("MONITOR_WEBHOOK_TIMEOUT_SECONDS", 10.0),
            job_workers=_int("JOB_WORKERS", 0),
            public_url=os.environ.get("PUBLIC_URL") or None,
            prometheus_timeout_seconds=_float("PROMETHEUS_TIMEOUT_SECONDS", 10.0),
            batch_max_series=_int("BATCH_MAX_SERIES", 100_000),
            batch_max_upload_bytes=_int("BATCH_MAX_UPLOAD_BYTES", 1 << 30),
            batch_result_ttl_hours=_float("BATCH_RESULT_TTL_HOURS", 72.0),
            batch_lease_seconds=_float("BATCH_LEASE_SECONDS", 120.0),
            batch_chunk_series=max(1, _int("BATCH_CHUNK_SERIES", 50)),
            batch_account_quota_bytes=_int("BATCH_ACCOUNT_QUOTA_BYTES", 2 << 30),
        )
        return replace(settings, **overrides)

    @property
    def database_url_for_sqlalchemy(self) -> str:
        # Accept the postgres:// and postgresql:// URLs PaaS hosts hand out; we ship psycopg 3.
        url = self.database_url
        for prefix in ("postgres://", "postgresql://"):
            if url.startswith(prefix):
                return "postgresql+psycopg://" + url[len(prefix):]
        return url

    def resolved_secret_key(self) -> str:
        """SECRET_KEY, or a random one generated once and kept (mode 0600) in the data directory."""
        if self.secret_key:
            return self.secret_key
        path = self.data_dir / "secret_key"
        try:
            return path.read_text().strip()
        except FileNotFoundError:
            pass
        import secrets

        path.parent.mkdir(parents=True, exist_ok=True)
        candidate = path.with_suffix(f".{os.getpid()}.tmp")
        descriptor = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_hex(32))
        # link() fails when another process won the race; everyone then reads the winner's secret.
        try:
            os.link(candidate, path)
        except FileExistsError:
            pass
        finally:
            candidate.unlink()
        return path.read_text().strip()

    @property
    def sqlite_path(self) -> Path | None:
        if self.database_url.startswith("sqlite:///"):
            return Path(self.database_url[len("sqlite:///"):])
        return None
