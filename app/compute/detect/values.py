"""The values the streaming detector judges: every finite value the API accepts, within a range where its
arithmetic stays finite.

The detector squares differences of values and divides by their spreads, which in double precision stays finite
only for magnitudes well inside 1e-154..1e154. A value beyond JUDGED_LIMIT is judged as that limit (it is beyond any
range a stream below the limit could have learnt, so it is flagged all the same), and one nearer 0 than the limit's
inverse as 0 (no metric is measured that finely), so one absurd value neither fails its series nor leaves a state
that fails every later point.
"""

from __future__ import annotations

from typing import Final

JUDGED_LIMIT: Final = 1e150


def judged(value: float) -> float:
    """``value`` within the range the detector's arithmetic is finite over."""
    if value > JUDGED_LIMIT:
        return JUDGED_LIMIT
    if value < -JUDGED_LIMIT:
        return -JUDGED_LIMIT
    if -1.0 / JUDGED_LIMIT < value < 1.0 / JUDGED_LIMIT:
        return 0.0
    return value
