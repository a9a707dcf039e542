"""The /anomalies operations in the service's OpenAPI document (app.web.openapi builds the rest)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.anomalies.schemas import AnomalyRequestSchema, AnomalyResponseSchema, LastPointResponseSchema
from app.anomalies.service import FALLBACK_HEADER
from app.compute.detect.results import DEFAULT_DETECTOR, DETECTOR_IDS

DESCRIPTION = (
    "Judges every row causally, from the rows before it only, as a live monitor would have: expected value, "
    "expected range, a score in [0, 1] (the probability that the row is not normal), the threshold from the "
    "alarm budget and a direction. Gaps and "
    "jitter in the timestamps are accepted. The first `warmup_points` rows only teach the detector (score 0). "
    "Needs the read permission; counted against the key's rate limits like /forecast."
)
EXAMPLE_REQUEST = {
    "series": [
        {
            "timestamps": [f"2026-01-01T{h:02d}:00:00Z" for h in range(14)],
            "values": [10, 11, 10, 12, 11, 10, 11, 12, 10, 11, 11, 12, 30, 11],
        }
    ],
    "data_frequency": "Hours",
    "false_alarms_per_week": 1,
}
EXAMPLE_LAST = {
    "timestamp": "2026-01-01T13:00:00Z",
    "expected": 12.0,
    "lower_bound": 2.24,
    "upper_bound": 21.76,
    "anomaly_score": 0.0,
    "is_anomaly": False,
    "threshold": 0.994048,
    "direction": None,
    "reason": None,
    "warmup_points": 11,
    "period": None,
}


def document(spec: Any, errors: Callable[..., dict[str, Any]], ok_headers: dict[str, Any]) -> None:
    spec.components.schema("AnomalyRequest", schema=AnomalyRequestSchema)
    spec.components.schema("AnomalyResponse", schema=AnomalyResponseSchema)
    spec.components.schema("AnomalyLastResponse", schema=LastPointResponseSchema)
    headers = {
        **ok_headers,
        "X-Model-Id": {"description": "The detector that answered.", "schema": {"type": "string"}},
        FALLBACK_HEADER: {
            "description": "Present when the default detector failed and the simpler one answered.",
            "schema": {"type": "string"},
        },
    }
    parameters = [
        {
            "in": "header",
            "name": "X-Model-Id",
            "schema": {"type": "string", "enum": list(DETECTOR_IDS), "default": DEFAULT_DETECTOR},
            "description": f"{DETECTOR_IDS[0]}: seasonal and local predictors chosen per row by their recent "
            f"errors, range from the recent errors' own spread (the default). {DETECTOR_IDS[1]}: rolling median "
            "and median absolute deviation (simpler; also the fallback).",
        }
    ]
    for path, op_id, summary, schema, example in (
        ("/anomalies", "detectAnomalies", "Judge every row of one series", "AnomalyResponse", None),
        (
            "/anomalies/last",
            "detectLastAnomaly",
            "Judge the last row of one series",
            "AnomalyLastResponse",
            EXAMPLE_LAST,
        ),
    ):
        content: dict[str, Any] = {"schema": schema}
        if example is not None:
            content["example"] = example
        spec.path(
            path=path,
            operations={
                "post": {
                    "operationId": op_id,
                    "tags": ["Anomaly detection"],
                    "summary": summary,
                    "description": DESCRIPTION,
                    "security": [{"bearerAuth": []}],
                    "parameters": parameters,
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": "AnomalyRequest", "example": EXAMPLE_REQUEST}},
                    },
                    "responses": {
                        "200": {
                            "description": "The verdicts.",
                            "headers": headers,
                            "content": {"application/json": content},
                        },
                        **errors("400", "401", "403", "413", "415", "422", "429", "500"),
                    },
                }
            },
        )
