"""Fields and value checks that every series-carrying request shares (forecast, anomalies, monitors, Azure)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from marshmallow import ValidationError, fields

from app.web.validation import problem, unstorable

if TYPE_CHECKING:  # numpy loads on the first series, so the admin CLI never pays for it
    import numpy as np

# Finite but near float max (1e308), sums and spreads inside the models overflow and every model and its
# fallback fail (500). Far above any real measurement (the edge cases tested go to 1e12); such values answer 422.
MAX_ABS_VALUE = 1e300


class StoredText(fields.String):
    """A string the service stores or looks up (a name, a URL): one the database can hold, or a 400."""

    def _deserialize(self, value: Any, attr: str | None, data: Mapping[str, Any] | None, **kwargs: Any) -> str:
        text = super()._deserialize(value, attr, data, **kwargs)
        issue = unstorable(text)
        if issue is not None:
            raise ValidationError(issue + ".")
        return text


class JsonArray(fields.Field):
    """An array taken as it is; its elements are judged later as series data (422), not as shape (400)."""

    default_error_messages = {"invalid": "Must be an array."}  # noqa: RUF012

    def _deserialize(self, value: Any, attr: str | None, data: Mapping[str, Any] | None, **kwargs: Any) -> list[Any]:
        if not isinstance(value, list):
            raise self.make_error("invalid")
        return value


class StrictFloat(fields.Float):
    """A JSON number only: marshmallow's Float would also take "0.9" and true."""

    def _deserialize(self, value: Any, attr: str | None, data: Mapping[str, Any] | None, **kwargs: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.make_error("invalid")
        return super()._deserialize(value, attr, data, **kwargs)


def values_array(values: list[Any], problems: list[dict[str, Any]]) -> np.ndarray:
    """The values as float64 when all are fine, checked in one pass; else _check_values names the first defect."""
    import numpy as np
    if set(map(type, values)) <= {float, int}:  # bool is excluded: type(True) is bool
        try:
            array = np.array(values, dtype=np.float64)
        except OverflowError:  # an integer past the float range: reported as not finite below
            array = None
        if array is not None and (array.size == 0 or all_in_range(array)):
            return array
    return np.array(check_values(values, problems), dtype=np.float64)


def all_in_range(array: np.ndarray) -> bool:
    """Every value finite and at most MAX_ABS_VALUE in magnitude (a non-empty float64 array)."""
    # max and min carry a NaN through and NaN compares False, so these also refuse NaN and the infinities.
    return bool(array.max() <= MAX_ABS_VALUE and array.min() >= -MAX_ABS_VALUE)


def check_values(values: list[Any], problems: list[dict[str, Any]]) -> list[float]:
    floats: list[float] = []
    for index, value in enumerate(values):
        # bool is an int subclass in Python but true/false are not numbers in JSON.
        if type(value) not in (int, float):
            issue = "missing value (null)" if value is None else "value must be a number"
            problems.append(problem("series[0].values", issue, value, index=index))
            return floats
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            problems.append(problem("series[0].values", "value must be a finite number", str(value)[:64], index=index))
            return floats
        if abs(number) > MAX_ABS_VALUE:
            problems.append(
                problem(
                    "series[0].values",
                    f"value out of range: magnitude must be at most {MAX_ABS_VALUE:g}",
                    value,
                    index=index,
                    maximum=MAX_ABS_VALUE,
                )
            )
            return floats
        floats.append(number)
    return floats
