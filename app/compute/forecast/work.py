"""Work the web process hands to the worker pool, and what comes back.

A piece of work is a picklable object whose ``run()`` executes inside a worker process; its numeric imports happen
there, inside ``run()``, so this module (imported by the web process) loads nothing heavy. Any other
capability that needs the numeric stack (anomaly detection, monitors) sends its own work class the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.compute.forecast.results import CovariateMatrix, ForecastResult

__all__ = ["CovariateMatrix", "ForecastWork", "LevelsWork", "warm_up"]


@dataclass(frozen=True)
class ForecastWork:
    model_id: str
    values: Any  # a float64 numpy array or a list of floats
    horizon: int
    confidence: float
    periods: tuple[int, ...]
    covariates: CovariateMatrix | None = None  # None: the univariate forecast, exactly as without the field

    @property
    def label(self) -> str:
        return self.model_id

    def run(self) -> ForecastResult:
        from app.compute.forecast.models import run_forecast

        return run_forecast(self.model_id, self.values, self.horizon, self.confidence, self.periods,
                            covariates=self.covariates)


@dataclass(frozen=True)
class LevelsWork:
    """One fit answering several confidences (the Nixtla routes' levels): each result is what ForecastWork gives
    at that confidence, and the levels of a call cost one fit instead of one each."""

    forecast: ForecastWork  # its own confidence is unused: ``confidences`` are asked of the one fit
    confidences: tuple[float, ...]

    def run(self) -> list[ForecastResult]:
        from app.compute.forecast.models import run_forecast_multi

        work = self.forecast
        return run_forecast_multi(work.model_id, work.values, work.horizon, self.confidences, work.periods,
                                  covariates=work.covariates)


def warm_up() -> None:
    """Loads the numeric stack and runs one small fit, so a worker's first real forecast is not the slow one."""
    ForecastWork("forecast-model-2", [float(i % 7) for i in range(60)], 3, 0.9, (7,)).run()
