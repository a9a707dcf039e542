"""What forecast work returns to the web process (plain lists, picklable)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ForecastResult:
    median: list[float]
    lower: list[float]
    upper: list[float]
    fallback: str | None = None
    covariates_used: bool | None = None  # None: no covariates were given; False: given but not used
    covariates_note: str | None = None  # why they were not used (a holdout of the history showed no gain, ...)
