"""What each data_frequency means beyond its unit: the seasonal periods the models look for."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

# Seasonal periods per data_frequency, in units of that frequency (docs/contract.md, "Models").
BASE_PERIODS: dict[str, tuple[int, ...]] = {
    "Seconds": (60,),
    "Minutes": (60, 1440),
    "Hours": (24, 168),
    "Daily": (7, 365),
    "Weekly": (52,),
    "Monthly": (12,),
    "Quarterly": (4,),
    "Yearly": (),
}


def seasonal_periods(data_frequency: str, step: int, n_points: int) -> tuple[int, ...]:
    """Seasonal periods in observations for a series spaced ``step`` units apart.

    A period is kept only when it is a whole number of steps and the history holds two full cycles.
    """
    if step < 1:
        raise ValueError("step must be >= 1")
    out = []
    for p in BASE_PERIODS[data_frequency]:
        if p % step:
            continue
        q = p // step
        if q >= 2 and n_points >= 2 * q:
            out.append(q)
    return tuple(out)


# The anomaly detectors' season, in seconds, by data_frequency: the first candidate that spans 4 to
# MAX_PERIOD_ROWS rows of the series' own spacing.
DAY = 86_400.0
PERIOD_CANDIDATES: dict[str, tuple[float, ...]] = {
    "Seconds": (DAY, 3_600.0, 60.0),
    "Minutes": (DAY, 3_600.0),
    "Hours": (DAY, 7 * DAY),
    "Daily": (7 * DAY,),
    "Weekly": (364 * DAY,),
    "Monthly": (365.2425 * DAY,),
    "Quarterly": (365.2425 * DAY,),
    "Yearly": (),
}

MAX_PERIOD_ROWS = 2016
# A series' nominal spacing is read off its first rows only, so later rows never change it.
STEP_ROWS = 11


# The length of a data_frequency's unit where it has a fixed one (a month's does not): a stream's step is a whole
# number of them, as Azure's granularity and customInterval say.
UNIT_SECONDS: dict[str, int] = {"Seconds": 1, "Minutes": 60, "Hours": 3_600, "Daily": 86_400, "Weekly": 604_800}
# How far from a whole number of units a median gap may be, as a share of that number, and still be read as it:
# timestamps a few seconds off a five-minute grid (a pusher's timer) give median gaps of 299 or 301 s, and a step
# of 301 s drifts a row's season by a slot every 300 rows and makes a day 287 rows. A cadence of its own (90 s of
# Minutes, 75 minutes of Hours) is further off and stays as it is.
UNIT_SLACK = 0.05


def median_gap(times: Sequence[float], data_frequency: str | None = None) -> float:
    """The streaming detector's step, fixed by its warm-up rows: their median gap (the upper one of an even count),
    in plain Python as the compiled detector reads it; within UNIT_SLACK of a whole number of ``data_frequency``'s
    units (at least one), that number of units."""
    gaps = sorted(b - a for a, b in zip(times, times[1:], strict=False))
    gap = gaps[len(gaps) // 2] if gaps else 0.0
    unit = UNIT_SECONDS.get(data_frequency or "", 0)
    if unit:
        units = round(gap / unit)
        if units >= 1 and abs(gap - units * unit) <= UNIT_SLACK * units * unit:
            return float(units * unit)
    return gap


def nominal_step(times: np.ndarray) -> float:
    """Median spacing of the first STEP_ROWS rows: fixed once warm-up ends, so later rows cannot change it."""
    head = times[: min(len(times), STEP_ROWS)]
    if len(head) < 2:
        return 0.0
    import numpy as np

    return float(np.median(np.diff(head)))


def period_seconds(data_frequency: str, step: float) -> float | None:
    if step <= 0:
        return None
    for candidate in PERIOD_CANDIDATES.get(data_frequency, ()):
        rows = candidate / step
        if 4 <= rows <= MAX_PERIOD_ROWS:
            return candidate
    return None
