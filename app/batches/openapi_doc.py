"""The batch operations in the service's OpenAPI document (app.web.openapi builds the rest)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.batches.backtest import BacktestBatchRequestSchema
from app.batches.schemas import (
    AnomalyBatchRequestSchema,
    BatchListSchema,
    BatchSchema,
    ForecastBatchRequestSchema,
)
from app.batches.submit import CSV_HEADER, NIXTLA_CSV_HEADER
from app.compute.detect.results import DETECTOR_IDS
from app.compute.forecast.catalog import DEFAULT_MODEL_ID, MODEL_IDS
from app.forecast.schemas import FREQUENCY_ISSUE

BATCH_DESCRIPTION = (
    "A batch runs many series through POST /forecast's (or POST /anomalies') checks and models on the job "
    "workers. Each series counts one request against the key's hour and day windows. A series that fails "
    "carries its own error (the usual envelope) in the results; the rest succeed. Results are deleted "
    "BATCH_RESULT_TTL_HOURS (default 72) after the batch finished. A batch of another account answers 404 "
    "like a missing one. See docs/batches.md."
)


def document(spec: Any, errors: Callable[..., dict[str, Any]], ok_headers: dict[str, Any]) -> None:
    for name, schema in (("ForecastBatchRequest", ForecastBatchRequestSchema),
                         ("AnomalyBatchRequest", AnomalyBatchRequestSchema),
                         ("BacktestBatchRequest", BacktestBatchRequestSchema),
                         ("Batch", BatchSchema), ("BatchList", BatchListSchema)):
        spec.components.schema(name, schema=schema)
    secured = [{"bearerAuth": []}]
    batch_id = {"in": "path", "name": "batch_id", "required": True, "schema": {"type": "string"},
                "description": "A batch of the caller's account."}

    def fail(*statuses: str) -> dict[str, Any]:
        out = errors(*statuses)
        if "404" in out:
            out["404"] = {**out["404"], "description": "INVALID_REQUEST: no such batch in the caller's account."}
        if "413" in out:
            out["413"] = {**out["413"], "description": "INVALID_REQUEST: more series than BATCH_MAX_SERIES, a CSV "
                          "upload over BATCH_MAX_UPLOAD_BYTES, a JSON body over MAX_BODY_BYTES, or a submission "
                          "larger than the account's BATCH_ACCOUNT_QUOTA_BYTES."}
        if "415" in out:
            out["415"] = {**out["415"], "description": "INVALID_REQUEST: the body is neither JSON nor text/csv."}
        if "429" in out:
            out["429"] = {**out["429"], "description": out["429"]["description"] + " A batch that does not fit "
                          "the hour or day window is refused whole; so is one that does not fit the account's "
                          "quota of stored batch data (window \"stored batch data\")."}
        return out

    def operation(op_id: str, summary: str, permission: str, responses: dict[str, Any],
                  parameters: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = {
            "operationId": op_id, "tags": ["Batches"], "summary": summary, "security": secured,
            "description": f"Needs a key with the {permission} permission. " + BATCH_DESCRIPTION,
            "responses": responses,
        }
        if parameters:
            result["parameters"] = parameters
        return result

    def query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
        return {"in": "query", "name": name, "required": False, "schema": schema, "description": description}

    batch_ok = {"description": "The batch.", "headers": ok_headers,
                "content": {"application/json": {"schema": "Batch"}}}
    submit = operation(
        "submitBatch", "Submit many series: JSON, or a CSV upload in long format", "write",
        {"202": {**batch_ok, "description": "Accepted; follow it at Location.",
                 "headers": {**ok_headers, "Location": {"description": "/batches/{id}", "schema": {"type": "string"}}}},
         **fail("400", "401", "403", "413", "415", "429", "500")},
        parameters=[
            {"in": "header", "name": "X-Model-Id", "required": False, "description": "The model (forecasts) or "
             "detector (anomalies) every series uses.",
             "schema": {"type": "string", "enum": [*MODEL_IDS, *DETECTOR_IDS], "default": DEFAULT_MODEL_ID}},
            query("kind", {"type": "string", "enum": ["forecast", "anomalies", "backtest"], "default": "forecast"},
                  "CSV uploads only (JSON carries it in the body)."),
            query("n_windows", {"type": "integer", "minimum": 1, "maximum": 50}, "CSV backtest uploads only."),
            query("step_size", {"type": "integer", "minimum": 1}, "CSV backtest uploads only."),
            query("models", {"type": "string"}, "CSV backtest uploads only: model ids, comma-separated."),
            query("forecast_horizon", {"type": "integer", "minimum": 1, "maximum": 100}, "CSV uploads only."),
            query("data_frequency", {"type": "string"}, "CSV uploads only. " + FREQUENCY_ISSUE + "."),
            query("forecast_frequency", {"type": "string"}, "CSV uploads only; equal to data_frequency."),
            query("confidence", {"type": "number"}, "CSV uploads only."),
            query("false_alarms_per_week", {"type": "number", "minimum": 0.001, "maximum": 1000},
                  "CSV anomaly uploads only."),
            query("sensitivity", {"type": "integer", "minimum": 0, "maximum": 99}, "CSV anomaly uploads only."),
            query("hist_exog_list", {"type": "string"}, "CSV forecast and backtest uploads: covariate columns "
                  "known only over the history, comma-separated (they need no future values)."),
            query("categorical_exog_list", {"type": "string"}, "CSV forecast and backtest uploads: covariate "
                  "columns whose values are categories even when numbers, comma-separated."),
            query("holidays_country", {"type": "string"}, "CSV forecast and backtest uploads: the holidays "
                  "object's country (docs/covariates.md)."),
            query("holidays_subdivision", {"type": "string"}, "CSV uploads: the holidays object's subdivision."),
            query("holidays_window", {"type": "integer", "minimum": 0, "maximum": 7}, "CSV uploads: the holidays "
                  "object's window."),
            query("calendar_features", {"type": "string"}, "CSV forecast and backtest uploads: hour, day_of_week, "
                  "month, comma-separated."),
        ],
    )
    submit["requestBody"] = {"required": True, "content": {
        "application/json": {"schema": {"oneOf": [{"$ref": "#/components/schemas/ForecastBatchRequest"},
                                                  {"$ref": "#/components/schemas/AnomalyBatchRequest"},
                                                  {"$ref": "#/components/schemas/BacktestBatchRequest"}]}},
        "text/csv": {"schema": {"type": "string", "description": "Header " + ",".join(CSV_HEADER) + " (or "
                                + ",".join(NIXTLA_CSV_HEADER) + "), one row "
                                "per point (a row ends at LF, CRLF or a lone CR); unique_id of 1 to 200 characters, "
                                "no field over 131,072 characters, no NUL; the fields go in the query string. "
                                "Further columns are covariates; a forecast batch's future covariate values are "
                                "each series' last forecast_horizon rows, value empty (docs/batches.md)."}},
        "multipart/form-data": {"schema": {
            "type": "object", "required": ["file"],
            "properties": {"file": {"type": "string", "format": "binary",
                                    "description": "The CSV file, as text/csv takes it; the form's one part."}},
            "description": "A form upload of the CSV (curl -F file=@stores.csv), streamed as text/csv is."}},
    }}
    spec.path(path="/batches", operations={
        "post": submit,
        "get": operation(
            "listBatches", "The account's batches, newest first", "read",
            {"200": {"description": "The batches.", "headers": ok_headers,
                     "content": {"application/json": {"schema": "BatchList"}}},
             **fail("400", "401", "403", "429", "500")},
            parameters=[query("limit", {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
                              "Batches to list.")],
        ),
    })
    spec.path(path="/batches/{batch_id}", operations={
        "get": operation("getBatch", "A batch's status and progress", "read",
                         {"200": batch_ok, **fail("400", "401", "403", "404", "429", "500")}, parameters=[batch_id]),
        "delete": operation(
            "cancelBatch", "Cancel a batch and delete its series and results", "delete",
            {"204": {"description": "Cancelled; an unfinished batch stays listed as cancelled until it expires.",
                     "headers": ok_headers}, **fail("400", "401", "403", "404", "429", "500")},
            parameters=[batch_id],
        ),
    })
    spec.path(path="/batches/{batch_id}/results", operations={
        "get": operation(
            "getBatchResults", "The results, streamed in submission order (JSON lines by default, or CSV)", "read",
            {"200": {
                "description": "One JSON object per series (its id and what POST /forecast or POST /anomalies "
                "answers, or its error) or, for Accept: text/csv or ?format=csv, long-format rows "
                "(unique_id,timestamp,lower,median,upper,error for forecasts; unique_id,cutoff,timestamp,actual,"
                "model,lower,median,upper,error for backtests; an id starting with =, +, -, @, a tab, a carriage "
                "return or an apostrophe gets a leading apostrophe). Before the batch is done: the series "
                "finished so far.",
                "headers": {**ok_headers, "X-Batch-Status": {"description": "The batch's status.",
                                                             "schema": {"type": "string"}}},
                "content": {"application/x-ndjson": {"schema": {"type": "string"}},
                            "text/csv": {"schema": {"type": "string"}}},
            }, **fail("400", "401", "403", "404", "429", "500")},
            parameters=[batch_id, query("format", {"type": "string", "enum": ["csv"]}, "csv: the same as "
                                        "Accept: text/csv.")],
        ),
    })
    spec.path(path="/batches/{batch_id}/summary", operations={
        "get": operation(
            "getBacktestSummary", "A backtest's M4 scores per model and per series", "read",
            {"200": {
                "description": "models: per model, the mean MASE, sMAPE, interval coverage and MSIS over the series "
                "with a finite score (series counts them); series: each series' scores per model (null where a "
                "window's history never changed, so MASE has no scale); failed_series. Before the batch is done: "
                "the series finished so far.",
                "headers": {**ok_headers, "X-Batch-Status": {"description": "The batch's status.",
                                                             "schema": {"type": "string"}}},
                "content": {"application/json": {"schema": {"type": "object"}}},
            }, **fail("400", "401", "403", "404", "429", "500")},
            parameters=[batch_id],
        ),
    })
