"""Request and response shapes of the batch endpoints. A batch's fields are those of POST /forecast (or POST
/anomalies): the batch schemas extend those endpoints' own, so every shared field is checked by the same rules
with the same messages; only ``series`` differs (many, each with an id)."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields, validate

from app.anomalies.schemas import AnomalyRequestSchema, AnomalySeriesSchema
from app.batches.covariates import CATEGORICAL_EXOG_FIELD, HIST_EXOG_FIELD
from app.batches.one_series import FORECAST, KINDS
from app.forecast.schemas import ForecastRequestSchema, ForecastSeriesSchema
from app.series.instants import moment_text
from app.web.fields import StoredText

ID_LENGTH = (1, 200)
KIND_FIELD = fields.String(
    load_default=FORECAST,
    validate=validate.OneOf(KINDS, error="Must be one of: " + ", ".join(KINDS)),
    metadata={"description": "forecast (the default: the fields of POST /forecast), anomalies (the fields of "
              "POST /anomalies) or backtest (the fields of POST /forecast, with n_windows, step_size and models)."},
)
ID_FIELD = StoredText(
    required=True,
    validate=validate.Length(*ID_LENGTH, error="Must be between {min} and {max} characters"),
    metadata={"description": "The series' own name, unique within the batch; results carry it."},
)
SERIES_LIST = {"required": True, "validate": validate.Length(min=1, error="Must contain at least one series.")}


class ForecastBatchSeriesSchema(ForecastSeriesSchema):
    id = ID_FIELD


class AnomalyBatchSeriesSchema(AnomalySeriesSchema):
    id = ID_FIELD


class ForecastBatchRequestSchema(ForecastRequestSchema):
    kind = KIND_FIELD
    series = fields.List(fields.Nested(ForecastBatchSeriesSchema), **SERIES_LIST)
    hist_exog_list = HIST_EXOG_FIELD
    categorical_exog_list = CATEGORICAL_EXOG_FIELD


class AnomalyBatchRequestSchema(AnomalyRequestSchema):
    kind = KIND_FIELD
    series = fields.List(fields.Nested(AnomalyBatchSeriesSchema), **SERIES_LIST)


class ProgressSchema(Schema):
    total = fields.Integer(required=True, metadata={"description": "Series in the batch."})
    done = fields.Integer(required=True, metadata={"description": "Series with a result."})
    failed = fields.Integer(required=True, metadata={"description": "Series whose result is an error."})


class BatchSchema(Schema):
    id = fields.String(required=True)
    kind = fields.String(required=True, metadata={"enum": list(KINDS)})
    status = fields.String(
        required=True,
        metadata={"enum": ["queued", "running", "done", "failed", "cancelled"],
                  "description": "failed: the upload could not be read at all (see error); series that fail on "
                  "their own leave the batch done."},
    )
    progress = fields.Nested(ProgressSchema, required=True)
    model_id = fields.String(required=True, metadata={"description": "The model (or detector) every series uses."})
    parameters = fields.Dict(required=True, metadata={"description": "The batch's request fields."})
    source = fields.String(required=True, metadata={"enum": ["json", "csv"]})
    created_at = fields.String(required=True, metadata={"format": "date-time"})
    updated_at = fields.String(required=True, metadata={"format": "date-time"})
    finished_at = fields.String(allow_none=True, required=True, metadata={"format": "date-time"})
    expires_at = fields.String(
        allow_none=True, required=True,
        metadata={"format": "date-time", "description": "When the batch and its results are deleted."},
    )
    error = fields.Dict(allow_none=True, required=True, metadata={"description": "Why a failed batch failed."})
    results_url = fields.String(required=True)


class BatchListSchema(Schema):
    batches = fields.List(fields.Nested(BatchSchema), required=True)


def batch_json(batch: Any) -> dict[str, Any]:
    def when(moment: Any) -> str | None:
        return None if moment is None else moment_text(moment)  # four-digit years, as everywhere

    return {
        "id": batch.id,
        "kind": batch.kind,
        "status": batch.status,
        "progress": {"total": batch.series_total, "done": batch.series_done, "failed": batch.series_failed},
        "model_id": batch.parameters["headers"]["X-Model-Id"],
        "parameters": batch.parameters["fields"],
        "source": batch.source,
        "created_at": when(batch.created_at),
        "updated_at": when(batch.updated_at),
        "finished_at": when(batch.finished_at),
        "expires_at": when(batch.expires_at),
        "error": batch.error,
        "results_url": f"/batches/{batch.id}/results",
    }
