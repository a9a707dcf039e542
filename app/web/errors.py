"""One exception hierarchy for every outcome a client can see, mapped to the error envelope here only."""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, Response, current_app, g, jsonify
from flask.typing import ResponseReturnValue
from werkzeug.exceptions import HTTPException

from app import errors as domain

log = logging.getLogger("app.web.errors")


class ApiError(Exception):
    status = 500
    code = "INTERNAL_ERROR"

    def __init__(
        self,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        self.headers = headers or {}


class InvalidRequest(ApiError):
    status = 400
    code = "INVALID_REQUEST"


class PayloadTooLarge(InvalidRequest):
    status = 413

    @classmethod
    def over(cls, limit: int | None) -> PayloadTooLarge:
        """The 413 that names the limit (MAX_BODY_BYTES), worded as the domain's InputTooLarge.over words it."""
        return cls(domain.InputTooLarge.over(limit).message)


class UnsupportedMediaType(InvalidRequest):
    status = 415


class NotFound(InvalidRequest):
    status = 404


class RequestTimeout(InvalidRequest):
    status = 408


class MethodNotAllowed(InvalidRequest):
    status = 405


class DataValidationError(ApiError):
    status = 422
    code = "DATA_VALIDATION_ERROR"


class Unauthorized(ApiError):
    status = 401
    code = "UNAUTHORIZED"

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message, details=details, headers={"WWW-Authenticate": 'Bearer realm="forecast"'})


class Forbidden(ApiError):
    # A missing permission is 403 but keeps the contract's UNAUTHORIZED code (docs/contract.md, Errors).
    status = 403
    code = "UNAUTHORIZED"


class RateLimitExceeded(ApiError):
    status = 429
    code = "RATE_LIMIT_EXCEEDED"


class InternalError(ApiError):
    status = 500
    code = "INTERNAL_ERROR"


class ServiceUnavailable(InternalError):
    """A dependency (database, Redis, forecast workers) did not answer; still a 500 by the contract."""


def error_response(error: ApiError) -> Response:
    body: dict[str, Any] = {"code": error.code, "message": error.message}
    details = dict(error.details or {})
    if error.status >= 500:
        details["request_id"] = g.get("request_id")
    body["details"] = details  # always, if empty: every error has code, message and details (docs/contract.md)
    response = jsonify({"error": body})
    response.status_code = error.status
    for name, value in error.headers.items():
        response.headers[name] = value
    return response


_HTTP_EXCEPTIONS: dict[int, type[ApiError]] = {
    400: InvalidRequest,
    404: NotFound,
    405: MethodNotAllowed,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
}

_HTTP_MESSAGES = {
    400: "The request could not be understood.",
    405: "Method not allowed for this endpoint.",
    415: "The request body must be JSON (Content-Type: application/json).",
}

try:
    from gunicorn.http.errors import ChunkMissingTerminator, InvalidChunkSize, NoMoreData, ParseException
except ImportError:  # served by something else
    _BODY_FRAMING_ERRORS: tuple[type[Exception], ...] = ()
else:
    # Raised out of wsgi.input while a view reads the body: the bytes on the wire are not the body they claim
    # to be (a chunk size that is not hexadecimal, a chunk without its CRLF, bad trailers, a body that ends
    # early). That is the client's request, so a 400, not the 500 of an unexpected exception.
    _BODY_FRAMING_ERRORS = (InvalidChunkSize, ChunkMissingTerminator, NoMoreData, ParseException)


def _from_http_exception(exc: HTTPException) -> ApiError:
    status = exc.code or 500
    error_type = _HTTP_EXCEPTIONS.get(status)
    if error_type is None:
        return InternalError("Unexpected server error.") if status >= 500 else InvalidRequest(
            exc.description or "Invalid request."
        )
    headers = {}
    if status == 405 and hasattr(exc, "valid_methods") and exc.valid_methods:
        headers["Allow"] = ", ".join(sorted(exc.valid_methods))
    if status == 413:
        return PayloadTooLarge.over(current_app.config.get("MAX_CONTENT_LENGTH"))
    message = _endpoint_list() if status == 404 else _HTTP_MESSAGES[status]
    return error_type(message, headers=headers)


def _endpoint_list() -> str:
    # Read from the routes themselves, so the list names every endpoint as the service grows.
    routes = sorted(
        (rule.rule, method)
        for rule in current_app.url_map.iter_rules()
        if rule.endpoint != "static" and not rule.endpoint.endswith(".static")
        # the dashboard's pages are one entry, not a list of its forms and catch-all
        and (not rule.rule.startswith("/dashboard") or rule.rule == "/dashboard/")
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"})
    )
    return "No such endpoint. The endpoints are: " + ", ".join(f"{method} {path}" for path, method in routes) + "."


# The one place a domain error becomes an HTTP outcome. Conflict keeps the contract's 422: the body is readable, its
# request contradicts the state of what it names.
_DOMAIN_ERRORS: tuple[tuple[type[domain.ServiceError], type[ApiError]], ...] = (
    (domain.InputTooLarge, PayloadTooLarge),
    (domain.UnsupportedFormat, UnsupportedMediaType),
    (domain.TimedOut, RequestTimeout),
    (domain.MalformedInput, InvalidRequest),
    (domain.InvalidInput, DataValidationError),
    (domain.Conflict, DataValidationError),
    (domain.NotFound, NotFound),
    (domain.NotPermitted, Forbidden),
    (domain.QuotaExceeded, RateLimitExceeded),
    (domain.Unavailable, ServiceUnavailable),
)


def api_error_for(error: domain.ServiceError) -> ApiError:
    """The HTTP outcome of a domain error (most specific kind first)."""
    headers = {} if error.retry_after is None else {"Retry-After": str(error.retry_after)}
    for kind, api_error in _DOMAIN_ERRORS:
        if isinstance(error, kind):
            return api_error(error.message, details=error.details, headers=headers)
    return InternalError(error.message, details=error.details, headers=headers)


def sentence(text: str) -> str:
    """``text`` ending in exactly one full stop, for messages built around another message."""
    return text if text.endswith((".", "?", "!")) else text + "."


def register_error_handlers(app: Flask) -> None:
    @app.errorhandler(ApiError)
    def _api_error(error: ApiError) -> Response:
        if error.status >= 500:
            log.error("request failed: %s", error.message, exc_info=error.__cause__ is not None)
        return error_response(error)

    @app.errorhandler(domain.ServiceError)
    def _domain_error(error: domain.ServiceError) -> ResponseReturnValue:
        # Re-raised as its ApiError so a blueprint that answers in its own shape (Azure, Nixtla) still answers it.
        api_error = api_error_for(error)
        api_error.__cause__ = error.__cause__
        return current_app.handle_user_exception(api_error)

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response:
        return error_response(_from_http_exception(exc))

    for framing_error in _BODY_FRAMING_ERRORS:
        app.register_error_handler(framing_error, _malformed_body)

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Response:
        # Internals go to the log with the request id, never to the client.
        log.exception("unhandled exception")
        return error_response(InternalError("Unexpected server error. Quote the request id when reporting it."))


def _malformed_body(exc: Exception) -> ResponseReturnValue:
    error = InvalidRequest(
        "The request body could not be read: its chunked encoding or its length is malformed.",
        details={"field": "body", "issue": "malformed body framing", "provided": (str(exc) or type(exc).__name__)[:64]},
    )
    # Answered as the route answers any 400 (the Azure-compatible routes in Azure's shape).
    return current_app.handle_user_exception(error)
