"""POST /forecast and GET /models in the service's OpenAPI document."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from marshmallow import Schema, fields

from app.compute.forecast.catalog import DEFAULT_MODEL_ID, MODEL_IDS
from app.forecast.schemas import ForecastRequestSchema, ForecastResponseSchema, ForecastSeriesSchema


class ModelSchema(Schema):
    id = fields.String(required=True, metadata={"enum": list(MODEL_IDS)})
    description = fields.String(required=True)
    covariates = fields.Boolean(required=True, metadata={
        "description": "Whether the model takes covariates, holidays and calendar features (docs/covariates.md)."})


class ModelsResponseSchema(Schema):
    models = fields.List(fields.Nested(ModelSchema), required=True)


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


def header(description: str) -> dict[str, Any]:
    return {"description": description, "schema": {"type": "string"}}


def document(spec: Any, errors: Callable[..., dict[str, Any]], ok_headers: dict[str, Any]) -> None:
    # The series of POST /forecast keeps the name it had before it could carry covariates.
    spec.components.schema("Series", schema=ForecastSeriesSchema)
    spec.components.schema("ForecastRequest", schema=ForecastRequestSchema)
    spec.components.schema("ForecastResponse", schema=ForecastResponseSchema)
    spec.components.schema("ModelsResponse", schema=ModelsResponseSchema)
    spec.path(
        path="/forecast",
        operations={
            "post": {
                "operationId": "requestForecast",
                "tags": ["Forecasting"],
                "summary": "Forecast one series",
                "security": [{"bearerAuth": []}],
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
                            "X-Model-Id": header("The model that answered."),
                            "X-Forecast-Fallback": header("Present when a simpler model stood in."),
                            "X-Forecast-Warning": header("Present when the history is short for its frequency."),
                        },
                        "content": {
                            "application/json": {"schema": "ForecastResponse", "example": FORECAST_EXAMPLE_RESPONSE}
                        },
                    },
                    **errors("400", "401", "403", "413", "415", "422", "429", "500"),
                },
            }
        },
    )
    spec.path(
        path="/models",
        operations={
            "get": {
                "tags": ["Forecasting"],
                "summary": "The four models and what each is for (not counted against limits)",
                "security": [{"bearerAuth": []}],
                "responses": {
                    "200": {"description": "The models.", "headers": ok_headers,
                            "content": {"application/json": {"schema": "ModelsResponse"}}},
                    **errors("401", "403", "429", "500"),
                },
            }
        },
    )
