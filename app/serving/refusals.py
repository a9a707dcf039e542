"""The refusals gunicorn's worker answers itself (a request it cannot parse, one too large or too slow to arrive),
in the error envelope every other answer uses: ``{"error": {"code", "message", "details"}}``.

No answer quotes what the client sent: a request line or header may hold an API key.
"""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from gunicorn.http import errors as http_errors

from app.serving.config import ClientLimits
from app.serving.framing import HeadLimits


@dataclass(frozen=True)
class Answer:
    status: int
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def code(self) -> str:
        # 501 (a transfer coding gunicorn does not read) is the client's to change, as every 4xx here.
        return "INTERNAL_ERROR" if self.status == 500 else "INVALID_REQUEST"

    def encode(self) -> bytes:
        error: dict[str, Any] = {"code": self.code, "message": self.message, "details": self.details}
        body = json.dumps({"error": error}).encode()
        reason = HTTPStatus(self.status).phrase
        head = (
            f"HTTP/1.1 {self.status} {reason}\r\n"
            "Connection: close\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n"
            "X-Content-Type-Options: nosniff\r\n"
            "Cache-Control: no-store\r\n"
            "\r\n"
        )
        return head.encode("latin-1") + body


UNEXPECTED = Answer(500, "Unexpected server error.")


def line_too_long(limits: HeadLimits) -> Answer:
    return Answer(400, "The request line is longer than the server accepts.",
                  {"limit_bytes": limits.request_line})


def headers_too_large(limits: HeadLimits) -> Answer:
    return Answer(431, "The request headers are larger than the server accepts.",
                  {"field_limit_bytes": limits.field_size, "fields_limit": limits.fields})


def head_too_slow(limits: ClientLimits) -> Answer:
    return Answer(408, f"The request headers did not arrive within {limits.header_seconds:g} seconds.",
                  {"header_timeout_seconds": limits.header_seconds})


def body_too_slow(limits: ClientLimits) -> Answer:
    return Answer(
        408,
        f"The request body arrived too slowly: it may take {limits.body_seconds:g} seconds plus one second for "
        f"every {limits.body_min_rate:g} bytes.",
        {"body_timeout_seconds": limits.body_seconds, "body_min_bytes_per_second": limits.body_min_rate},
    )


def for_parse_error(exc: BaseException, head_limits: HeadLimits) -> Answer | None:
    """The answer to one of gunicorn's parse errors, or None for anything else (an unexpected error: a 500)."""
    if isinstance(exc, http_errors.LimitRequestLine):
        return line_too_long(head_limits)
    if isinstance(exc, http_errors.LimitRequestHeaders):
        return headers_too_large(head_limits)
    if isinstance(exc, http_errors.UnsupportedTransferCoding):
        return Answer(501, "The request's Transfer-Encoding is not supported; send chunked or a Content-Length.")
    if isinstance(exc, http_errors.ForbiddenProxyRequest):
        return Answer(403, "The request was refused.")
    if isinstance(exc, http_errors.ConfigurationProblem):
        return UNEXPECTED
    if isinstance(exc, (http_errors.InvalidHeader, http_errors.InvalidHeaderName, http_errors.ObsoleteFolding)):
        return Answer(400, "A request header is malformed, repeated where it may not be, or folded.")
    if isinstance(exc, (http_errors.InvalidRequestLine, http_errors.InvalidRequestMethod,
                        http_errors.InvalidHTTPVersion)):
        return Answer(400, "The request line is malformed: expected 'METHOD /path HTTP/1.1'.")
    if isinstance(exc, (http_errors.InvalidProxyLine, http_errors.InvalidSchemeHeaders)):
        return Answer(400, "The request could not be read.")
    if isinstance(exc, ssl.SSLError):
        return Answer(400, "The TLS connection could not be established.")
    return None
