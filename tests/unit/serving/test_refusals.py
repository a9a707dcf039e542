"""app.serving.refusals: the answers the worker gives itself, in the error envelope, never quoting the request."""

from __future__ import annotations

import json

import pytest
from gunicorn.http import errors as http_errors

from app.serving import refusals
from app.serving.config import ClientLimits
from app.serving.framing import HeadLimits
from app.web.observability import KEY_SHAPED

KEY = "ak_" + "0123456789abcdef" * 4
HEAD_LIMITS = HeadLimits.of(4094, 100, 16384)


def _parsed(raw: bytes) -> tuple[str, dict[str, str], dict]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines)
    assert int(headers["Content-Length"]) == len(body)
    return status, headers, json.loads(body)


def test_an_answer_is_the_error_envelope_and_closes() -> None:
    status, headers, body = _parsed(refusals.line_too_long(HEAD_LIMITS).encode())
    assert status == "HTTP/1.1 400 Bad Request"
    assert headers["Content-Type"] == "application/json" and headers["Connection"] == "close"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert body == {"error": {"code": "INVALID_REQUEST", "message": "The request line is longer than the server "
                              "accepts.", "details": {"limit_bytes": 4094}}}
    status, _, body = _parsed(refusals.headers_too_large(HEAD_LIMITS).encode())
    assert status == "HTTP/1.1 431 Request Header Fields Too Large" and body["error"]["code"] == "INVALID_REQUEST"
    status, _, body = _parsed(refusals.UNEXPECTED.encode())
    assert status == "HTTP/1.1 500 Internal Server Error" and set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == "INTERNAL_ERROR"
    limits = ClientLimits()
    for answer in (refusals.head_too_slow(limits), refusals.body_too_slow(limits)):
        status, _, body = _parsed(answer.encode())
        assert status == "HTTP/1.1 408 Request Timeout" and body["error"]["code"] == "INVALID_REQUEST"


@pytest.mark.parametrize("exc,status", [
    (http_errors.LimitRequestLine(5000, 4094), 400),
    (http_errors.LimitRequestHeaders("limit request headers fields size"), 431),
    (http_errors.InvalidRequestLine(f"GET /{KEY}"), 400),
    (http_errors.InvalidRequestMethod(KEY.upper()), 400),
    (http_errors.InvalidHTTPVersion(f"HTTP/1.1 {KEY}"), 400),
    (http_errors.InvalidHeader(f"X-Key: {KEY}"), 400),
    (http_errors.InvalidHeaderName(KEY), 400),
    (http_errors.ObsoleteFolding("X-A"), 400),
    (http_errors.UnsupportedTransferCoding("gzip"), 501),
    (http_errors.ForbiddenProxyRequest("10.0.0.1"), 403),
    (http_errors.ConfigurationProblem("x"), 500),
])
def test_gunicorns_refusals_are_answered_without_quoting_the_request(exc: Exception, status: int) -> None:
    answer = refusals.for_parse_error(exc, HEAD_LIMITS)
    assert answer is not None and answer.status == status
    assert not KEY_SHAPED.search(answer.encode().decode("latin-1"))


def test_an_unexpected_error_is_left_to_the_worker() -> None:
    assert refusals.for_parse_error(ValueError("boom"), HEAD_LIMITS) is None
