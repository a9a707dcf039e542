"""A value that stops moving (app.compute.detect.streaming): an exporter that hangs repeats its last value, and a
stream that has never held still for long does not suddenly hold still for an hour.

The stream's own history says what "long" is: a run of equal values is frozen when it is longer than twice the
longest run the stream had before (and at least LEAST_RUN rows), so a count that sits at 0 every night, or a gauge
that moves in coarse steps, has taught its detector runs that long and is not flagged for them. A run that was
flagged (or fell in an incident) is not learnt: a second hang as long as the first is flagged too. The rule waits
until the stream has shown its runs: a run is judged only if it began after WINDOW_ROWS rows, and two seasons where
the stream has one (a stream flat from its start is flat by nature).
"""

from __future__ import annotations

from typing import Final

from app.compute.detect.state import DetectorState
from app.compute.detect.surprises import WINDOW_ROWS

# As long as a run beyond the range takes to become a new level (streaming.ADOPT_ROWS): an hour of five-minute rows.
LEAST_RUN: Final = 12


def stuck(st: DetectorState, value: float) -> int:
    """Counts ``value`` into the current run of equal values; the run's length when this row makes it frozen (once
    a run), else 0."""
    if st.same_rows and value == st.same_value:
        st.same_rows += 1
    else:
        if not st.same_told:
            st.longest_same = max(st.longest_same, st.same_rows)
        st.same_value, st.same_rows, st.same_told = value, 1, 0
    # A run that began before the stream had shown its runs is what the stream does (a flat line from the start).
    if st.same_told or st.rows - st.same_rows < max(WINDOW_ROWS, 2 * st.period):
        return 0
    if st.same_rows >= max(LEAST_RUN, 2 * st.longest_same + 1):
        st.same_told = 1
        return st.same_rows
    return 0


def told(st: DetectorState) -> None:
    """The current run was seen in an incident: it is not learnt as a run the stream may have."""
    st.same_told = 1
