"""Counts are judged on the square-root scale (app.compute.detect.streaming).

A count's noise grows with its level: a Poisson count's variance is its mean, so one that runs at 4 a minute at
night and 20 at noon is twice as noisy at noon. On the raw scale one range and one record serve both hours, and
the night's moves are judged against the noon's noise (missed) or the noon's against the night's (false alarms).
Anscombe's transform, 2 * sqrt(x + 3/8), gives a Poisson count a variance near 1 at any level, so the detector
judges y = 2 * sqrt(x + 3/8) and answers ``expected`` and the range back on the count's own scale (the range is
then wider above than below, as a count's is).

A stream is a count when its warm-up rows look like one: whole non-negative numbers, not all equal, whose
dispersion (the variance of the successive changes over twice the mean, 1 for a Poisson count whatever its
level, and blind to a slow daily wave) lies where a Poisson count's first rows put it 99 times in 100. Bytes,
travel times and speeds are whole numbers too, but are not counts of events: their dispersion is far from 1,
so they stay on their own scale.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

ANSCOMBE: Final = 0.375  # 3/8: what makes the transform's variance nearest 1 for a Poisson count
# The dispersion of the first 11 rows of a Poisson count (any rate from 1 to 100) lies within these bounds 99 times
# in 100 (the 0.5% and 99.5% quantiles in simulation).
LEAST_DISPERSION: Final = 0.18
MOST_DISPERSION: Final = 3.3


def looks_like_counts(values: Sequence[float]) -> bool:
    """Whether ``values`` (the warm-up rows) are whole non-negative numbers as dispersed as a Poisson count's."""
    if len(values) < 3 or any(value < 0.0 or value != math.floor(value) for value in values):
        return False
    mean = sum(values) / len(values)
    if mean <= 0.0:
        return False
    changes = [later - earlier for earlier, later in zip(values[:-1], values[1:], strict=True)]
    average = sum(changes) / len(changes)
    variance = sum((change - average) ** 2 for change in changes) / (len(changes) - 1)
    dispersion = variance / 2.0 / mean
    return LEAST_DISPERSION <= dispersion <= MOST_DISPERSION


def stabilised(value: float) -> float:
    """A count on the square-root scale (a negative value, never a count's, is read as 0)."""
    return 2.0 * math.sqrt(max(value, 0.0) + ANSCOMBE)


def unstabilised(scaled: float) -> float:
    """Back to the count's scale: the inverse of ``stabilised``. A point below the scale's 0 is a count of 0, so a
    count's expected value and range never go below 0."""
    half = scaled / 2.0
    return max(half * half - ANSCOMBE, 0.0) if scaled > 0.0 else 0.0


def width_on_scale(expected: float, width: float) -> float:
    """The half-width on the square-root scale whose range around ``expected`` (on that scale) is at least ``width``
    wide on the count's scale on both sides. A half-width on that scale is narrower in counts below ``expected`` than
    above it, so the lower side decides, unless the count's 0 is nearer than ``width``."""
    if width <= 0.0:
        return 0.0
    centre = unstabilised(expected)
    if centre - width > 0.0:
        return expected - stabilised(centre - width)
    return max(expected - stabilised(0.0), stabilised(centre + width) - expected)

