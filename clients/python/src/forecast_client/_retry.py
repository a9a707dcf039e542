"""When to try a call again, and after how long."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import httpx

from forecast_client._types import parse_retry_after

# 502 and 504 come from a proxy in front of the service (nginx) when it briefly cannot reach it.
_RETRIED_STATUSES = frozenset({429, 502, 503, 504})
# Failures where the request may not have reached the service, or its answer was lost. Retried for calls a
# repeat cannot double (forecasts and detections are deterministic, reads read, revoking twice is revoking).
_RETRIED_EXCEPTIONS: tuple[type[Exception], ...] = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
)


# The longest a call keeps retrying, in seconds from its start. The service's shortest window is a minute, so a
# key over its per-minute limit is told to retry after up to 60 s (a little more, as Retry-After rounds up); the
# default waits that out with room for the call itself. Hour and day windows ask for longer: such a call raises
# RateLimited at once, with retry_after saying how long.
DEFAULT_RETRY_BUDGET = 90.0


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter (a uniform wait between 0 and ``backoff_base * 2**retry``, capped
    at ``backoff_max``), except that a ``Retry-After`` from the service is waited out exactly.

    ``max_retries`` caps the attempts after the first; ``budget`` caps the time: no retry is started that
    would begin more than ``budget`` seconds after the call began, so a Retry-After longer than what is
    left ends the call at once with the error that carried it. The default budget (DEFAULT_RETRY_BUDGET,
    90 s) outlasts a full per-minute window of the service's rate limits.
    """

    max_retries: int = 3
    budget: float = DEFAULT_RETRY_BUDGET
    backoff_base: float = 0.5
    backoff_max: float = 30.0
    rng: random.Random = field(default_factory=random.Random, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if self.budget < 0 or self.backoff_base < 0 or self.backoff_max < 0:
            raise ValueError("budget, backoff_base and backoff_max must be >= 0")

    def wants_retry(self, response: httpx.Response, *, idempotent: bool = True) -> bool:
        if response.status_code == 429:
            return True  # refused before anything was done
        if not idempotent:
            return False  # a 5xx may come after the service acted (a key created, then the answer lost)
        if response.status_code in _RETRIED_STATUSES:
            return True
        # The service answers "workers saturated" as a 500 with Retry-After; any other 500 is final.
        return response.status_code == 500 and parse_retry_after(response.headers.get("Retry-After")) is not None

    @staticmethod
    def wants_retry_after(exc: Exception, *, idempotent: bool = True) -> bool:
        if not idempotent:
            # Only failures before the request left: no connection, or no pooled connection free.
            return isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)
        return isinstance(exc, _RETRIED_EXCEPTIONS)

    def delay(self, retries_done: int, elapsed: float, retry_after: float | None) -> float | None:
        """Seconds to wait before the next attempt, or None when the count or the time budget is spent."""
        if retries_done >= self.max_retries:
            return None
        if retry_after is not None:
            wait = retry_after
        else:
            wait = self.rng.uniform(0.0, min(self.backoff_max, self.backoff_base * 2**retries_done))
        if elapsed + wait > self.budget:
            return None
        return wait
