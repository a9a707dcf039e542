"""Client and AsyncClient: one request builder and response reader, two retry loops (blocking and asyncio)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
from collections.abc import Mapping
from datetime import datetime
from types import TracebackType
from typing import Any, Self

import httpx

from forecast_client._errors import (
    APIConnectionError,
    APITimeoutError,
    ForecastClientError,
    error_from_response,
)
from forecast_client._retry import RetryPolicy
from forecast_client._series import EncodedSeries, encode_series
from forecast_client._types import ForecastResult, ModelInfo, RateLimit, VerifyResult, parse_retry_after

__version__ = "0.1.0"
log = logging.getLogger("forecast_client")

API_KEY_ENV = "FORECAST_API_KEY"
BASE_URL_ENV = "FORECAST_URL"


class UnexpectedResponse(ForecastClientError):
    """A success status whose body is not what the endpoint documents (a proxy page, a different service)."""

    def __init__(self, message: str, response: httpx.Response) -> None:
        super().__init__(message)
        self.response = response
        self.status_code = response.status_code


class _Common:
    """Configuration and the parts of a call that do no I/O, shared by Client and AsyncClient."""

    def __init__(
        self,
        base_url: str | None,
        api_key: str | None,
        *,
        max_retries: int,
        retry_budget: float,
        backoff_base: float,
        backoff_max: float,
    ) -> None:
        url = base_url or os.environ.get(BASE_URL_ENV)
        if not url:
            raise ValueError(f"no service URL: pass base_url or set {BASE_URL_ENV}")
        key = api_key or os.environ.get(API_KEY_ENV)
        if not key:
            raise ValueError(f"no API key: pass api_key or set {API_KEY_ENV}")
        self.base_url = url.rstrip("/")
        self.retry_policy = RetryPolicy(
            max_retries=max_retries, budget=retry_budget, backoff_base=backoff_base, backoff_max=backoff_max
        )
        #: The rate-limit headers of the last answer that carried them (None before the first call).
        self.rate_limit: RateLimit | None = None
        # The key lives only in this header map, which is handed to httpx: no attribute or repr shows it.
        self._headers = {
            "Authorization": f"Bearer {key}",
            "Accept": "application/json",
            "User-Agent": f"forecast-client/{__version__} httpx/{httpx.__version__}",
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.base_url!r})"

    # -- requests ------------------------------------------------------------------------------------------

    @staticmethod
    def _forecast_body(
        series: Any, horizon: int, frequency: str | None, confidence: float, model: str | None
    ) -> tuple[bytes, dict[str, str], EncodedSeries]:
        encoded = encode_series(series, frequency)
        body = {
            "series": [{"timestamps": encoded.timestamps, "values": encoded.values}],
            "forecast_horizon": horizon,
            "data_frequency": encoded.frequency,
            "forecast_frequency": encoded.frequency,
            "confidence": confidence,
        }
        headers = {"Content-Type": "application/json"}
        if model is not None:
            headers["X-Model-Id"] = model
        # allow_nan: an infinite value goes to the service, which names its index in a 422.
        return json.dumps(body, allow_nan=True).encode(), headers, encoded

    # -- responses -----------------------------------------------------------------------------------------

    def _note_rate_limit(self, response: httpx.Response) -> RateLimit | None:
        found = RateLimit.from_headers(response.headers)
        if found is not None:
            self.rate_limit = found
        return found

    def _read_forecast(
        self, response: httpx.Response, encoded: EncodedSeries, confidence: float, model: str | None
    ) -> ForecastResult:
        body = _json_object(response)
        try:
            timestamps = [str(t) for t in body["forecast_timestamps"]]
            median = [float(v) for v in body["median"]]
            lower = [float(v) for v in body["lower_bound"]]
            upper = [float(v) for v in body["upper_bound"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise UnexpectedResponse(f"forecast response is missing or mangles {exc}", response) from exc
        return ForecastResult(
            timestamps=timestamps,
            median=median,
            lower=lower,
            upper=upper,
            model=response.headers.get("X-Model-Id") or model or "",
            frequency=encoded.frequency,
            confidence=confidence,
            fallback=response.headers.get("X-Forecast-Fallback"),
            warning=response.headers.get("X-Forecast-Warning"),
            rate_limit=self._note_rate_limit(response),
            request_id=response.headers.get("X-Request-Id"),
            input_tz=encoded.tz,
        )

    def _read_verify(self, response: httpx.Response) -> VerifyResult:
        body = _json_object(response)
        self._note_rate_limit(response)
        try:
            window = body["rateLimit"]
            rate_limit = RateLimit(
                limit=int(window["limit"]),
                remaining=int(window["remaining"]),
                reset=int(window["resetTime"]) // 1000,  # the body speaks epoch milliseconds
            )
            return VerifyResult(
                message=str(body["message"]),
                permissions=tuple(body["apiKey"]["permissions"]),
                rate_limit=rate_limit,
                timestamp=datetime.fromisoformat(str(body["timestamp"]).replace("Z", "+00:00")),
                request_id=response.headers.get("X-Request-Id"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise UnexpectedResponse(f"verify response is missing or mangles {exc}", response) from exc

    def _read_models(self, response: httpx.Response) -> list[ModelInfo]:
        body = _json_object(response)
        try:
            return [ModelInfo(id=str(item["id"]), description=str(item["description"])) for item in body["models"]]
        except (KeyError, TypeError) as exc:
            raise UnexpectedResponse(f"models response is missing or mangles {exc}", response) from exc

    # -- retries -------------------------------------------------------------------------------------------

    def _next_delay_after_response(
        self, response: httpx.Response, retries_done: int, started: float, request_id: str
    ) -> float | None:
        if not self.retry_policy.wants_retry(response):
            return None
        retry_after = parse_retry_after(response.headers.get("Retry-After"))
        delay = self.retry_policy.delay(retries_done, time.monotonic() - started, retry_after)
        if delay is not None:
            self._log_retry(response.request, f"status {response.status_code}", delay, retries_done, request_id,
                            retry_after)
        return delay

    def _next_delay_after_exception(
        self, exc: httpx.HTTPError, request: httpx.Request | None, retries_done: int, started: float,
        request_id: str,
    ) -> float | None:
        if not self.retry_policy.wants_retry_after(exc):
            return None
        delay = self.retry_policy.delay(retries_done, time.monotonic() - started, None)
        if delay is not None:
            self._log_retry(request, f"{type(exc).__name__}: {exc}", delay, retries_done, request_id, None)
        return delay

    def _log_retry(
        self,
        request: httpx.Request | None,
        reason: str,
        delay: float,
        retries_done: int,
        request_id: str,
        retry_after: float | None,
    ) -> None:
        # Method and path only: the headers (and so the key) are never logged.
        target = f"{request.method} {request.url.path}" if request is not None else "request"
        log.debug(
            "retrying %s after %s in %.2f s (retry %d of %d%s); request id %s",
            target,
            reason,
            delay,
            retries_done + 1,
            self.retry_policy.max_retries,
            ", as Retry-After asked" if retry_after is not None else ", backoff with jitter",
            request_id,
            extra={"request_id": request_id, "retry": retries_done + 1, "delay": delay},
        )

    @staticmethod
    def _connection_error(exc: httpx.HTTPError, request_id: str, attempts: int) -> APIConnectionError:
        error_type = APITimeoutError if isinstance(exc, httpx.TimeoutException) else APIConnectionError
        return error_type(
            f"{type(exc).__name__}: {exc or 'no answer'} after {attempts} attempt(s) [request id {request_id}]",
            request_id=request_id,
            attempts=attempts,
        )


def _json_object(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError as exc:
        raise UnexpectedResponse(f"expected a JSON body, got {response.text[:120]!r}", response) from exc
    if not isinstance(body, dict):
        raise UnexpectedResponse("expected a JSON object", response)
    return body


def _timeout(timeout: float | httpx.Timeout) -> httpx.Timeout:
    if isinstance(timeout, httpx.Timeout):
        return timeout
    return httpx.Timeout(timeout, connect=min(timeout, 10.0))


class Client(_Common):
    """A blocking client for the forecast service.

    >>> with Client("http://127.0.0.1:8000", api_key="ak_...") as client:
    ...     result = client.forecast(series, horizon=24)

    The key comes from ``api_key`` or the ``FORECAST_API_KEY`` environment variable, the URL from
    ``base_url`` or ``FORECAST_URL``. 429, 502, 503, 504, connection errors, timeouts and a 500 that carries
    Retry-After are retried (see RetryPolicy); any other error raises at once.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float | httpx.Timeout = 60.0,
        max_retries: int = 3,
        retry_budget: float = 60.0,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(
            base_url,
            api_key,
            max_retries=max_retries,
            retry_budget=retry_budget,
            backoff_base=backoff_base,
            backoff_max=backoff_max,
        )
        self._http = httpx.Client(
            base_url=self.base_url, headers=self._headers, timeout=_timeout(timeout), transport=transport
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def verify(self) -> VerifyResult:
        """GET /verify: raises Unauthorized for a bad key; spends no rate limit."""
        return self._read_verify(self._call("GET", "/verify"))

    def models(self) -> list[ModelInfo]:
        """GET /models: the model ids to pass as ``model=``."""
        return self._read_models(self._call("GET", "/models"))

    def forecast(
        self,
        series: Any,
        horizon: int,
        *,
        frequency: str | None = None,
        confidence: float = 0.95,
        model: str | None = None,
    ) -> ForecastResult:
        """POST /forecast.

        ``series`` is a pandas Series with a DatetimeIndex (or a one-column DataFrame), or a pair
        ``(timestamps, values)`` of datetimes or the service's text form and numbers. ``frequency`` is one of
        Seconds, Minutes, Hours, Daily, Weekly, Monthly, Quarterly, Yearly (or a pandas alias such as "5min");
        when None it is inferred from the index or the timestamps. ``model`` is a model id from ``models()``.
        """
        content, headers, encoded = self._forecast_body(series, horizon, frequency, confidence, model)
        response = self._call("POST", "/forecast", content=content, headers=headers)
        return self._read_forecast(response, encoded, confidence, model)

    def _call(
        self, method: str, path: str, *, content: bytes | None = None, headers: Mapping[str, str] | None = None
    ) -> httpx.Response:
        request_id = uuid.uuid4().hex
        # One id for every attempt of a call, so the service's log lines of all of them are found together.
        request_headers = {**(headers or {}), "X-Request-Id": request_id}
        started = time.monotonic()
        retries_done = 0
        while True:
            request = self._http.build_request(method, path, content=content, headers=request_headers)
            try:
                response = self._http.send(request)
            except httpx.HTTPError as exc:
                delay = self._next_delay_after_exception(exc, request, retries_done, started, request_id)
                if delay is None:
                    if isinstance(exc, httpx.TransportError):
                        raise self._connection_error(exc, request_id, retries_done + 1) from exc
                    raise
            else:
                if response.is_success:
                    return response
                delay = self._next_delay_after_response(response, retries_done, started, request_id)
                if delay is None:
                    self._note_rate_limit(response)
                    raise error_from_response(response, attempts=retries_done + 1)
            time.sleep(delay)
            retries_done += 1


class AsyncClient(_Common):
    """The asyncio twin of Client: the same arguments, methods and errors, awaited."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float | httpx.Timeout = 60.0,
        max_retries: int = 3,
        retry_budget: float = 60.0,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(
            base_url,
            api_key,
            max_retries=max_retries,
            retry_budget=retry_budget,
            backoff_base=backoff_base,
            backoff_max=backoff_max,
        )
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=self._headers, timeout=_timeout(timeout), transport=transport
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def verify(self) -> VerifyResult:
        return self._read_verify(await self._call("GET", "/verify"))

    async def models(self) -> list[ModelInfo]:
        return self._read_models(await self._call("GET", "/models"))

    async def forecast(
        self,
        series: Any,
        horizon: int,
        *,
        frequency: str | None = None,
        confidence: float = 0.95,
        model: str | None = None,
    ) -> ForecastResult:
        content, headers, encoded = self._forecast_body(series, horizon, frequency, confidence, model)
        response = await self._call("POST", "/forecast", content=content, headers=headers)
        return self._read_forecast(response, encoded, confidence, model)

    async def _call(
        self, method: str, path: str, *, content: bytes | None = None, headers: Mapping[str, str] | None = None
    ) -> httpx.Response:
        request_id = uuid.uuid4().hex
        request_headers = {**(headers or {}), "X-Request-Id": request_id}
        started = time.monotonic()
        retries_done = 0
        while True:
            request = self._http.build_request(method, path, content=content, headers=request_headers)
            try:
                response = await self._http.send(request)
            except httpx.HTTPError as exc:
                delay = self._next_delay_after_exception(exc, request, retries_done, started, request_id)
                if delay is None:
                    if isinstance(exc, httpx.TransportError):
                        raise self._connection_error(exc, request_id, retries_done + 1) from exc
                    raise
            else:
                if response.is_success:
                    return response
                delay = self._next_delay_after_response(response, retries_done, started, request_id)
                if delay is None:
                    self._note_rate_limit(response)
                    raise error_from_response(response, attempts=retries_done + 1)
            await asyncio.sleep(delay)
            retries_done += 1
