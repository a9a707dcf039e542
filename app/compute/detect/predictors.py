"""What the streaming detector (app.compute.detect.streaming) expects of a row: five one-step predictors, the
chooser between them, and the memories they read (the season by slot, the last values).

Seasons are looked up by time: a row's slot is its distance from the first row in nominal steps, so gaps,
jitter and repeated or backward timestamps need nothing special.
"""

from __future__ import annotations

import math
from typing import Final

from app.compute.detect import weekly
from app.compute.detect.state import PREDICTORS, DetectorState

# Errors that choose the predictor (a day of five-minute rows), by their mean absolute size: a root of the
# errors (once their fourth root) rewards the exact hits of an integer-valued predictor on count data, and chose
# the noisy value a season ago over the local mean there.
CHOOSER_ROWS: Final = 288
LOCAL_ROWS: Final = 8
ROUNDING: Final = 1e-12  # a relative difference that rounding alone makes (about 4,500 roundings of a double)
# The predictors' places in a row's candidates (PREDICTORS of them).
SEASON: Final = 0
SEASON_ADJUSTED_LAST: Final = 1
SEASON_MEDIAN: Final = 2
LAST: Final = 3
LOCAL_MEAN: Final = 4
SHORT_TERM = (SEASON_ADJUSTED_LAST, LAST, LOCAL_MEAN)  # the predictors that read the last rows
NO_GAPS: Final = [0.0, 0.0, 0.0]  # where the week has no pattern of its own (app.compute.detect.weekly)


def slot(st: DetectorState, moment: float) -> int:
    return math.floor((moment - st.origin) / st.step + 0.5)


def season(st: DetectorState, at: int) -> float | None:
    """The value stored for slot ``at`` (None if that slot was missing or has been overwritten)."""
    position = at % len(st.slot_ids)
    return st.slot_values[position] if st.slot_ids[position] == at else None


def usual(st: DetectorState, at: int) -> float | None:
    """What slot ``at`` was expected to be where its row was beyond its range, else its value: a spike is not
    echoed a season later."""
    position = at % len(st.slot_ids)
    if st.slot_ids[position] != at:
        return None
    value = st.slot_values[position]
    return value - st.slot_residuals[position] if st.slot_deviant[position] else value


def carry_over_hour(st: DetectorState, now: int) -> tuple[float, float]:
    """Moves the last values (what the last value and the local mean read) by the week's step from the last
    row's hour to this row's (weekly.step); returns it and the week's change beyond the day's (what the
    season-adjusted last value adds to the day's change)."""
    week, excess = weekly.hour_turn(st, st.last_slot, now)
    step = weekly.agreed(week, excess)
    if step:
        st.last += step
        st.local = [value + step for value in st.local]
    return step, excess


def rounding(value: float) -> float:
    """How far apart two sums of numbers near ``value`` may be by rounding alone (thousands of roundings): errors
    this small are exact predictions, so that adding a constant to a stream (a gauge at 0.1 rather than 0) changes
    none of its verdicts."""
    return ROUNDING * abs(value)


def exact(miss: float, tie: float) -> float:
    """``miss``, or 0 where it is within ``tie`` (rounding): an exact prediction, as at any other level."""
    return 0.0 if abs(miss) <= tie else miss


def predictions(st: DetectorState, now: int, carried: float = 0.0, excess: float = 0.0) -> list[float | None]:
    """The usual value one season ago, the last value plus the usual change one season ago, the median of the
    values one, two and three seasons ago (it learns a changed pattern, and one odd day does not move it), the
    last value, and the mean of the last LOCAL_ROWS values; None where a predictor has nothing to read. ``now``
    is the row's slot; ``carried`` the week's step the last values were moved by and ``excess`` the week's change
    beyond the day's (carry_over_hour): the season-adjusted last value takes the day's change and the excess.
    Where the week has a pattern of its own (app.compute.detect.weekly), a value some days ago is moved by how
    much this hour differed from that day's a week ago."""
    out: list[float | None] = [None, None, None, st.last, sum(st.local) / len(st.local)]
    period = st.period
    if period:
        gaps = weekly.day_gaps(st, now) if st.hour_rows else NO_GAPS
        one = usual(st, now - period)
        if one is not None:
            out[SEASON] = one + gaps[0]
            before = usual(st, st.last_slot - period)
            if before is not None:
                out[SEASON_ADJUSTED_LAST] = st.last - carried + one - before + excess
            one, two, three = season(st, now - period), season(st, now - 2 * period), season(st, now - 3 * period)
            if one is not None and two is not None and three is not None:
                out[SEASON_MEDIAN] = sorted((one + gaps[0], two + gaps[1], three + gaps[2]))[1]
    return out


def choose(st: DetectorState, candidates: list[float | None], *, seasonal_only: bool) -> int:
    """The predictor with the smallest mean error over the last CHOOSER_ROWS rows; one competes once it has been
    scored for a season (or CHOOSER_ROWS rows). ``seasonal_only``: the last values describe another time of the
    season (after a gap), so the seasonal predictors alone compete, if one is ready."""
    needed = min(st.chooser_rows, max(st.period, LOCAL_ROWS))
    ready = [j for j, prediction in enumerate(candidates)
             if prediction is not None and st.chooser_count[j] and st.chooser_count[j] >= needed]
    if seasonal_only:
        ready = [j for j in ready if j not in SHORT_TERM] or ready
    best, best_error = LAST, math.inf
    tie = rounding(st.last)  # mean errors this close differ by rounding alone (a constant added to the stream)
    for j in ready:  # seasonal predictors come first: on a tie the season wins
        error = st.chooser_sum[j] / st.chooser_count[j]
        if error < best_error - tie:
            best, best_error = j, error
    return best


def anchored_error(st: DetectorState, now: int, value: float, expected: float, choice: int, rows: int) -> float:
    """This row's error against what the chosen predictor expected ``rows`` rows ago: after a shift the
    short-term predictors follow the new level within a row or two, the anchored one does not. The seasonal
    predictors read a season back and need no anchor."""
    if not rows or len(st.anchors) < rows or choice not in SHORT_TERM:
        return value - expected
    last, local_mean, last_slot = st.anchors[-rows]
    if choice == LAST:
        return value - last - weekly.step(st, last_slot, now)
    if choice == LOCAL_MEAN:
        return value - local_mean - weekly.step(st, last_slot, now)
    season_now, season_then = usual(st, now - st.period), usual(st, last_slot - st.period)
    change = season_now - season_then if season_now is not None and season_then is not None else 0.0
    return value - (last + change + weekly.hour_turn(st, last_slot, now)[1])


def remember_anchor(st: DetectorState, rows: int) -> None:
    """What the short-term predictors read after this row, kept for ``rows`` rows (anchored_error)."""
    if rows:
        st.anchors.append((st.last, sum(st.local) / len(st.local), st.last_slot))
        if len(st.anchors) > rows:
            del st.anchors[0]


def remember_short(st: DetectorState, value: float) -> None:
    st.last = value
    st.local.append(value)
    if len(st.local) > LOCAL_ROWS:
        del st.local[0]


def remember_season(st: DetectorState, at: int, value: float, residual: float = 0.0, deviant: bool = False) -> None:
    if st.period:
        position = at % len(st.slot_ids)
        st.slot_ids[position], st.slot_values[position] = at, value
        st.slot_residuals[position] = residual
        st.slot_deviant[position] = deviant
        st.last_slot = at
        if st.hour_rows:
            weekly.remember(st, at, value)


def score_predictors(st: DetectorState, candidates: list[float | None], value: float, cap: float | None) -> None:
    """Each predictor's error on this row enters the chooser's ring; ``cap`` bounds it (a flagged row counts at
    most as a miss by the range's half-width, so an incident does not decide which predictor judges after it)."""
    tie = rounding(value)
    errors = [None if prediction is None else exact(abs(prediction - value), tie) for prediction in candidates]
    if cap is not None:
        errors = [None if miss is None else min(miss, cap) for miss in errors]
    # Written in place, field by field: this runs on every row, and building a row array cost a sixth of it.
    ring, sums, counts = st.chooser_ring, st.chooser_sum, st.chooser_count
    if st.chooser_rows < CHOOSER_ROWS:
        st.chooser_rows += 1
        for j, error in enumerate(errors):
            if error is None:
                ring.append(math.nan)
            else:
                ring.append(error)
                sums[j] += error
                counts[j] += 1
        return
    base = st.chooser_next * PREDICTORS
    st.chooser_next = (st.chooser_next + 1) % CHOOSER_ROWS
    for j, error in enumerate(errors):
        dropped = ring[base + j]
        if dropped == dropped:  # not NaN: the predictor had a value then
            sums[j] -= dropped
            counts[j] -= 1
        if error is None:
            ring[base + j] = math.nan
        else:
            ring[base + j] = error
            sums[j] += error
            counts[j] += 1
