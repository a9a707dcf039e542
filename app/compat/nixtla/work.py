"""Work the Nixtla routes hand to the worker pool: one fit of a series answering every level of a call.

POST /forecast's work (app.compute.forecast.work) answers one confidence; a Nixtla call asks for up to as many
levels as the client likes, and fitting once per level multiplied a call's cost by their number. The fit is
the same (the models' ``run_forecast_multi``: one fit, each confidence read from it), so every level's bounds
are POST /forecast's at that confidence."""

from __future__ import annotations

from dataclasses import dataclass

from app.compute.forecast.results import ForecastResult
from app.compute.forecast.work import ForecastWork


@dataclass(frozen=True)
class LevelsWork:
    forecast: ForecastWork  # its confidence is unused: ``confidences`` are asked of the one fit
    confidences: tuple[float, ...]

    def run(self) -> list[ForecastResult]:
        from app.compute.forecast.models import run_forecast_multi

        work = self.forecast
        return run_forecast_multi(work.model_id, work.values, work.horizon, self.confidences, work.periods)
