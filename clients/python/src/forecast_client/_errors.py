"""One exception tree mirroring the service's error codes; every API error keeps its status and parsed body."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx

from forecast_client._types import RateLimit, parse_retry_after


class ForecastClientError(Exception):
    """Base of everything this package raises about a call."""

    #: How many HTTP attempts the call made before giving up (1 when it was not retried).
    attempts: int = 1


class APIError(ForecastClientError):
    """The service answered with an error status.

    ``code``, ``message`` and ``details`` come from the error envelope
    ``{"error": {"code", "message", "details"}}``; ``body`` is the whole parsed body (None when it was not
    JSON, as from a proxy in front of the service), ``text`` the raw body in that case.
    """

    def __init__(self, response: httpx.Response, *, attempts: int = 1) -> None:
        self.response = response
        self.status_code = response.status_code
        self.headers = response.headers
        self.attempts = attempts
        self.body: Any = _json_or_none(response)
        envelope = self.body.get("error") if isinstance(self.body, dict) else None
        envelope = envelope if isinstance(envelope, dict) else {}
        self.code: str | None = envelope.get("code") if isinstance(envelope.get("code"), str) else None
        message = envelope.get("message")
        self.message: str = message if isinstance(message, str) else (response.text[:200] or response.reason_phrase)
        details = envelope.get("details")
        self.details: dict[str, Any] = details if isinstance(details, dict) else {}
        self.request_id: str | None = self.details.get("request_id") or response.headers.get("X-Request-Id")
        self.rate_limit: RateLimit | None = RateLimit.from_headers(response.headers)
        super().__init__(self._describe())

    @property
    def text(self) -> str:
        return self.response.text

    def _describe(self) -> str:
        head = f"{self.status_code} {self.code}" if self.code else f"{self.status_code}"
        text = f"{head}: {self.message}"
        hints = [f"{name}={self.details[name]!r}" for name in ("field", "index", "issue") if name in self.details]
        if hints:
            text += " (" + ", ".join(hints) + ")"
        if self.status_code >= 500 and self.request_id:
            text += f" [request id {self.request_id}]"
        return text


class _FieldDetails(APIError):
    """400 and 422 bodies name the first problem in details.field/issue/provided and list all in errors."""

    @property
    def field(self) -> str | None:
        return self.details.get("field")

    @property
    def issue(self) -> str | None:
        return self.details.get("issue")

    @property
    def provided(self) -> Any:
        return self.details.get("provided")

    @property
    def errors(self) -> list[dict[str, Any]]:
        """Every problem found; a single problem is returned as a one-item list."""
        listed = self.details.get("errors")
        if isinstance(listed, list):
            return listed
        return [{k: v for k, v in self.details.items() if k != "errors"}] if self.details else []


class Unauthorized(APIError):
    """401: the key is missing, malformed, unknown, revoked or expired."""


class PermissionDenied(APIError):
    """403: the key is valid but lacks the permission (or the service requires HTTPS)."""

    @property
    def required_permission(self) -> str | None:
        return self.details.get("required_permission")


class RateLimited(APIError):
    """429: a rate-limit window is spent. ``retry_after`` is in seconds, ``reset_time`` when a request frees up."""

    @property
    def retry_after(self) -> float | None:
        return parse_retry_after(self.headers.get("Retry-After"))

    @property
    def reset_time(self) -> datetime | None:
        raw = self.details.get("reset_time")
        if not isinstance(raw, str):
            return None
        try:
            return datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except ValueError:
            return None

    @property
    def limit(self) -> int | None:
        value = self.details.get("limit")
        return value if isinstance(value, int) else None

    @property
    def window(self) -> str | None:
        return self.details.get("window")


class InvalidRequest(_FieldDetails):
    """400, 404, 405, 413, 415 (code INVALID_REQUEST): the request's shape is wrong; never retried."""


class NotFound(InvalidRequest):
    """404: no such endpoint (or object)."""


class MethodNotAllowed(InvalidRequest):
    """405."""


class PayloadTooLarge(InvalidRequest):
    """413: the body is over the service's MAX_BODY_BYTES."""


class UnsupportedMediaType(InvalidRequest):
    """415."""


class DataValidationError(_FieldDetails):
    """422: the series data is wrong. ``index`` is the first bad element, ``field`` the array it is in."""

    @property
    def index(self) -> int | None:
        value = self.details.get("index")
        return value if isinstance(value, int) else None

    @property
    def expected(self) -> str | None:
        return self.details.get("expected")


class ServerError(APIError):
    """5xx. ``request_id`` matches the service's log line; ``retry_after`` is set when the service asked to
    come back later (its forecast workers were saturated)."""

    @property
    def retry_after(self) -> float | None:
        return parse_retry_after(self.headers.get("Retry-After"))


class APIConnectionError(ForecastClientError):
    """No answer: the connection failed or broke, after every retry the policy allowed."""

    def __init__(self, message: str, *, request_id: str, attempts: int) -> None:
        super().__init__(message)
        self.request_id = request_id
        self.attempts = attempts


class APITimeoutError(APIConnectionError):
    """No answer within the timeout, after every retry the policy allowed."""


_BY_STATUS: dict[int, type[APIError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: PermissionDenied,
    404: NotFound,
    405: MethodNotAllowed,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
    422: DataValidationError,
    429: RateLimited,
}


def error_from_response(response: httpx.Response, *, attempts: int = 1) -> APIError:
    status = response.status_code
    error_type = _BY_STATUS.get(status)
    if error_type is None:
        error_type = ServerError if status >= 500 else (InvalidRequest if 400 <= status < 500 else APIError)
    return error_type(response, attempts=attempts)


def _json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None
