"""Work handed to the worker pool from a request: one mapping of pool failures to the 500 envelope."""

from __future__ import annotations

from typing import Any

from app.compute.pool import Job, PoolError, WorkerPool
from app.web.errors import InternalError


def run_job(pool: WorkerPool, job: Job, *, failure: str = "") -> Any:
    """The job's result; a pool failure (timeout, crash, busy) is a 500 carrying the request id, with
    Retry-After when waiting helps. ``failure`` prefixes the message ("Anomaly detection failed")."""
    try:
        return pool.submit(job)
    except PoolError as exc:
        error = InternalError(f"{failure}: {exc}" if failure else str(exc))
        if exc.retry_after:
            error.headers["Retry-After"] = str(exc.retry_after)
        raise error from exc
