"""The long-lived components one app instance owns, reachable from a request through current_services().

Each component whose class lives above this module (the key store and usage counting in app.keys, the rate
limiter in app.web) is typed by what its users call of it, a protocol here: every request-side module imports
this one, so it imports none of theirs, not even for a type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Protocol

from flask import current_app

if TYPE_CHECKING:
    from huey import Huey

    from app.api_key import ApiKey
    from app.compute.pool import WorkerPool
    from app.db import Database
    from app.rate_windows import Count, WindowStatus
    from app.settings import Settings


class KeyLookup(Protocol):
    """The key store's cached lookups (app.keys.store.KeyStore)."""

    def lookup(self, plain_key: str) -> ApiKey | None: ...
    def get_by_id(self, key_id: str) -> ApiKey | None: ...
    def forget(self) -> None: ...


class UsageRecording(Protocol):
    """Counting each key's requests, written in batches (app.keys.usage.UsageRecorder)."""

    def record(self, key_id: str, at: datetime | None = None, *, status: int | None = None, count: int = 1) -> None: ...
    def flush(self) -> bool: ...
    def close(self) -> None: ...


class RateLimiting(Protocol):
    """Each key's rolling windows and failed authentications per address (app.web.ratelimit.RateLimits)."""

    def storage_ok(self) -> bool: ...
    def count(self, key: ApiKey) -> Count: ...
    def spend_long_windows(self, key: ApiKey, cost: int) -> Count: ...
    def status(self, key: ApiKey) -> WindowStatus: ...
    def windows(self, key: ApiKey) -> list[WindowStatus]: ...
    def count_failed_authentication(self, address: str) -> Count: ...


@dataclass
class Services:
    settings: Settings
    database: Database
    keys: KeyLookup
    usage: UsageRecording
    pool: WorkerPool
    limits: RateLimiting
    # The job engine is built on first use: a web process needs it only to enqueue, an admin command never,
    # and building it loads Huey and its storage's client.
    build_jobs: Callable[[], Huey]

    @cached_property
    def jobs(self) -> Huey:
        return self.build_jobs()

    def warm_up(self) -> None:
        """What a serving process needs before its first request: the forecast workers spawned, and numpy
        with the timestamp tables loaded (work that the first series would otherwise wait for).
        Admin commands never call this, so they never load numpy."""
        from app.series.regular import prepare_tables

        self.pool.start()
        prepare_tables()

    def close(self) -> None:
        self.usage.close()
        self.pool.close()
        self.database.dispose()


def current_services() -> Services:
    return current_app.extensions["forecast_service"]
