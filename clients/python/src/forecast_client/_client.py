"""Client and AsyncClient: one request builder and response reader, two retry loops (blocking and asyncio)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from types import TracebackType
from typing import IO, Any, Generic, Self, TypeVar
from urllib.parse import quote

import httpx

from forecast_client._batches import (
    Batch,
    BatchFailed,
    BatchTimeout,
    PreparedFrame,
    ProgressBar,
    Records,
    csv_pieces,
    next_poll,
    prepare_frame,
    read_backtest_csv,
    read_forecast_csv,
)
from forecast_client._covariates import (
    CovariateOptions,
    CovariateSummary,
    single_series_covariates,
    split_target,
    with_future_rows,
)
from forecast_client._errors import (
    APIConnectionError,
    APITimeoutError,
    ForecastClientError,
    error_from_response,
)
from forecast_client._retry import DEFAULT_RETRY_BUDGET, RetryPolicy
from forecast_client._series import EncodedSeries, encode_points, encode_series, normalize_frequency
from forecast_client._types import (
    AnomalyResult,
    CreatedKey,
    Delivery,
    ForecastResult,
    KeyInfo,
    KeyUsage,
    LastPointResult,
    ModelInfo,
    Monitor,
    MonitorPage,
    MonitorSeries,
    MonitorSeriesPage,
    PointsResult,
    RateLimit,
    RotatedKey,
    VerifyResult,
    parse_retry_after,
    read_usage,
)

__version__ = "0.1.0"
log = logging.getLogger("forecast_client")

T = TypeVar("T")
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
        # The key goes only into the request headers handed to httpx; repr(), errors and logs never show it.
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
        series: Any, horizon: int, frequency: str | None, confidence: float, model: str | None,
        covariates: CovariateOptions | None = None, target_col: str | None = None,
    ) -> tuple[bytes, dict[str, str], EncodedSeries]:
        exog = None
        if covariates is not None:
            series, exog = split_target(series, target_col)
        encoded = encode_series(series, frequency)
        one: dict[str, Any] = {"timestamps": encoded.timestamps, "values": encoded.values}
        if covariates is not None and (exog is not None or covariates.X_df is not None):
            one["covariates"] = single_series_covariates(exog, covariates, horizon)
        body = {
            "series": [one],
            "forecast_horizon": horizon,
            "data_frequency": encoded.frequency,
            "forecast_frequency": encoded.frequency,
            "confidence": confidence,
            **(covariates.body_fields() if covariates is not None else {}),
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
            covariates=CovariateSummary.from_json(body.get("covariates")),
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
        self, response: httpx.Response, retries_done: int, started: float, request_id: str, call: _Call[Any]
    ) -> float | None:
        if not self.retry_policy.wants_retry(response, idempotent=call.idempotent):
            return None
        retry_after = parse_retry_after(response.headers.get("Retry-After"))
        delay = self.retry_policy.delay(retries_done, time.monotonic() - started, retry_after)
        if delay is not None:
            self._log_retry(response.request, f"status {response.status_code}", delay, retries_done, request_id,
                            retry_after)
        return delay

    def _next_delay_after_exception(
        self, exc: httpx.HTTPError, request: httpx.Request | None, retries_done: int, started: float,
        request_id: str, call: _Call[Any],
    ) -> float | None:
        if not self.retry_policy.wants_retry_after(exc, idempotent=call.idempotent):
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


@dataclass(frozen=True)
class _Call(Generic[T]):
    """One API call, described without doing it: both clients send it and hand the answer to ``read``."""

    method: str
    path: str
    read: Callable[[httpx.Response], T]
    # Bytes, or a factory of pieces for a streamed upload (called afresh for each attempt).
    content: bytes | Callable[[], Iterator[bytes]] | None = None
    headers: Mapping[str, str] | None = None
    params: Mapping[str, Any] | None = None
    # False for calls that create something (a key): a repeat after a lost answer would create it twice, so
    # those are retried only when the service certainly did not act (429, or no connection was made).
    idempotent: bool = True


class _Calls(_Common):
    """Every endpoint as a _Call; Client and AsyncClient only send them."""

    def _verify_call(self) -> _Call[VerifyResult]:
        return _Call("GET", "/verify", self._read_verify)

    def _models_call(self) -> _Call[list[ModelInfo]]:
        return _Call("GET", "/models", self._read_models)

    def _forecast_call(
        self, series: Any, horizon: int, frequency: str | None, confidence: float, model: str | None,
        covariates: CovariateOptions | None = None, target_col: str | None = None,
    ) -> _Call[ForecastResult]:
        content, headers, encoded = self._forecast_body(series, horizon, frequency, confidence, model, covariates,
                                                        target_col)
        return _Call(
            "POST", "/forecast", lambda r: self._read_forecast(r, encoded, confidence, model), content, headers
        )

    def _anomalies_body(
        self, series: Any, frequency: str | None, false_alarms_per_week: float | None, confidence: float | None,
        model: str | None,
    ) -> tuple[bytes, dict[str, str], EncodedSeries]:
        encoded = encode_series(series, frequency, gaps_allowed=True)
        body: dict[str, Any] = {
            "series": [{"timestamps": encoded.timestamps, "values": encoded.values}],
            "data_frequency": encoded.frequency,
        }
        # Whichever threshold setting is given goes as it is (the service refuses more than one, with a 400).
        if false_alarms_per_week is not None:
            body["false_alarms_per_week"] = false_alarms_per_week
        if confidence is not None:
            body["confidence"] = confidence
        headers = {"Content-Type": "application/json"}
        if model is not None:
            headers["X-Model-Id"] = model
        return json.dumps(body, allow_nan=True).encode(), headers, encoded

    def _detect_call(
        self, series: Any, frequency: str | None, false_alarms_per_week: float | None, confidence: float | None,
        model: str | None,
    ) -> _Call[AnomalyResult]:
        content, headers, encoded = self._anomalies_body(series, frequency, false_alarms_per_week, confidence, model)

        def read(response: httpx.Response) -> AnomalyResult:
            body = _json_object(response)
            try:
                return AnomalyResult(
                    timestamps=[str(t) for t in body["timestamps"]],
                    values=encoded.values,
                    expected=[float(v) for v in body["expected"]],
                    lower=[float(v) for v in body["lower_bound"]],
                    upper=[float(v) for v in body["upper_bound"]],
                    score=[float(v) for v in body["anomaly_score"]],
                    is_anomaly=[bool(v) for v in body["is_anomaly"]],
                    direction=list(body["direction"]),
                    warmup_points=int(body["warmup_points"]),
                    period=body["period"],
                    model=response.headers.get("X-Model-Id") or model or "",
                    frequency=encoded.frequency,
                    confidence=confidence,
                    threshold=float(body["threshold"]),
                    fallback=response.headers.get("X-Anomaly-Fallback"),
                    rate_limit=self._note_rate_limit(response),
                    request_id=response.headers.get("X-Request-Id"),
                    input_tz=encoded.tz,
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise UnexpectedResponse(f"anomalies response is missing or mangles {exc}", response) from exc

        return _Call("POST", "/anomalies", read, content, headers)

    def _detect_last_call(
        self, series: Any, frequency: str | None, false_alarms_per_week: float | None, confidence: float | None,
        model: str | None,
    ) -> _Call[LastPointResult]:
        content, headers, encoded = self._anomalies_body(series, frequency, false_alarms_per_week, confidence, model)

        def read(response: httpx.Response) -> LastPointResult:
            body = _json_object(response)
            try:
                return LastPointResult(
                    timestamp=str(body["timestamp"]),
                    value=encoded.values[-1] if encoded.values else None,
                    expected=float(body["expected"]),
                    lower=float(body["lower_bound"]),
                    upper=float(body["upper_bound"]),
                    score=float(body["anomaly_score"]),
                    is_anomaly=bool(body["is_anomaly"]),
                    direction=body["direction"],
                    warmup_points=int(body["warmup_points"]),
                    period=body["period"],
                    model=response.headers.get("X-Model-Id") or model or "",
                    frequency=encoded.frequency,
                    confidence=confidence,
                    threshold=float(body["threshold"]),
                    fallback=response.headers.get("X-Anomaly-Fallback"),
                    rate_limit=self._note_rate_limit(response),
                    request_id=response.headers.get("X-Request-Id"),
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise UnexpectedResponse(f"anomalies/last response is missing or mangles {exc}", response) from exc

        return _Call("POST", "/anomalies/last", read, content, headers)

    # -- keys (an admin key manages its own account's keys) -------------------------------------------------

    def _key_read(self, build: Callable[[dict[str, Any]], T]) -> Callable[[httpx.Response], T]:
        def read(response: httpx.Response) -> T:
            body = _json_object(response)
            self._note_rate_limit(response)
            try:
                return build(body)
            except (KeyError, TypeError, ValueError) as exc:
                raise UnexpectedResponse(f"keys response is missing or mangles {exc}", response) from exc

        return read

    def _list_keys_call(self) -> _Call[list[KeyInfo]]:
        return _Call("GET", "/keys", self._key_read(lambda b: [KeyInfo.from_body(k) for k in b["keys"]]))

    def _get_key_call(self, key_id: str) -> _Call[KeyInfo]:
        return _Call("GET", f"/keys/{_segment(key_id)}", self._key_read(KeyInfo.from_body))

    def _create_key_call(
        self,
        permissions: Iterable[str],
        name: str | None,
        tier: str | None,
        per_minute: int | None,
        per_hour: int | None,
        per_day: int | None,
        expires_at: datetime | str | None,
    ) -> _Call[CreatedKey]:
        if isinstance(permissions, str):
            permissions = [p.strip() for p in permissions.split(",") if p.strip()]
        body: dict[str, Any] = {"permissions": list(permissions)}
        if name is not None:
            body["name"] = name
        if tier is not None:
            body["tier"] = tier
        limits = _limits(per_minute, per_hour, per_day)
        if limits:
            body["limits"] = limits
        if expires_at is not None:
            body["expires_at"] = expires_at if isinstance(expires_at, str) else _aware_iso(expires_at)
        return _Call(
            "POST", "/keys", self._key_read(CreatedKey.from_body), _json_bytes(body), _JSON, idempotent=False
        )

    def _update_key_call(
        self, key_id: str, name: str | None, tier: str | None, per_minute: int | None, per_hour: int | None,
        per_day: int | None,
    ) -> _Call[KeyInfo]:
        body: dict[str, Any] = {}
        if name is not None:
            body["name"] = name
        if tier is not None:
            body["tier"] = tier
        limits = _limits(per_minute, per_hour, per_day)
        if limits:
            body["limits"] = limits
        return _Call("PATCH", f"/keys/{_segment(key_id)}", self._key_read(KeyInfo.from_body), _json_bytes(body), _JSON)

    def _revoke_key_call(self, key_id: str) -> _Call[KeyInfo]:
        # Revoking twice leaves the key revoked: safe to repeat.
        return _Call("POST", f"/keys/{_segment(key_id)}/revoke", self._key_read(KeyInfo.from_body))

    def _rotate_key_call(self, key_id: str, grace_seconds: int | None) -> _Call[RotatedKey]:
        body = {} if grace_seconds is None else {"grace_seconds": grace_seconds}

        def build(b: dict[str, Any]) -> RotatedKey:
            return RotatedKey(new_key=CreatedKey.from_body(b["new_key"]), old_key=KeyInfo.from_body(b["old_key"]))

        return _Call(
            "POST", f"/keys/{_segment(key_id)}/rotate", self._key_read(build), _json_bytes(body), _JSON,
            idempotent=False,
        )

    def _key_usage_call(self, key_id: str, hours: int | None) -> _Call[KeyUsage]:
        params = None if hours is None else {"hours": hours}
        return _Call("GET", f"/keys/{_segment(key_id)}/usage", self._key_read(read_usage), params=params)

    # -- monitors ------------------------------------------------------------------------------------------

    def _monitor_read(self, build: Callable[[dict[str, Any]], T]) -> Callable[[httpx.Response], T]:
        def read(response: httpx.Response) -> T:
            body = _json_object(response)
            self._note_rate_limit(response)
            try:
                return build(body)
            except (KeyError, TypeError, ValueError) as exc:
                raise UnexpectedResponse(f"monitors response is missing or mangles {exc}", response) from exc

        return read

    def _create_monitor_call(
        self, name: str, frequency: str, false_alarms_per_week: float | None, confidence: float | None,
        model: str | None, retention_points: int | None, webhook_url: str | None,
    ) -> _Call[Monitor]:
        body: dict[str, Any] = {"name": name, "data_frequency": normalize_frequency(frequency)}
        optional = {"false_alarms_per_week": false_alarms_per_week, "confidence": confidence, "model": model,
                    "retention_points": retention_points, "webhook_url": webhook_url}
        body.update({k: v for k, v in optional.items() if v is not None})
        return _Call(
            "POST", "/monitors", self._monitor_read(Monitor.from_body), _json_bytes(body), _JSON, idempotent=False
        )

    def _list_monitors_call(self, points: int | None, limit: int | None, after: str | None) -> _Call[MonitorPage]:
        params = {k: v for k, v in {"points": points, "limit": limit, "after": after}.items() if v is not None}

        def build(body: dict[str, Any]) -> MonitorPage:
            return MonitorPage([Monitor.from_body(m) for m in body["monitors"]], body.get("next_after"))

        return _Call("GET", "/monitors", self._monitor_read(build), params=params)

    def _get_monitor_call(
        self, monitor_id: str, points: int | None, horizon: int | None, model: str | None
    ) -> _Call[Monitor]:
        params = {k: v for k, v in {"points": points, "horizon": horizon, "model": model}.items() if v is not None}
        return _Call("GET", f"/monitors/{_segment(monitor_id)}", self._monitor_read(Monitor.from_body), params=params)

    def _update_monitor_call(
        self, monitor_id: str, name: str | None, false_alarms_per_week: float | None, confidence: float | None,
        webhook_url: str | None | _Unset,
    ) -> _Call[Monitor]:
        # The threshold setting given replaces the monitor's other one (the service's rule for PATCH).
        given = {"name": name, "false_alarms_per_week": false_alarms_per_week, "confidence": confidence}
        body: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        if not isinstance(webhook_url, _Unset):
            body["webhook_url"] = webhook_url  # None removes the webhook
        return _Call(
            "PATCH", f"/monitors/{_segment(monitor_id)}", self._monitor_read(Monitor.from_body), _json_bytes(body),
            _JSON,
        )

    def _delete_monitor_call(self, monitor_id: str) -> _Call[None]:
        # Not repeated after the request may have arrived: the repeat of a delete that worked would be a 404.
        return _Call("DELETE", f"/monitors/{_segment(monitor_id)}", self._no_body, idempotent=False)

    def _no_body(self, response: httpx.Response) -> None:
        self._note_rate_limit(response)

    def _add_points_call(self, monitor_id: str, series: Any) -> _Call[PointsResult]:
        timestamps, values, tz = encode_points(series)
        content = json.dumps({"timestamps": timestamps, "values": values}, allow_nan=True).encode()

        def build(body: dict[str, Any]) -> PointsResult:
            return PointsResult(
                monitor_id=str(body["monitor_id"]),
                timestamps=[str(t) for t in body["timestamps"]],
                values=[float(v) for v in body["values"]],
                expected=[float(v) for v in body["expected"]],
                lower=[float(v) for v in body["lower_bound"]],
                upper=[float(v) for v in body["upper_bound"]],
                score=[float(v) for v in body["anomaly_score"]],
                is_anomaly=[bool(v) for v in body["is_anomaly"]],
                direction=list(body["direction"]),
                warmup_points=int(body["warmup_points"]),
                new_points=int(body["new_points"]),
                duplicate_points=int(body["duplicate_points"]),
                point_count=int(body["point_count"]),
                rate_limit=self.rate_limit,
                input_tz=tz,
            )

        def read(response: httpx.Response) -> PointsResult:
            result = self._monitor_read(build)(response)
            return replace(result, request_id=response.headers.get("X-Request-Id"))

        # A repeat is answered from what is stored (duplicate_points): safe to retry.
        return _Call("POST", f"/monitors/{_segment(monitor_id)}/points", read, content, _JSON)

    def _rotate_secret_call(self, monitor_id: str) -> _Call[str]:
        return _Call(
            "POST", f"/monitors/{_segment(monitor_id)}/webhook-secret",
            self._monitor_read(lambda b: str(b["webhook_secret"])), idempotent=False,
        )

    def _list_series_call(self, monitor_id: str, limit: int | None, after: int | None, points: int | None,
                          match: str | None, anomalous: bool) -> _Call[MonitorSeriesPage]:
        params = {k: v for k, v in {"limit": limit, "after": after, "points": points, "match": match,
                                    "anomalous": "true" if anomalous else None}.items() if v is not None}

        def build(body: dict[str, Any]) -> MonitorSeriesPage:
            return MonitorSeriesPage([MonitorSeries.from_body(s) for s in body["series"]], body.get("next_after"))

        return _Call("GET", f"/monitors/{_segment(monitor_id)}/series", self._monitor_read(build), params=params)

    def _get_series_call(self, monitor_id: str, series_id: int, points: int | None, horizon: int | None,
                         model: str | None) -> _Call[MonitorSeries]:
        params = {k: v for k, v in {"points": points, "horizon": horizon, "model": model}.items() if v is not None}
        return _Call("GET", f"/monitors/{_segment(monitor_id)}/series/{int(series_id)}",
                     self._monitor_read(MonitorSeries.from_body), params=params)

    def _deliveries_call(self, monitor_id: str, limit: int | None) -> _Call[list[Delivery]]:
        params = None if limit is None else {"limit": limit}
        return _Call(
            "GET", f"/monitors/{_segment(monitor_id)}/deliveries",
            self._monitor_read(lambda b: [Delivery.from_body(d) for d in b["deliveries"]]), params=params,
        )


class _BatchCalls(_Calls):
    """The batch endpoints as _Calls, and the parts of forecast_many that do no I/O."""

    def _submit_batch_call(
        self, prepared: PreparedFrame, horizon: int, confidence: float, model: str | None,
        covariates: CovariateOptions | None = None,
    ) -> _Call[Batch]:
        params = {"forecast_horizon": horizon, "data_frequency": prepared.frequency,
                  "forecast_frequency": prepared.frequency, "confidence": confidence,
                  **(covariates.query_fields() if covariates is not None else {})}
        headers = {"Content-Type": "text/csv"}
        if model is not None:
            headers["X-Model-Id"] = model
        # Not idempotent: a repeat after a lost answer would submit the batch twice.
        return _Call("POST", "/batches", self._batch_read, lambda: csv_pieces(prepared), headers, params,
                     idempotent=False)

    def _batch_read(self, response: httpx.Response) -> Batch:
        self._note_rate_limit(response)
        try:
            return Batch.from_json(_json_object(response))
        except (KeyError, TypeError, ValueError) as exc:
            raise UnexpectedResponse(f"batch response is missing or mangles {exc}", response) from exc

    def _batch_call(self, batch_id: str) -> _Call[tuple[Batch, float | None]]:
        def read(response: httpx.Response) -> tuple[Batch, float | None]:
            return self._batch_read(response), parse_retry_after(response.headers.get("Retry-After"))

        return _Call("GET", f"/batches/{_segment(batch_id)}", read)

    def _list_batches_call(self, limit: int | None) -> _Call[list[Batch]]:
        def read(response: httpx.Response) -> list[Batch]:
            try:
                return [Batch.from_json(item) for item in _json_object(response)["batches"]]
            except (KeyError, TypeError, ValueError) as exc:
                raise UnexpectedResponse(f"batches response is missing or mangles {exc}", response) from exc

        return _Call("GET", "/batches", read, params={"limit": limit} if limit is not None else None)

    def _cancel_batch_call(self, batch_id: str) -> _Call[None]:
        return _Call("DELETE", f"/batches/{_segment(batch_id)}", self._no_body)

    def _submit_backtest_call(self, prepared: PreparedFrame, horizon: int, n_windows: int, step_size: int | None,
                              models: Iterable[str] | None, confidence: float,
                              covariates: CovariateOptions | None = None) -> _Call[Batch]:
        params: dict[str, Any] = {"kind": "backtest", "forecast_horizon": horizon, "n_windows": n_windows,
                                  "data_frequency": prepared.frequency, "forecast_frequency": prepared.frequency,
                                  "confidence": confidence,
                                  **(covariates.query_fields() if covariates is not None else {})}
        if step_size is not None:
            params["step_size"] = step_size
        if models is not None:
            params["models"] = ",".join(models)
        return _Call("POST", "/batches", self._batch_read, lambda: csv_pieces(prepared), {"Content-Type": "text/csv"},
                     params, idempotent=False)

    def _summary_call(self, batch_id: str) -> _Call[Records]:
        def read(response: httpx.Response) -> Records:
            try:
                return Records({name: value for name, value in model.items() if name != "series"}
                               for model in _json_object(response)["models"])
            except (KeyError, TypeError, AttributeError) as exc:
                raise UnexpectedResponse(f"summary response is missing or mangles {exc}", response) from exc

        return _Call("GET", f"/batches/{_segment(batch_id)}/summary", read)

    @staticmethod
    def _backtest_frame(spool: IO[bytes], prepared: PreparedFrame, confidence: float,
                        names: tuple[str, str, str]) -> Any:
        spool.seek(0)
        return read_backtest_csv(spool, prepared.ids, prepared.tz, confidence, names)

    def _results_call(self, batch_id: str) -> _Call[None]:
        return _Call("GET", f"/batches/{_segment(batch_id)}/results", self._no_body, headers={"Accept": "text/csv"})

    @staticmethod
    def _results_frame(spool: IO[bytes], prepared: PreparedFrame | None, batch_status: str | None) -> Any:
        spool.seek(0)
        frame = read_forecast_csv(spool, prepared.ids if prepared else None, prepared.tz if prepared else None)
        frame.attrs["batch_status"] = batch_status
        return frame

    @staticmethod
    def _prepare(
        df: Any, horizon: int | None, frequency: str | None, id_col: str, time_col: str, value_col: str,
        covariates: CovariateOptions | None = None,
    ) -> PreparedFrame:
        """The frame to upload; ``horizon`` 0 for a backtest (covariates span the series, no future rows)."""
        if horizon is None:
            raise TypeError("forecast_many needs horizon= to submit a frame")
        exog: tuple[str, ...] = ()
        if covariates is not None and hasattr(df, "columns"):
            missing = [name for name in (id_col, time_col, value_col) if name not in df.columns]
            if not missing:
                df, exog = with_future_rows(df, covariates, horizon, id_col, time_col, value_col)
        return prepare_frame(df, frequency, id_col, time_col, value_col, exog,
                             frozenset(covariates.categorical_exog_list) if covariates is not None else frozenset())

    @staticmethod
    def _finished(batch: Batch, failed_series: int) -> None:
        """Raises BatchFailed for a batch that failed or was cancelled; warns of the series that failed."""
        if batch.status in ("failed", "cancelled"):
            raise BatchFailed(batch)
        if failed_series:
            log.warning("batch %s: %d of %d series failed; see frame.attrs['errors']", batch.id, failed_series,
                        batch.total)


class _Unset:
    """Marks an argument not given, where None means something (update_monitor's webhook_url=None removes it)."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()


_JSON = {"Content-Type": "application/json"}


def _json_bytes(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body).encode()


def _limits(per_minute: int | None, per_hour: int | None, per_day: int | None) -> dict[str, int]:
    given = {"per_minute": per_minute, "per_hour": per_hour, "per_day": per_day}
    return {name: value for name, value in given.items() if value is not None}


def _segment(key_id: str) -> str:
    return quote(key_id, safe="")


def _aware_iso(value: datetime) -> str:
    if value.tzinfo is None:
        raise ValueError("expires_at must be timezone-aware (a naive datetime is ambiguous)")
    return value.isoformat()


class Client(_BatchCalls):
    """A blocking client for the forecast service.

    >>> with Client("http://127.0.0.1:8000", api_key="ak_...") as client:
    ...     result = client.forecast(series, horizon=24)

    The key comes from ``api_key`` or the ``FORECAST_API_KEY`` environment variable, the URL from
    ``base_url`` or ``FORECAST_URL``. 429, 502, 503, 504, connection errors, timeouts and a 500 that carries
    Retry-After are retried (see RetryPolicy); any other error raises at once.

    ``max_retries`` (default 3) caps the retries of one call. ``retry_budget`` (seconds, default 90) caps the
    time: no retry starts later than that after the call began, and a Retry-After that would end past it is
    not waited out, the call raises at once (a RateLimited carries ``retry_after``). 90 s waits out a full
    per-minute window (a Retry-After of about 60 s); the hour and day windows ask for more, so a key over
    those raises straight away. ``backoff_base`` and ``backoff_max`` shape the waits when the service gives
    no Retry-After (exponential, full jitter).
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float | httpx.Timeout = 60.0,
        max_retries: int = 3,
        retry_budget: float = DEFAULT_RETRY_BUDGET,
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
        return self._send(self._verify_call())

    def models(self) -> list[ModelInfo]:
        """GET /models: the model ids to pass as ``model=``."""
        return self._send(self._models_call())

    def forecast(
        self,
        series: Any,
        horizon: int,
        *,
        frequency: str | None = None,
        confidence: float = 0.95,
        model: str | None = None,
        target_col: str | None = None,
        X_df: Any = None,  # noqa: N803 -- statsforecast's and TimeGPT's name
        hist_exog_list: Iterable[str] | None = None,
        categorical_exog_list: Iterable[str] | None = None,
        holidays: str | Mapping[str, Any] | None = None,
        calendar_features: Iterable[str] | None = None,
    ) -> ForecastResult:
        """POST /forecast.

        ``series`` is a pandas Series with a DatetimeIndex (or a one-column DataFrame), or a pair
        ``(timestamps, values)`` of datetimes or the service's text form and numbers. ``frequency`` is one of
        Seconds, Minutes, Hours, Daily, Weekly, Monthly, Quarterly, Yearly (or a pandas alias such as "5min");
        when None it is inferred from the index or the timestamps. ``model`` is a model id from ``models()``.

        Covariates, as statsforecast and TimeGPT take them: ``series`` a DataFrame indexed by time whose
        ``target_col`` (default ``y``, else ``value``) is the series and whose other columns are covariates;
        ``X_df`` their values over the horizon (one row per step); ``hist_exog_list`` those known only over the
        history; ``categorical_exog_list`` those whose numbers are categories. ``holidays`` a country code
        ("US") or ``{"country", "subdivision", "window"}``; ``calendar_features`` any of "hour",
        "day_of_week", "month". The result's ``covariates`` says whether the model used them.
        """
        return self._send(self._forecast_call(series, horizon, frequency, confidence, model,
                                              CovariateOptions.of(X_df, hist_exog_list, categorical_exog_list, holidays,
                                                                  calendar_features), target_col))

    def detect_anomalies(
        self,
        series: Any,
        *,
        frequency: str | None = None,
        false_alarms_per_week: float | None = None,
        confidence: float | None = None,
        model: str | None = None,
    ) -> AnomalyResult:
        """POST /anomalies: a verdict for every row. The series may have gaps and jitter; ``frequency`` is its
        nominal spacing (inferred from the typical gap when None). ``false_alarms_per_week`` sets the threshold
        from how many false alarms a normal stream may raise a week (the service's default: one);
        ``confidence`` (0.5-0.9999) instead sets the threshold directly. Give at most one of them (the service
        answers 400 to both). A row is an anomaly when its score is at least ``result.threshold``. ``model`` is
        a detector id."""
        return self._send(self._detect_call(series, frequency, false_alarms_per_week, confidence, model))

    def detect_last_anomaly(
        self,
        series: Any,
        *,
        frequency: str | None = None,
        false_alarms_per_week: float | None = None,
        confidence: float | None = None,
        model: str | None = None,
    ) -> LastPointResult:
        """POST /anomalies/last: the verdict on the last row, judged against the rows before it;
        ``false_alarms_per_week`` and ``confidence`` as for ``detect_anomalies``."""
        return self._send(self._detect_last_call(series, frequency, false_alarms_per_week, confidence, model))

    def list_keys(self) -> list[KeyInfo]:
        """GET /keys (admin): the keys of this key's account."""
        return self._send(self._list_keys_call())

    def get_key(self, key_id: str) -> KeyInfo:
        return self._send(self._get_key_call(key_id))

    def create_key(
        self,
        permissions: Iterable[str],
        *,
        name: str | None = None,
        tier: str | None = None,
        per_minute: int | None = None,
        per_hour: int | None = None,
        per_day: int | None = None,
        expires_at: datetime | str | None = None,
    ) -> CreatedKey:
        """POST /keys (admin): a new key with no permission or limit beyond the caller's. The plain key is in
        ``.key``, this once."""
        return self._send(
            self._create_key_call(permissions, name, tier, per_minute, per_hour, per_day, expires_at)
        )

    def update_key(
        self,
        key_id: str,
        *,
        name: str | None = None,
        tier: str | None = None,
        per_minute: int | None = None,
        per_hour: int | None = None,
        per_day: int | None = None,
    ) -> KeyInfo:
        """PATCH /keys/{id} (admin): rename, change tier or custom limits."""
        return self._send(self._update_key_call(key_id, name, tier, per_minute, per_hour, per_day))

    def revoke_key(self, key_id: str) -> KeyInfo:
        """POST /keys/{id}/revoke (admin): running servers refuse the key within seconds."""
        return self._send(self._revoke_key_call(key_id))

    def rotate_key(self, key_id: str, *, grace_seconds: int | None = None) -> RotatedKey:
        """POST /keys/{id}/rotate (admin): a new key with the same permissions and limits; the old one keeps
        working for ``grace_seconds`` (the service's default when None, 0 revokes it now)."""
        return self._send(self._rotate_key_call(key_id, grace_seconds))

    def key_usage(self, key_id: str, *, hours: int | None = None) -> KeyUsage:
        """GET /keys/{id}/usage (admin): hourly request counts by outcome and the live rate-limit windows."""
        return self._send(self._key_usage_call(key_id, hours))

    def create_monitor(
        self,
        name: str,
        frequency: str,
        *,
        false_alarms_per_week: float | None = None,
        confidence: float | None = None,
        model: str | None = None,
        retention_points: int | None = None,
        webhook_url: str | None = None,
    ) -> Monitor:
        """POST /monitors (write): a stored series judged point by point, alerting ``webhook_url`` (https) on
        anomalies. ``false_alarms_per_week`` or ``confidence`` set its threshold as for ``detect_anomalies``
        (neither: one false alarm a week). The answer carries ``webhook_secret`` when a webhook is set: the only
        time it is shown."""
        return self._send(
            self._create_monitor_call(
                name, frequency, false_alarms_per_week, confidence, model, retention_points, webhook_url
            )
        )

    def list_monitors(
        self, *, points: int | None = None, limit: int | None = None, after: str | None = None
    ) -> MonitorPage:
        """GET /monitors (read): one page; ``points`` last points of each, next page with ``after=next_after``."""
        return self._send(self._list_monitors_call(points, limit, after))

    def get_monitor(
        self, monitor_id: str, *, points: int | None = None, horizon: int | None = None, model: str | None = None
    ) -> Monitor:
        """GET /monitors/{id} (read): with the last ``points`` points and, when ``horizon`` is given, a forecast
        of that many steps from the stored history by ``model`` (a forecast model id)."""
        return self._send(self._get_monitor_call(monitor_id, points, horizon, model))

    def update_monitor(
        self,
        monitor_id: str,
        *,
        name: str | None = None,
        false_alarms_per_week: float | None = None,
        confidence: float | None = None,
        webhook_url: str | None | _Unset = UNSET,
    ) -> Monitor:
        """PATCH /monitors/{id} (write); ``webhook_url=None`` removes the webhook. ``false_alarms_per_week`` or
        ``confidence``, when given, replaces the monitor's threshold setting (the other ones become None)."""
        return self._send(self._update_monitor_call(monitor_id, name, false_alarms_per_week, confidence, webhook_url))

    def delete_monitor(self, monitor_id: str) -> None:
        """DELETE /monitors/{id} (delete permission): the monitor, its points and its alert history."""
        self._send(self._delete_monitor_call(monitor_id))

    def add_points(self, monitor_id: str, series: Any) -> PointsResult:
        """POST /monitors/{id}/points (write): ``series`` as for forecast() (a Series or a (timestamps, values)
        pair), newer than what is stored; every point gets its verdict."""
        return self._send(self._add_points_call(monitor_id, series))

    def rotate_webhook_secret(self, monitor_id: str) -> str:
        """POST /monitors/{id}/webhook-secret (write): a new signing secret, shown this once."""
        return self._send(self._rotate_secret_call(monitor_id))

    def list_series(
        self, monitor_id: str, *, limit: int | None = None, after: int | None = None, points: int | None = None,
        match: str | None = None, anomalous: bool = False,
    ) -> MonitorSeriesPage:
        """GET /monitors/{id}/series (read): one page of the monitor's series (one per label set), each with its
        latest verdict and its last ``points`` points; ``match`` a series selector on their labels
        (``'{instance=~"web-.*"}'``), ``anomalous`` only those with an open incident."""
        return self._send(self._list_series_call(monitor_id, limit, after, points, match, anomalous))

    def get_series(
        self, monitor_id: str, series_id: int, *, points: int | None = None, horizon: int | None = None,
        model: str | None = None,
    ) -> MonitorSeries:
        """GET /monitors/{id}/series/{series_id} (read): one series with its last ``points`` points and verdicts,
        its open anomalies and, when ``horizon`` is given, its forecast."""
        return self._send(self._get_series_call(monitor_id, series_id, points, horizon, model))

    def deliveries(self, monitor_id: str, *, limit: int | None = None) -> list[Delivery]:
        """GET /monitors/{id}/deliveries (read): the webhook events and every attempt to deliver them."""
        return self._send(self._deliveries_call(monitor_id, limit))

    # -- batches -------------------------------------------------------------------------------------------

    def forecast_many(
        self,
        df: Any = None,
        horizon: int | None = None,
        *,
        frequency: str | None = None,
        confidence: float = 0.95,
        model: str | None = None,
        id_col: str = "unique_id",
        time_col: str = "timestamp",
        value_col: str = "value",
        batch_id: str | None = None,
        timeout: float | None = None,
        progress: bool | None = None,
        X_df: Any = None,  # noqa: N803 -- statsforecast's and TimeGPT's name
        hist_exog_list: Iterable[str] | None = None,
        categorical_exog_list: Iterable[str] | None = None,
        holidays: str | Mapping[str, Any] | None = None,
        calendar_features: Iterable[str] | None = None,
    ) -> Any:
        """Forecasts every series of a long frame as one batch and waits for it: a DataFrame in (one row per
        point: ``unique_id``, ``timestamp``, ``value``, like statsforecast's), a DataFrame out (``unique_id``,
        ``timestamp``, ``lower``, ``median``, ``upper``, in submission order).

        Series that fail (too short, a gap...) are not in the frame: ``frame.attrs["errors"]`` lists them, a
        tuple of dicts (``unique_id``, ``code``, ``message``, ``details``), exactly as ``forecast()`` would raise
        for each. ``frame.attrs["batch_id"]`` names the batch. The upload is streamed, so frames of any size
        work.

        ``batch_id`` resumes a batch submitted before (``df`` then only gives back the ids' types and the time
        zone, and may be omitted). ``timeout`` (seconds) raises BatchTimeout, which carries the batch id to
        resume with; the batch goes on. ``progress``: a progress bar on stderr (default: when it is a
        terminal). A batch that fails as a whole, or is cancelled, raises BatchFailed.
        """
        covariates = CovariateOptions.of(X_df, hist_exog_list, categorical_exog_list, holidays, calendar_features)
        prepared = None
        if df is not None:
            prepared = self._prepare(df, horizon, frequency, id_col, time_col, value_col, covariates)
        if batch_id is None:
            if prepared is None:
                raise TypeError("forecast_many needs a frame to submit, or batch_id= to resume")
            submitted = self._send(self._submit_batch_call(prepared, horizon or 0, confidence, model,
                                                                  covariates))
            log.info("submitted batch %s (%d series)", submitted.id, submitted.total)
            batch_id = submitted.id
        batch = self.wait_batch(batch_id, timeout=timeout, progress=progress)
        self._finished(batch, 0)
        frame = self._download(batch_id, prepared, batch.status)
        frame.attrs["batch_id"] = batch_id
        self._finished(batch, len(frame.attrs["errors"]))
        return frame

    def backtest(
        self,
        df: Any,
        horizon: int,
        *,
        n_windows: int = 1,
        step_size: int | None = None,
        models: Iterable[str] | None = None,
        confidence: float = 0.95,
        frequency: str | None = None,
        id_col: str = "unique_id",
        time_col: str = "timestamp",
        value_col: str = "value",
        timeout: float | None = None,
        progress: bool | None = None,
        hist_exog_list: Iterable[str] | None = None,
        categorical_exog_list: Iterable[str] | None = None,
        holidays: str | Mapping[str, Any] | None = None,
        calendar_features: Iterable[str] | None = None,
    ) -> Any:
        """Backtests every series of a long frame as one batch (kind "backtest") and waits for it: each series is
        forecast from ``n_windows`` cut-offs ``step_size`` points apart (default: the horizon), the last window
        ending with the series, by each of ``models`` (default: the service's default model).

        Returns a DataFrame in the shape of statsforecast's ``cross_validation``: ``id_col``, ``time_col``,
        ``cutoff``, ``value_col`` (the actual value), then per model ``<model>``, ``<model>-lo-<level>`` and
        ``<model>-hi-<level>``. ``frame.attrs["summary"]`` holds the M4 scores per model (MASE, sMAPE,
        coverage, MSIS), ``frame.attrs["errors"]`` the series that failed, both tuples of dicts
        (``pd.DataFrame(...)`` makes a frame of either), ``frame.attrs["batch_id"]`` the batch. A batch that
        fails as a whole, or is cancelled, raises BatchFailed."""
        covariates = CovariateOptions.of(None, hist_exog_list, categorical_exog_list, holidays, calendar_features)
        prepared = self._prepare(df, 0, frequency, id_col, time_col, value_col, covariates)
        submitted = self._send(self._submit_backtest_call(prepared, horizon, n_windows, step_size, models,
                                                          confidence, covariates))
        log.info("submitted backtest %s (%d series)", submitted.id, submitted.total)
        batch = self.wait_batch(submitted.id, timeout=timeout, progress=progress)
        self._finished(batch, 0)
        response = self._fetch(self._results_call(submitted.id), stream=True)
        with tempfile.SpooledTemporaryFile(max_size=64 << 20) as spool:
            try:
                for piece in response.iter_bytes():
                    spool.write(piece)
            finally:
                response.close()
            frame = self._backtest_frame(spool, prepared, confidence, (id_col, time_col, value_col))
        frame.attrs["summary"] = self._send(self._summary_call(submitted.id))
        frame.attrs["batch_id"] = submitted.id
        self._finished(batch, len(frame.attrs["errors"]))
        return frame

    def submit_batch(
        self,
        df: Any,
        horizon: int,
        *,
        frequency: str | None = None,
        confidence: float = 0.95,
        model: str | None = None,
        id_col: str = "unique_id",
        time_col: str = "timestamp",
        value_col: str = "value",
        X_df: Any = None,  # noqa: N803 -- statsforecast's and TimeGPT's name
        hist_exog_list: Iterable[str] | None = None,
        categorical_exog_list: Iterable[str] | None = None,
        holidays: str | Mapping[str, Any] | None = None,
        calendar_features: Iterable[str] | None = None,
    ) -> Batch:
        """POST /batches (write): submits the frame (streamed as CSV) and returns at once."""
        covariates = CovariateOptions.of(X_df, hist_exog_list, categorical_exog_list, holidays, calendar_features)
        prepared = self._prepare(df, horizon, frequency, id_col, time_col, value_col, covariates)
        return self._send(self._submit_batch_call(prepared, horizon, confidence, model, covariates))

    def batch(self, batch_id: str) -> Batch:
        """GET /batches/{id} (read): status and progress."""
        return self._send(self._batch_call(batch_id))[0]

    def batches(self, *, limit: int | None = None) -> list[Batch]:
        """GET /batches (read): the account's batches, newest first."""
        return self._send(self._list_batches_call(limit))

    def cancel_batch(self, batch_id: str) -> None:
        """DELETE /batches/{id} (delete): cancels it and deletes its series and results."""
        self._send(self._cancel_batch_call(batch_id))

    def wait_batch(self, batch_id: str, *, timeout: float | None = None, progress: bool | None = None) -> Batch:
        """Polls the batch until it is done, failed or cancelled: soon at first, then further apart (up to 10 s),
        or when the service's Retry-After says. ``timeout`` raises BatchTimeout."""
        bar = ProgressBar(progress)
        started = time.monotonic()
        delay: float | None = None
        try:
            while True:
                batch, retry_after = self._send(self._batch_call(batch_id))
                bar.update(batch)
                if batch.finished:
                    return batch
                delay = next_poll(delay, retry_after)
                if timeout is not None and time.monotonic() - started + delay > timeout:
                    raise BatchTimeout(batch)
                time.sleep(delay)
        finally:
            bar.close()

    def batch_results(self, batch_id: str) -> Any:
        """GET /batches/{id}/results (read) as forecast_many's frame, without waiting: the series finished so
        far when the batch is still running (``frame.attrs["batch_status"]`` says)."""
        frame = self._download(batch_id, None, None)
        frame.attrs["batch_id"] = batch_id
        return frame

    def _download(self, batch_id: str, prepared: PreparedFrame | None, status: str | None) -> Any:
        response = self._fetch(self._results_call(batch_id), stream=True)
        # Spooled to disk past 64 MB: the results of a large batch never sit in memory twice.
        with tempfile.SpooledTemporaryFile(max_size=64 << 20) as spool:
            try:
                for piece in response.iter_bytes():
                    spool.write(piece)
            finally:
                response.close()
            return self._results_frame(spool, prepared, status or response.headers.get("X-Batch-Status"))

    def _send(self, call: _Call[T]) -> T:
        return call.read(self._fetch(call))

    def _fetch(self, call: _Call[Any], *, stream: bool = False) -> httpx.Response:
        """The call's successful answer, after any retries; ``stream``: its body not read yet (close it)."""
        request_id = uuid.uuid4().hex
        # One id for every attempt of a call, so the service's log lines of all of them are found together.
        headers = {**(call.headers or {}), "X-Request-Id": request_id}
        started = time.monotonic()
        retries_done = 0
        while True:
            content = call.content() if callable(call.content) else call.content
            request = self._http.build_request(
                call.method, call.path, content=content, headers=headers, params=call.params
            )
            try:
                response = self._http.send(request, stream=stream)
            except httpx.HTTPError as exc:
                delay = self._next_delay_after_exception(exc, request, retries_done, started, request_id, call)
                if delay is None:
                    if isinstance(exc, httpx.TransportError):
                        raise self._connection_error(exc, request_id, retries_done + 1) from exc
                    raise
            else:
                if response.is_success:
                    return response
                if stream:
                    response.read()
                    response.close()
                delay = self._next_delay_after_response(response, retries_done, started, request_id, call)
                if delay is None:
                    self._note_rate_limit(response)
                    raise error_from_response(response, attempts=retries_done + 1)
            time.sleep(delay)
            retries_done += 1


class AsyncClient(_BatchCalls):
    """The asyncio twin of Client: the same arguments, methods and errors, awaited."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float | httpx.Timeout = 60.0,
        max_retries: int = 3,
        retry_budget: float = DEFAULT_RETRY_BUDGET,
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
        return await self._send(self._verify_call())

    async def models(self) -> list[ModelInfo]:
        return await self._send(self._models_call())

    async def forecast(
        self,
        series: Any,
        horizon: int,
        *,
        frequency: str | None = None,
        confidence: float = 0.95,
        model: str | None = None,
        target_col: str | None = None,
        X_df: Any = None,  # noqa: N803 -- statsforecast's and TimeGPT's name
        hist_exog_list: Iterable[str] | None = None,
        categorical_exog_list: Iterable[str] | None = None,
        holidays: str | Mapping[str, Any] | None = None,
        calendar_features: Iterable[str] | None = None,
    ) -> ForecastResult:
        covariates = CovariateOptions.of(X_df, hist_exog_list, categorical_exog_list, holidays, calendar_features)
        return await self._send(self._forecast_call(series, horizon, frequency, confidence, model, covariates,
                                                    target_col))

    async def detect_anomalies(
        self,
        series: Any,
        *,
        frequency: str | None = None,
        false_alarms_per_week: float | None = None,
        confidence: float | None = None,
        model: str | None = None,
    ) -> AnomalyResult:
        return await self._send(self._detect_call(series, frequency, false_alarms_per_week, confidence, model))

    async def detect_last_anomaly(
        self,
        series: Any,
        *,
        frequency: str | None = None,
        false_alarms_per_week: float | None = None,
        confidence: float | None = None,
        model: str | None = None,
    ) -> LastPointResult:
        return await self._send(self._detect_last_call(series, frequency, false_alarms_per_week, confidence, model))

    async def list_keys(self) -> list[KeyInfo]:
        return await self._send(self._list_keys_call())

    async def get_key(self, key_id: str) -> KeyInfo:
        return await self._send(self._get_key_call(key_id))

    async def create_key(
        self,
        permissions: Iterable[str],
        *,
        name: str | None = None,
        tier: str | None = None,
        per_minute: int | None = None,
        per_hour: int | None = None,
        per_day: int | None = None,
        expires_at: datetime | str | None = None,
    ) -> CreatedKey:
        return await self._send(
            self._create_key_call(permissions, name, tier, per_minute, per_hour, per_day, expires_at)
        )

    async def update_key(
        self,
        key_id: str,
        *,
        name: str | None = None,
        tier: str | None = None,
        per_minute: int | None = None,
        per_hour: int | None = None,
        per_day: int | None = None,
    ) -> KeyInfo:
        return await self._send(self._update_key_call(key_id, name, tier, per_minute, per_hour, per_day))

    async def revoke_key(self, key_id: str) -> KeyInfo:
        return await self._send(self._revoke_key_call(key_id))

    async def rotate_key(self, key_id: str, *, grace_seconds: int | None = None) -> RotatedKey:
        return await self._send(self._rotate_key_call(key_id, grace_seconds))

    async def key_usage(self, key_id: str, *, hours: int | None = None) -> KeyUsage:
        return await self._send(self._key_usage_call(key_id, hours))

    async def create_monitor(
        self,
        name: str,
        frequency: str,
        *,
        false_alarms_per_week: float | None = None,
        confidence: float | None = None,
        model: str | None = None,
        retention_points: int | None = None,
        webhook_url: str | None = None,
    ) -> Monitor:
        return await self._send(
            self._create_monitor_call(
                name, frequency, false_alarms_per_week, confidence, model, retention_points, webhook_url
            )
        )

    async def list_monitors(
        self, *, points: int | None = None, limit: int | None = None, after: str | None = None
    ) -> MonitorPage:
        return await self._send(self._list_monitors_call(points, limit, after))

    async def get_monitor(
        self, monitor_id: str, *, points: int | None = None, horizon: int | None = None, model: str | None = None
    ) -> Monitor:
        return await self._send(self._get_monitor_call(monitor_id, points, horizon, model))

    async def update_monitor(
        self,
        monitor_id: str,
        *,
        name: str | None = None,
        false_alarms_per_week: float | None = None,
        confidence: float | None = None,
        webhook_url: str | None | _Unset = UNSET,
    ) -> Monitor:
        return await self._send(
            self._update_monitor_call(monitor_id, name, false_alarms_per_week, confidence, webhook_url)
        )

    async def delete_monitor(self, monitor_id: str) -> None:
        await self._send(self._delete_monitor_call(monitor_id))

    async def add_points(self, monitor_id: str, series: Any) -> PointsResult:
        return await self._send(self._add_points_call(monitor_id, series))

    async def rotate_webhook_secret(self, monitor_id: str) -> str:
        return await self._send(self._rotate_secret_call(monitor_id))

    async def list_series(
        self, monitor_id: str, *, limit: int | None = None, after: int | None = None, points: int | None = None,
        match: str | None = None, anomalous: bool = False,
    ) -> MonitorSeriesPage:
        return await self._send(self._list_series_call(monitor_id, limit, after, points, match, anomalous))

    async def get_series(
        self, monitor_id: str, series_id: int, *, points: int | None = None, horizon: int | None = None,
        model: str | None = None,
    ) -> MonitorSeries:
        return await self._send(self._get_series_call(monitor_id, series_id, points, horizon, model))

    async def deliveries(self, monitor_id: str, *, limit: int | None = None) -> list[Delivery]:
        return await self._send(self._deliveries_call(monitor_id, limit))

    # -- batches -------------------------------------------------------------------------------------------

    async def forecast_many(
        self,
        df: Any = None,
        horizon: int | None = None,
        *,
        frequency: str | None = None,
        confidence: float = 0.95,
        model: str | None = None,
        id_col: str = "unique_id",
        time_col: str = "timestamp",
        value_col: str = "value",
        batch_id: str | None = None,
        timeout: float | None = None,
        progress: bool | None = None,
        X_df: Any = None,  # noqa: N803 -- statsforecast's and TimeGPT's name
        hist_exog_list: Iterable[str] | None = None,
        categorical_exog_list: Iterable[str] | None = None,
        holidays: str | Mapping[str, Any] | None = None,
        calendar_features: Iterable[str] | None = None,
    ) -> Any:
        """See Client.forecast_many."""
        covariates = CovariateOptions.of(X_df, hist_exog_list, categorical_exog_list, holidays, calendar_features)
        prepared = None
        if df is not None:
            prepared = self._prepare(df, horizon, frequency, id_col, time_col, value_col, covariates)
        if batch_id is None:
            if prepared is None:
                raise TypeError("forecast_many needs a frame to submit, or batch_id= to resume")
            submitted = await self._send(self._submit_batch_call(prepared, horizon or 0, confidence, model,
                                                                  covariates))
            log.info("submitted batch %s (%d series)", submitted.id, submitted.total)
            batch_id = submitted.id
        batch = await self.wait_batch(batch_id, timeout=timeout, progress=progress)
        self._finished(batch, 0)
        frame = await self._download(batch_id, prepared, batch.status)
        frame.attrs["batch_id"] = batch_id
        self._finished(batch, len(frame.attrs["errors"]))
        return frame

    async def backtest(
        self,
        df: Any,
        horizon: int,
        *,
        n_windows: int = 1,
        step_size: int | None = None,
        models: Iterable[str] | None = None,
        confidence: float = 0.95,
        frequency: str | None = None,
        id_col: str = "unique_id",
        time_col: str = "timestamp",
        value_col: str = "value",
        timeout: float | None = None,
        progress: bool | None = None,
        hist_exog_list: Iterable[str] | None = None,
        categorical_exog_list: Iterable[str] | None = None,
        holidays: str | Mapping[str, Any] | None = None,
        calendar_features: Iterable[str] | None = None,
    ) -> Any:
        """See Client.backtest."""
        covariates = CovariateOptions.of(None, hist_exog_list, categorical_exog_list, holidays, calendar_features)
        prepared = self._prepare(df, 0, frequency, id_col, time_col, value_col, covariates)
        submitted = await self._send(self._submit_backtest_call(prepared, horizon, n_windows, step_size, models,
                                                                confidence, covariates))
        log.info("submitted backtest %s (%d series)", submitted.id, submitted.total)
        batch = await self.wait_batch(submitted.id, timeout=timeout, progress=progress)
        self._finished(batch, 0)
        response = await self._fetch(self._results_call(submitted.id), stream=True)
        with tempfile.SpooledTemporaryFile(max_size=64 << 20) as spool:
            try:
                async for piece in response.aiter_bytes():
                    spool.write(piece)
            finally:
                await response.aclose()
            frame = self._backtest_frame(spool, prepared, confidence, (id_col, time_col, value_col))
        frame.attrs["summary"] = await self._send(self._summary_call(submitted.id))
        frame.attrs["batch_id"] = submitted.id
        self._finished(batch, len(frame.attrs["errors"]))
        return frame

    async def submit_batch(
        self,
        df: Any,
        horizon: int,
        *,
        frequency: str | None = None,
        confidence: float = 0.95,
        model: str | None = None,
        id_col: str = "unique_id",
        time_col: str = "timestamp",
        value_col: str = "value",
        X_df: Any = None,  # noqa: N803 -- statsforecast's and TimeGPT's name
        hist_exog_list: Iterable[str] | None = None,
        categorical_exog_list: Iterable[str] | None = None,
        holidays: str | Mapping[str, Any] | None = None,
        calendar_features: Iterable[str] | None = None,
    ) -> Batch:
        covariates = CovariateOptions.of(X_df, hist_exog_list, categorical_exog_list, holidays, calendar_features)
        prepared = self._prepare(df, horizon, frequency, id_col, time_col, value_col, covariates)
        return await self._send(self._submit_batch_call(prepared, horizon, confidence, model, covariates))

    async def batch(self, batch_id: str) -> Batch:
        return (await self._send(self._batch_call(batch_id)))[0]

    async def batches(self, *, limit: int | None = None) -> list[Batch]:
        return await self._send(self._list_batches_call(limit))

    async def cancel_batch(self, batch_id: str) -> None:
        await self._send(self._cancel_batch_call(batch_id))

    async def wait_batch(
        self, batch_id: str, *, timeout: float | None = None, progress: bool | None = None
    ) -> Batch:
        bar = ProgressBar(progress)
        started = time.monotonic()
        delay: float | None = None
        try:
            while True:
                batch, retry_after = await self._send(self._batch_call(batch_id))
                bar.update(batch)
                if batch.finished:
                    return batch
                delay = next_poll(delay, retry_after)
                if timeout is not None and time.monotonic() - started + delay > timeout:
                    raise BatchTimeout(batch)
                await asyncio.sleep(delay)
        finally:
            bar.close()

    async def batch_results(self, batch_id: str) -> Any:
        frame = await self._download(batch_id, None, None)
        frame.attrs["batch_id"] = batch_id
        return frame

    async def _download(self, batch_id: str, prepared: PreparedFrame | None, status: str | None) -> Any:
        response = await self._fetch(self._results_call(batch_id), stream=True)
        with tempfile.SpooledTemporaryFile(max_size=64 << 20) as spool:
            try:
                async for piece in response.aiter_bytes():
                    spool.write(piece)
            finally:
                await response.aclose()
            return self._results_frame(spool, prepared, status or response.headers.get("X-Batch-Status"))

    async def _send(self, call: _Call[T]) -> T:
        return call.read(await self._fetch(call))

    async def _fetch(self, call: _Call[Any], *, stream: bool = False) -> httpx.Response:
        request_id = uuid.uuid4().hex
        headers = {**(call.headers or {}), "X-Request-Id": request_id}
        started = time.monotonic()
        retries_done = 0
        while True:
            content: bytes | AsyncIterator[bytes] | None = (
                _async_pieces(call.content()) if callable(call.content) else call.content
            )
            request = self._http.build_request(
                call.method, call.path, content=content, headers=headers, params=call.params
            )
            try:
                response = await self._http.send(request, stream=stream)
            except httpx.HTTPError as exc:
                delay = self._next_delay_after_exception(exc, request, retries_done, started, request_id, call)
                if delay is None:
                    if isinstance(exc, httpx.TransportError):
                        raise self._connection_error(exc, request_id, retries_done + 1) from exc
                    raise
            else:
                if response.is_success:
                    return response
                if stream:
                    await response.aread()
                    await response.aclose()
                delay = self._next_delay_after_response(response, retries_done, started, request_id, call)
                if delay is None:
                    self._note_rate_limit(response)
                    raise error_from_response(response, attempts=retries_done + 1)
            await asyncio.sleep(delay)
            retries_done += 1


async def _async_pieces(pieces: Iterator[bytes]) -> AsyncIterator[bytes]:
    # httpx's AsyncClient streams only an async iterable; the pieces are made as they are sent.
    for piece in pieces:
        yield piece
