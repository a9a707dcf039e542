"""Work handed to the worker pool from a request: one mapping of pool failures to the 500 envelope."""

from __future__ import annotations

from typing import Any

from app.compute.pool import ClientGone, PoolError, Work, WorkerPool
from app.web.errors import ApiError, InternalError


class ClientClosedRequest(ApiError):
    """The client went away before its answer (nginx's 499): nobody reads it, and it is no server error."""

    status = 499
    code = "CLIENT_CLOSED_REQUEST"


def compute_on_pool(pool: WorkerPool, work: Work, *, failure: str = "") -> Any:
    """The work's result; a pool failure (timeout, crash, busy) is a 500 carrying the request id, with
    Retry-After when waiting helps. ``failure`` prefixes the message ("Anomaly detection failed")."""
    try:
        return pool.submit(work)
    except ClientGone as exc:
        raise ClientClosedRequest(str(exc)) from exc
    except PoolError as exc:
        error = InternalError(f"{failure}: {exc}" if failure else str(exc))
        if exc.retry_after:
            error.headers["Retry-After"] = str(exc.retry_after)
        raise error from exc
