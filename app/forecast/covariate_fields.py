"""The covariate, holiday and calendar fields of a POST /forecast body and of its answer (docs/covariates.md).

Shape only (types, required fields), answered 400; the values' rules are app.forecast.covariates', answered 422.
Inside a covariate and the holidays object an unknown field is refused, not ignored: a misspelt ``future`` would
otherwise turn a covariate known ahead into one known only in the past without a word.
"""

from __future__ import annotations

from marshmallow import RAISE, Schema, fields

from app.forecast.calendar import DEFAULT_WINDOW, WINDOW_RANGE
from app.forecast.covariates import MAX_CATEGORIES, MAX_NAME_LENGTH
from app.web.fields import JsonArray

VALUE_ITEMS = {"oneOf": [{"type": "number"}, {"type": "string"}]}


class CovariateSchema(Schema):
    class Meta:
        unknown = RAISE

    name = fields.String(required=True,
                         metadata={"description": f"Distinct within the series, 1 to {MAX_NAME_LENGTH} characters."})
    history = JsonArray(
        required=True,
        metadata={
            "description": "One value per timestamp of the series: all finite numbers, or all strings (a "
            f"categorical covariate, one-hot, 2 to {MAX_CATEGORIES} distinct values). No nulls.",
            "items": VALUE_ITEMS,
        },
    )
    future = JsonArray(
        allow_none=True,
        load_default=None,
        metadata={
            "description": "One value per forecast period, of the history's kind. Left out (or null): the "
            "covariate is known only in the past and enters lagged by the horizon.",
            "items": VALUE_ITEMS,
        },
    )


class HolidaysSchema(Schema):
    class Meta:
        unknown = RAISE

    country = fields.String(required=True, metadata={"description": "A country code of the holidays package "
                                                     "(ISO 3166-1, e.g. US, GB, DE)."})
    subdivision = fields.String(allow_none=True, load_default=None,
                                metadata={"description": "A subdivision of the country (state, province), e.g. CA."})
    window = fields.Integer(strict=True, load_default=DEFAULT_WINDOW,
                            metadata={"description": "Days either side of a holiday counted as near it, "
                                      f"{WINDOW_RANGE[0]} to {WINDOW_RANGE[1]}.", "minimum": WINDOW_RANGE[0],
                                      "maximum": WINDOW_RANGE[1]})


class HolidayInHorizonSchema(Schema):
    date = fields.String(required=True, metadata={"format": "date"})
    name = fields.String(required=True)


class CovariatesAnswerSchema(Schema):
    used = fields.Boolean(required=True, metadata={"description": "Whether the forecast uses them; false: the "
                                                   "univariate forecast answered (note says why)."})
    names = fields.List(fields.String(), required=True, metadata={"description": "The design columns."})
    note = fields.String(required=True, allow_none=True)
    holidays_in_horizon = fields.List(fields.Nested(HolidayInHorizonSchema), required=True)
