"""Work handed to the worker pool from a request: one mapping of pool failures to the 500 envelope."""

from __future__ import annotations

from typing import Any

from app.compute.pool import PoolError, Work, WorkerPool
from app.web.errors import InternalError


def compute_on_pool(pool: WorkerPool, work: Work, *, failure: str = "") -> Any:
    """The work's result; a pool failure (timeout, crash, busy) is a 500 carrying the request id, with
    Retry-After when waiting helps. ``failure`` prefixes the message ("Anomaly detection failed")."""
    try:
        return pool.submit(work)
    except PoolError as exc:
        error = InternalError(f"{failure}: {exc}" if failure else str(exc))
        if exc.retry_after:
            error.headers["Retry-After"] = str(exc.retry_after)
        raise error from exc
