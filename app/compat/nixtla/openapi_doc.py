"""The Nixtla-compatible operations in the service's OpenAPI document (app.web.openapi builds the rest)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

DESCRIPTION = (
    "For Nixtla's `nixtla` Python client (NixtlaClient 0.9) created with base_url set to this service and one "
    "of its API keys (Bearer). The body is the client's own (all series end to end in series.y, with sizes, "
    "start_datetime and a pandas freq; zstd-compressed above 1 MB); the answer is the shape the client reads. "
    "Forecasts, windows and verdicts are those of POST /forecast, backtest batches and POST /anomalies. "
    "Forecasts and cross-validation take exogenous columns (series.X, series.X_future, hist_exog, "
    "categorical_exog: the client's X_df, hist_exog_list, categorical_exog_list and date_features), as POST "
    "/forecast takes covariates. Fine-tuning, exogenous columns in anomaly detection, feature contributions, "
    "multivariate and model_parameters are refused with 400. Errors are {detail, code}. docs/nixtla.md maps "
    "every option."
)
_NIXTLA_ERRORS = {
    "400": "A field the client sent is out of range, an exogenous column that does not fit the series or holds "
           "a value that is not a finite number, or a refused feature (the detail names it).",
    "401": "Missing, unknown, revoked or expired key.",
    "403": "The key lacks the read permission.",
    "413": "Body (after decompression) larger than the configured maximum.",
    "415": "Content-Type is not JSON, or a Content-Encoding other than zstd.",
    "422": "A series' data is refused as POST /forecast refuses it (the detail names the series by position).",
    "429": "A rate limit of the key is spent; a call counts one request per series.",
}
_OPERATIONS = (
    ("/v2/forecast", "post", "nixtlaForecast",
     "Nixtla-compatible: forecast (h, level, quantiles; exogenous columns in series.X and series.X_future)"),
    ("/v2/cross_validation", "post", "nixtlaCrossValidation",
     "Nixtla-compatible: cross-validation windows (n_windows, step_size, level; exogenous columns in series.X, "
     "past-only ones named by hist_exog), and add_history's in-sample values"),
    ("/v2/anomaly_detection", "post", "nixtlaAnomalyDetection", "Nixtla-compatible: judge every row (level)"),
    ("/v2/online_anomaly_detection", "post", "nixtlaOnlineAnomalyDetection",
     "Nixtla-compatible: judge the last detection_size rows (level)"),
    ("/validate_api_key", "get", "nixtlaValidateApiKey", "Nixtla-compatible: is the key valid (not counted)"),
    ("/model_params", "get", "nixtlaModelParams", "Nixtla-compatible: input size and horizon (not counted)"),
    ("/v2/models", "get", "nixtlaModels", "Nixtla-compatible: the model names the client may pass"),
)


def document(spec: Any, errors: Callable[..., dict[str, Any]], ok_headers: dict[str, Any]) -> None:
    del errors  # these routes have their own error shape
    spec.components.schema("NixtlaError", {
        "type": "object", "required": ["detail", "code"],
        "properties": {"detail": {"type": "string"}, "code": {"type": "string"}},
    })
    error_responses = {status: {"description": text, "content": {"application/json": {"schema": "NixtlaError"}}}
                       for status, text in _NIXTLA_ERRORS.items()}
    for path, method, op_id, summary in _OPERATIONS:
        operation: dict[str, Any] = {
            "operationId": op_id,
            "tags": ["Nixtla client compatibility"],
            "summary": summary,
            "description": DESCRIPTION,
            "security": [{"bearerAuth": []}],
            "responses": {
                "200": {"description": "The body the client reads.", "headers": ok_headers,
                        "content": {"application/json": {"schema": {"type": "object"}}}},
                **error_responses,
            },
        }
        if method == "post":
            operation["requestBody"] = {"required": True, "content": {"application/json": {
                "schema": {"type": "object", "description": "The nixtla client's body."}}}}
        spec.path(path=path, operations={method: operation})
