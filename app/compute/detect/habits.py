"""What explains a row beyond its range away (anomaly-model-1, part 4 of app.compute.detect.streaming): the peak
of the open incident on the row's side, and a habit, a deviation this large seen at this time of the season
before. Compiled with the detector (app.compute.detect.native)."""

from __future__ import annotations

from typing import Final

from app.compute.detect.state import DetectorState

MAX_MARKED: Final = 2048  # deviant rows a week's habit remembers at most


def explained(st: DetectorState, now: int, residual: float, reach: int) -> tuple[float, float]:
    """On this row's side, the peak of an open incident (deviant rows in the last quiet_rows) and a habit: the
    deviation seen within ``reach`` slots of this time in two of the last three seasons (the second largest of
    their largest), or a week ago on a daily season (0: none, or the peak explains the row)."""
    side = 1.0 if residual > 0 else -1.0
    peak = max(0.0, max((side * earlier for earlier in st.recent_flags), default=0.0))
    if not reach or peak >= abs(residual):
        return peak, 0.0
    ids, residuals, size = st.slot_ids, st.slot_residuals, len(st.slot_ids)
    largest = []
    for back in (1, 2, 3):
        centre = now - back * st.period
        seen = 0.0
        for near in range(centre - reach, centre + reach + 1):
            position = near % size
            if ids[position] == near:
                seen = max(seen, side * residuals[position])
        largest.append(seen)
    habit = sorted(largest)[1]
    if st.week:
        low, high = now - st.week - reach, now - st.week + reach
        for marked, deviation in zip(st.marked_slots, st.marked_residuals, strict=True):
            if low <= marked <= high:
                habit = max(habit, side * deviation)
    return peak, habit


def mark(st: DetectorState, now: int, residual: float, reach: int) -> None:
    """Remembers a deviant row (at slot ``now``) for a week and ``reach`` slots (a daily season's weekly habit),
    at most MAX_MARKED of them."""
    if not st.week:
        return
    oldest = now - st.week - reach
    drop = 0
    while drop < len(st.marked_slots) and (st.marked_slots[drop] < oldest or len(st.marked_slots) - drop
                                           >= MAX_MARKED):
        drop += 1
    if drop:
        del st.marked_slots[:drop]
        del st.marked_residuals[:drop]
    st.marked_slots.append(now)
    st.marked_residuals.append(residual)
