"""The week's own pattern, where the season is a day: a weekend lower than the weekdays, a Monday morning rush.
The daily season's predictors read a day back, so every turn into and out of such a week's pattern was a surprise,
and the surprises taught the error record a tail that widened the range for weeks. The detector keeps the means of
the last three weeks' clock hours and moves its predictors by a change between hours only where it happened a
week ago and two weeks ago alike (the smaller of the two, 0 if they disagree): a one-off incident is not learnt as
the week's pattern. The one exception is a stream's second week, which has no two weeks ago: there the turn of an
hour (hour_turn) takes a week ago's change alone, so a weekend's start and end are expected from the second
weekend, and a one-off of the first week (a level shift, an outage) is expected again a week later, once. The
change a value some days ago needs (day_gaps) still waits for two weeks: it moves the seasonal predictors on every
row, where one week's hour means carry their noise into every row's expected value.
"""

from __future__ import annotations

import math
from array import array
from typing import Final

from app.compute.detect.state import DetectorState
from app.series.frequencies import DAY

HOUR: Final = 3600.0
WEEK_HOURS: Final = 168
# Hour means kept (a ring): the changes read hours a week and two weeks ago, and up to three days before each.
HOUR_BUCKETS: Final = 3 * WEEK_HOURS
NO_HOUR: Final = -(1 << 62)  # the id of an hour not seen (no real hour is numbered so)


def keeps_hours(step: float, least_rows: int) -> bool:
    """Whether rows this far apart keep hour means: where an hour holds at least ``least_rows`` rows (the local
    mean's), an hour's mean is a level the last values can be moved to. On hourly rows an hour is one noisy row:
    moving the last values to its mean would move them to that one row's noise."""
    return step > 0 and HOUR / step >= least_rows


def daily(period: int, step: float) -> bool:
    """Whether a season of ``period`` rows ``step`` seconds apart is a day."""
    return bool(period) and abs(period * step - DAY) <= step


def keeps_week(period: int, step: float, least_rows: int) -> bool:
    """Whether a detector (the week's pattern on, as by default) with this season and step keeps hour means."""
    return daily(period, step) and keeps_hours(step, least_rows)


def start(st: DetectorState, least_rows: int) -> None:
    """Keeps hour means where rows ``st.step`` apart do (keeps_hours)."""
    if keeps_hours(st.step, least_rows):
        st.hour_rows = round(HOUR / st.step)
        st.hour_ids = array("q", [NO_HOUR]) * HOUR_BUCKETS
        st.hour_sums = array("d", [0.0]) * HOUR_BUCKETS
        st.hour_counts = array("q", [0]) * HOUR_BUCKETS
        st.gaps_hour = NO_HOUR


def hour_of(st: DetectorState, at: int) -> int:
    """The clock hour (since the epoch, UTC) of slot ``at``: a week's steps fall on the hour, wherever the stream
    started, and a state rebuilt from later rows numbers its hours the same."""
    return math.floor((st.origin + at * st.step) / HOUR)


def hour_mean(st: DetectorState, hour: int) -> float | None:
    position = hour % HOUR_BUCKETS
    return st.hour_sums[position] / st.hour_counts[position] if st.hour_ids[position] == hour else None


def remember(st: DetectorState, at: int, value: float) -> None:
    """Adds a real value to the mean of its hour (slot ``at``); a row older than the hour its place now holds (a
    backward timestamp) is not kept."""
    hour = hour_of(st, at)
    position = hour % HOUR_BUCKETS
    if st.hour_ids[position] > hour:
        return
    if st.hour_ids[position] != hour:
        st.hour_ids[position], st.hour_sums[position], st.hour_counts[position] = hour, 0.0, 0
    st.hour_sums[position] += value
    st.hour_counts[position] += 1


def agreed(first: float, second: float) -> float:
    """The smaller of two changes where they agree in sign, else 0."""
    if first * second <= 0:
        return 0.0
    return first if abs(first) < abs(second) else second


def hour_turn(st: DetectorState, since: int, now: int) -> tuple[float, float]:
    """From slot ``since``'s hour to slot ``now``'s: (the change of the hour means a week ago, how much more they
    changed then than the day before), each where two weeks ago agrees (the smaller of the two; 0 if they
    disagree in sign), a week ago's alone where two weeks ago is missing (a stream's second week, or a gap then).
    (0, 0) within an hour or where a week ago is missing."""
    if not st.hour_rows:
        return 0.0, 0.0
    then, hour = hour_of(st, since), hour_of(st, now)
    if then == hour:
        return 0.0, 0.0
    week = _turn(st, then, hour, WEEK_HOURS)
    if week is None:
        return 0.0, 0.0
    before = _turn(st, then, hour, 2 * WEEK_HOURS)
    if before is None:
        return week
    return agreed(week[0], before[0]), agreed(week[1], before[1])


def _turn(st: DetectorState, then: int, hour: int, back: int) -> tuple[float, float] | None:
    """``back`` hours before the turn from ``then`` to ``hour``: the hour means' change and its excess over the
    day before's; None where one of the four hours is missing."""
    week_now, week_then = hour_mean(st, hour - back), hour_mean(st, then - back)
    day_now, day_then = hour_mean(st, hour - back - 24), hour_mean(st, then - back - 24)
    if week_now is None or week_then is None or day_now is None or day_then is None:
        return None
    return week_now - week_then, (week_now - week_then) - (day_now - day_then)


def day_gaps(st: DetectorState, now: int) -> list[float]:
    """How much slot ``now``'s hour differed a week ago from the same hour one, two and three days before, each
    where two weeks ago agrees (the smaller; 0 if they disagree in sign or an hour is missing): what a value that
    many days ago misses where the week has a pattern of its own (a weekend). Worked out once an hour: the hours
    it reads are over."""
    hour = hour_of(st, now)
    if hour != st.gaps_hour:
        st.gaps_hour = hour
        st.day_gaps = [_day_gap(st, hour, days) for days in (1, 2, 3)]
    return st.day_gaps


def _day_gap(st: DetectorState, hour: int, days: int) -> float:
    changes: list[float] = []
    for back in (WEEK_HOURS, 2 * WEEK_HOURS):
        week, day = hour_mean(st, hour - back), hour_mean(st, hour - back - 24 * days)
        if week is None or day is None:
            return 0.0
        changes.append(week - day)
    return agreed(changes[0], changes[1])


def step(st: DetectorState, since: int, now: int) -> float:
    """The change from slot ``since``'s hour to slot ``now``'s that the last values need: one the week makes and
    the day does not (a weekend's start and end, not a daily pattern), where it recurred a week and two weeks
    ago, or happened a week ago in a stream's second week (hour_turn: the smaller of the week's change and its
    excess over the day's)."""
    week, excess = hour_turn(st, since, now)
    return agreed(week, excess)
