"""The OpenAPI 3 document, generated from the marshmallow schemas the endpoints validate with."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any

from flask import current_app

from app.web.fields import JsonArray
from app.web.validation import ErrorSchema

if TYPE_CHECKING:  # apispec loads when the document is first asked for, not in every admin command
    from apispec import APISpec

Documenter = Callable[[Any, Callable[..., dict[str, Any]], dict[str, Any]], None]

API_VERSION = "1.0.0"
KEY_PLACEHOLDER = "<API_KEY>"  # examples never carry anything shaped like a real key


def _header(description: str, schema_type: str = "string") -> dict[str, Any]:
    return {"description": description, "schema": {"type": schema_type}}


RATE_LIMIT_HEADERS = {
    "X-RateLimit-Limit": _header("Limit of the most constraining window.", "integer"),
    "X-RateLimit-Remaining": _header("Requests left in that window.", "integer"),
    "X-RateLimit-Reset": _header("When a request frees up in that window, epoch seconds.", "integer"),
    "X-Request-Id": _header("Request id; echoed when the client sent a sane one."),
}

ERRORS = {
    "400": ("INVALID_REQUEST: the request's shape (fields, types, ranges, model id).", {}),
    "401": ("UNAUTHORIZED: missing, malformed, unknown, revoked or expired key.", {
        "WWW-Authenticate": _header("Bearer")
    }),
    "403": ("UNAUTHORIZED: the key lacks the permission, or HTTPS is required.", {}),
    "404": ("INVALID_REQUEST: no such endpoint.", {}),
    "413": ("INVALID_REQUEST: body larger than the configured maximum.", {}),
    "415": ("INVALID_REQUEST: Content-Type is not JSON.", {}),
    "422": ("DATA_VALIDATION_ERROR: the series data (lengths, points, timestamps, values).", {}),
    "429": ("RATE_LIMIT_EXCEEDED: details carry limit, reset_time and window.", {
        "Retry-After": _header("Seconds until a request frees up.", "integer")
    }),
    "500": ("INTERNAL_ERROR: unexpected error, forecast timeout or failure, dependency unreachable.", {
        "Retry-After": _header("Present when the forecast workers are saturated.", "integer")
    }),
}

ERROR_EXAMPLES = {
    "400": {"error": {"code": "INVALID_REQUEST", "message": "Invalid request: forecast_horizon: Must be between 1 "
                      "and 100.", "details": {"field": "forecast_horizon", "issue": "Must be between 1 and 100",
                                              "provided": 500}}},
    "422": {"error": {"code": "DATA_VALIDATION_ERROR", "message": "Invalid series data: insufficient data points.",
                      "details": {"field": "series[0]", "issue": "insufficient data points",
                                  "provided": "8 points", "minimum": 10}}},
    "429": {"error": {"code": "RATE_LIMIT_EXCEEDED", "message": "Rate limit exceeded: 50 requests per minute.",
                      "details": {"limit": 50, "reset_time": "2026-11-22T10:01:00Z", "window": "minute"}}},
}


def _errors(*statuses: str) -> dict[str, Any]:
    responses: dict[str, Any] = {}
    for status in statuses:
        description, headers = ERRORS[status]
        content: dict[str, Any] = {"schema": "Error"}
        if status in ERROR_EXAMPLES:
            content["example"] = ERROR_EXAMPLES[status]
        responses[status] = {
            "description": description,
            "headers": {**RATE_LIMIT_HEADERS, **headers},
            "content": {"application/json": content},
        }
    return responses


def _keyed_get(
    spec: APISpec,
    path: str,
    tag: str,
    summary: str,
    description: str,
    media_type: str,
    schema: str | dict[str, Any],
    *,
    headers: dict[str, Any],
) -> None:
    ok: dict[str, Any] = {"description": description, "content": {media_type: {"schema": schema}}}
    if headers:
        ok["headers"] = headers
    spec.path(
        path=path,
        operations={
            "get": {
                "tags": [tag],
                "summary": summary,
                "security": [{"bearerAuth": []}],
                "responses": {"200": ok, **_errors("401", "403", "429", "500")},
            }
        },
    )


@cache
def build_spec(documenters: tuple[Documenter, ...]) -> dict[str, Any]:
    """The document: the service's own endpoints, then each capability's ``document(spec, errors, ok_headers)``
    (the composition root lists them, so this module knows none of the capabilities)."""
    from apispec import APISpec
    from apispec.ext.marshmallow import MarshmallowPlugin

    plugin = MarshmallowPlugin()
    spec = APISpec(
        title="Time Series Forecasting Service",
        version=API_VERSION,
        openapi_version="3.0.3",
        plugins=[plugin],
        info={"description": "Univariate forecasts with a median and a prediction interval, behind API keys."},
    )
    plugin.map_to_openapi_type(JsonArray, "array", None)
    spec.components.security_scheme(
        "bearerAuth", {"type": "http", "scheme": "bearer", "bearerFormat": "ak_ followed by 64 hexadecimal characters"}
    )
    spec.components.schema("Error", schema=ErrorSchema)
    for document in documenters:
        document(spec, _errors, RATE_LIMIT_HEADERS)
    _keyed_get(spec, "/openapi.json", "Meta", "This document (not counted against limits)", "OpenAPI 3 document.",
               "application/json", {"type": "object"}, headers=RATE_LIMIT_HEADERS)
    for path, summary in (("/healthz", "Liveness"), ("/readyz", "Readiness: database, limiter storage, workers")):
        spec.path(
            path=path,
            operations={
                "get": {
                    "tags": ["Meta"],
                    "summary": summary + " (no key, not rate limited)",
                    "security": [],
                    "responses": {
                        "200": {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}},
                        "503": {"description": "Not ready",
                                "content": {"application/json": {"schema": {"type": "object"}}}},
                    },
                }
            },
        )
    _keyed_get(spec, "/metrics", "Meta", "Prometheus metrics (key with admin permission; not counted)",
               "Prometheus text format", "text/plain", {"type": "string"}, headers={})
    return spec.to_dict()


def init_openapi(app: Any, documenters: tuple[Documenter, ...]) -> None:
    app.extensions["openapi_documenters"] = documenters


def current_spec() -> dict[str, Any]:
    """The running app's document (GET /openapi.json, the dashboard's reference page)."""
    return build_spec(current_app.extensions["openapi_documenters"])


def served_document() -> tuple[bytes, str]:
    """GET /openapi.json's body and its ETag: not counted, so serialised once per process and documenters."""
    return _served(current_app.extensions["openapi_documenters"])


@cache
def _served(documenters: tuple[Documenter, ...]) -> tuple[bytes, str]:
    body = current_app.json.dumps(build_spec(documenters)).encode()
    return body, hashlib.sha256(body).hexdigest()[:32]
