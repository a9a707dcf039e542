"""The long-lived components one app instance owns, reachable from a request through current_services()."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from flask import current_app

if TYPE_CHECKING:
    from huey import Huey

    from app.compute.pool import WorkerPool
    from app.db import Database
    from app.keys.store import KeyStore
    from app.keys.usage import UsageRecorder
    from app.settings import Settings
    from app.web.ratelimit import RateLimits


@dataclass
class Services:
    settings: Settings
    database: Database
    keys: KeyStore
    usage: UsageRecorder
    pool: WorkerPool
    limits: RateLimits
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
