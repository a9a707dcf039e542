"""The Azure-compatible operations in the service's OpenAPI document (app.web.openapi builds the rest)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.compat.azure.schemas import (
    SUBSCRIPTION_KEY_HEADER,
    URL_PREFIX,
    AzureErrorSchema,
    ChangePointRequestSchema,
    ChangePointResponseSchema,
    DetectRequestSchema,
    EntireDetectResponseSchema,
    LastDetectResponseSchema,
)

DESCRIPTION = (
    "Azure AI Anomaly Detector (univariate, v1.1) compatible: Azure's request fields, response fields, limits "
    "(12 to 8,640 points) and error body ({code, message} with Azure's codes, also for 401/403/429). The key "
    f"goes in {SUBSCRIPTION_KEY_HEADER}, as Azure's SDKs send it, or as Bearer; it needs the read permission "
    "and is counted like /anomalies."
)
_AZURE_ERRORS = {
    "400": "InvalidSeries, BadArgument, InvalidGranularity, InvalidCustomInterval, InvalidPeriod, InvalidImputeMode, "
    "InvalidImputeFixedValue, RequiredSeries, RequiredGranularity or InvalidJsonFormat.",
    "401": "Unauthorized: missing, unknown, revoked or expired key.",
    "403": "Forbidden: the key lacks the read permission.",
    "413": "BadArgument: body larger than the configured maximum.",
    "415": "InvalidJsonFormat: Content-Type is not JSON.",
    "429": "TooManyRequests: a rate limit of the key is spent (Retry-After says when to retry).",
    "500": "InternalServerError: the message carries the request id.",
}


def document(spec: Any, errors: Callable[..., dict[str, Any]], ok_headers: dict[str, Any]) -> None:
    del errors  # these routes have their own error shape
    spec.components.security_scheme(
        "subscriptionKey", {"type": "apiKey", "in": "header", "name": SUBSCRIPTION_KEY_HEADER}
    )
    for name, schema in (
        ("AzureDetectRequest", DetectRequestSchema),
        ("AzureChangePointRequest", ChangePointRequestSchema),
        ("AzureEntireDetectResponse", EntireDetectResponseSchema),
        ("AzureLastDetectResponse", LastDetectResponseSchema),
        ("AzureChangePointResponse", ChangePointResponseSchema),
        ("AzureError", AzureErrorSchema),
    ):
        spec.components.schema(name, schema=schema)
    error_responses = {
        status: {
            "description": description,
            "headers": {"x-ms-error-code": {"description": "The error code.", "schema": {"type": "string"}}},
            "content": {"application/json": {"schema": "AzureError"}},
        }
        for status, description in _AZURE_ERRORS.items()
    }
    for route, op_id, summary, request, response in (
        ("entire", "azureDetectEntireSeries", "Azure-compatible: judge every point", "AzureDetectRequest",
         "AzureEntireDetectResponse"),
        ("last", "azureDetectLastPoint", "Azure-compatible: judge the last point", "AzureDetectRequest",
         "AzureLastDetectResponse"),
        ("changepoint", "azureDetectChangePoint", "Azure-compatible: find level shifts", "AzureChangePointRequest",
         "AzureChangePointResponse"),
    ):  # fmt: skip
        spec.path(
            path=f"{URL_PREFIX}/timeseries/{route}/detect",
            operations={
                "post": {
                    "operationId": op_id,
                    "tags": ["Azure Anomaly Detector compatibility"],
                    "summary": summary,
                    "description": DESCRIPTION,
                    "security": [{"subscriptionKey": []}, {"bearerAuth": []}],
                    "requestBody": {"required": True, "content": {"application/json": {"schema": request}}},
                    "responses": {
                        "200": {
                            "description": "Azure's response body.",
                            "headers": ok_headers,
                            "content": {"application/json": {"schema": response}},
                        },
                        **error_responses,
                    },
                }
            },
        )
