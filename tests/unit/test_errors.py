"""Domain errors become the contract's envelope in one place, including on routes that answer in their own shape."""

from __future__ import annotations

import pytest
from flask import Flask

from app import errors
from app.web.errors import api_error_for


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (errors.InvalidInput("bad"), 422, "DATA_VALIDATION_ERROR"),
        (errors.Conflict("taken"), 422, "DATA_VALIDATION_ERROR"),
        (errors.MalformedInput("unreadable"), 400, "INVALID_REQUEST"),
        (errors.InputTooLarge("big"), 413, "INVALID_REQUEST"),
        (errors.UnsupportedFormat("zip"), 415, "INVALID_REQUEST"),
        (errors.TimedOut("slow"), 408, "INVALID_REQUEST"),
        (errors.NotFound("gone"), 404, "INVALID_REQUEST"),
        (errors.NotPermitted("no"), 403, "UNAUTHORIZED"),
        (errors.QuotaExceeded("full"), 429, "RATE_LIMIT_EXCEEDED"),
        (errors.Unavailable("down"), 500, "INTERNAL_ERROR"),
        (errors.ServiceError("other"), 500, "INTERNAL_ERROR"),
    ],
)
def test_each_kind_has_one_status(error: errors.ServiceError, status: int, code: str) -> None:
    api_error = api_error_for(error)
    assert (api_error.status, api_error.code, api_error.message) == (status, code, error.message)
    # The caller's own fault is every 4xx, and only those: what a retrying sender must not send again.
    assert error.caller_at_fault == (status < 500)


def test_a_known_wait_becomes_retry_after() -> None:
    assert api_error_for(errors.Unavailable("busy", retry_after=5)).headers == {"Retry-After": "5"}
    assert api_error_for(errors.QuotaExceeded("full", details={"limit": 3})).headers == {}


def test_a_domain_error_answers_in_the_envelope(app: Flask) -> None:
    details = {"field": "covariates", "issue": "too many", "provided": 21}
    with app.test_request_context("/forecast", method="POST"):
        response = app.make_response(app.handle_user_exception(errors.InvalidInput("Too many.", details=details)))
    assert response.status_code == 422
    envelope = {"code": "DATA_VALIDATION_ERROR", "message": "Too many.", "details": details}
    assert response.get_json() == {"error": envelope}
