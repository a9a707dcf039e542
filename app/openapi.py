"""The OpenAPI 3 document, generated from the marshmallow schemas the endpoints validate with."""

from __future__ import annotations

import hashlib
from functools import cache
from typing import TYPE_CHECKING, Any

from flask import Blueprint, Response, current_app, request
from marshmallow import Schema, fields

from app.anomalies import openapi_doc as anomaly_docs
from app.azure import openapi_doc as azure_docs
from app.batches import openapi_doc as batch_docs
from app.compute.forecast.catalog import DEFAULT_MODEL_ID, MODEL_IDS
from app.forecast.schemas import ForecastRequestSchema, ForecastResponseSchema
from app.keys import api as keys_api
from app.monitors import openapi_doc as monitor_docs
from app.verify import VerifyResponseSchema
from app.web.fields import JsonArray
from app.web.pipeline import uncounted
from app.web.validation import ErrorSchema

if TYPE_CHECKING:  # apispec loads when the document is first asked for, not in every admin command
    from apispec import APISpec

bp = Blueprint("openapi", __name__)

API_VERSION = "1.0.0"
KEY_PLACEHOLDER = "<API_KEY>"  # examples never carry anything shaped like a real key


class ModelSchema(Schema):
    id = fields.String(required=True, metadata={"enum": list(MODEL_IDS)})
    description = fields.String(required=True)


class ModelsResponseSchema(Schema):
    models = fields.List(fields.Nested(ModelSchema), required=True)


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


FORECAST_EXAMPLE_REQUEST = {
    "series": [
        {
            "timestamps": [f"2026-01-{d:02d}T00:00:00" for d in range(1, 13)],
            "values": [10, 12, 14, 13, 15, 17, 16, 18, 20, 19, 21, 23],
        }
    ],
    "forecast_horizon": 3,
    "data_frequency": "Daily",
    "forecast_frequency": "Daily",
    "confidence": 0.95,
}
FORECAST_EXAMPLE_RESPONSE = {
    "forecast_timestamps": ["2026-01-13T00:00:00", "2026-01-14T00:00:00", "2026-01-15T00:00:00"],
    "lower_bound": [21.1, 21.6, 22.0],
    "median": [23.9, 24.9, 25.9],
    "upper_bound": [26.7, 28.2, 29.8],
}


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
def build_spec() -> dict[str, Any]:
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
    spec.components.schema("ForecastRequest", schema=ForecastRequestSchema)
    spec.components.schema("ForecastResponse", schema=ForecastResponseSchema)
    spec.components.schema("Error", schema=ErrorSchema)
    spec.components.schema("VerifyResponse", schema=VerifyResponseSchema)
    spec.components.schema("ModelsResponse", schema=ModelsResponseSchema)
    secured = [{"bearerAuth": []}]
    ok_headers = RATE_LIMIT_HEADERS

    spec.path(
        path="/forecast",
        operations={
            "post": {
                "operationId": "requestForecast",
                "tags": ["Forecasting"],
                "summary": "Forecast one series",
                "security": secured,
                "parameters": [
                    {
                        "in": "header",
                        "name": "X-Model-Id",
                        "schema": {"type": "string", "enum": list(MODEL_IDS), "default": DEFAULT_MODEL_ID},
                        "description": "The model to use.",
                    },
                    {
                        "in": "header",
                        "name": "X-Model-Selector",
                        "schema": {"type": "string", "enum": list(MODEL_IDS)},
                        "description": "Alias of X-Model-Id, honoured when X-Model-Id is absent.",
                    },
                ],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": "ForecastRequest", "example": FORECAST_EXAMPLE_REQUEST}
                    },
                },
                "responses": {
                    "200": {
                        "description": "The forecast; four parallel arrays of forecast_horizon entries.",
                        "headers": {
                            **ok_headers,
                            "X-Model-Id": _header("The model that answered."),
                            "X-Forecast-Fallback": _header("Present when a simpler model stood in."),
                            "X-Forecast-Warning": _header("Present when the history is short for its frequency."),
                        },
                        "content": {
                            "application/json": {"schema": "ForecastResponse", "example": FORECAST_EXAMPLE_RESPONSE}
                        },
                    },
                    **_errors("400", "401", "403", "413", "415", "422", "429", "500"),
                },
            }
        },
    )
    keyed_gets = (
        ("/verify", "Authentication", "Check a key, its permissions and its rate-limit status",
         "The key is valid.", "application/json", "VerifyResponse"),
        ("/models", "Forecasting", "The four models and what each is for (not counted against limits)",
         "The models.", "application/json", "ModelsResponse"),
        ("/openapi.json", "Meta", "This document (not counted against limits)",
         "OpenAPI 3 document.", "application/json", {"type": "object"}),
    )
    for path, tag, summary, description, media_type, schema in keyed_gets:
        _keyed_get(spec, path, tag, summary, description, media_type, schema, headers=ok_headers)
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
    keys_api.document(spec, _errors, RATE_LIMIT_HEADERS)
    monitor_docs.document(spec, _errors, RATE_LIMIT_HEADERS)
    anomaly_docs.document(spec, _errors, RATE_LIMIT_HEADERS)
    azure_docs.document(spec, _errors, RATE_LIMIT_HEADERS)
    batch_docs.document(spec, _errors, RATE_LIMIT_HEADERS)
    return spec.to_dict()


@cache
def _served() -> tuple[bytes, str]:
    # Not counted, so serialised once per process: each request is then a copy of the bytes (or a 304).
    body = current_app.json.dumps(build_spec()).encode()
    return body, hashlib.sha256(body).hexdigest()[:32]


@bp.get("/openapi.json")
@uncounted
def openapi_document() -> Response:
    body, etag = _served()
    response = Response(body, mimetype="application/json")
    response.set_etag(etag)
    return response.make_conditional(request)
