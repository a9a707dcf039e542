"""What the streaming detector (app.compute.detect.streaming) remembers between rows and what it answers:
typed arrays (8 bytes a number) because a server keeps one state per monitor."""

from __future__ import annotations

from array import array
from bisect import bisect_left, insort
from dataclasses import dataclass, field
from typing import Final

from app.compute.detect.surprises import WINDOW_ROWS, Calibration, Record

PREDICTORS: Final = 5  # season, season-adjusted last, median of three seasons, last, local mean
# Rows 0..WARMUP-1 only teach the detector; with the 12-point minimum the last row is still judged.
WARMUP: Final = 11
SHAPE_ROWS: Final = 64  # the window's tail and the threshold are refitted every 64 steps of the stream
# A surprise beyond the threshold enters the record at most at twice the threshold: a heavy tail is still
# learnt (the threshold can climb twice as high with each such row), but one spike on a young stream cannot
# widen its range to the spike's size.
RECORD_CAP: Final = 2.0
# Which signal flagged a row (Verdicts.signal), so the verdict can say why (app.compute.detect.reasons): the row's
# own error, a window signal (app.compute.detect.windows), or a value that stopped moving (app.compute.detect.frozen).
NO_SIGNAL: Final = 0
POINT: Final = 1
SHIFT: Final = 2
SPREAD: Final = 3
DENSITY: Final = 4
LEVEL: Final = 5
FROZEN: Final = 6


@dataclass
class Verdicts:
    expected: list[float] = field(default_factory=list)
    lower: list[float] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)
    score: list[float] = field(default_factory=list)
    is_anomaly: list[bool] = field(default_factory=list)
    direction: list[str | None] = field(default_factory=list)
    incident: list[bool] = field(default_factory=list)  # an incident is open after the row (told or explained)
    # A flagged row's signal (NO_SIGNAL for any other row) and its size on the stream's own scale: the error
    # (POINT), the window's mean error or mean size (the window signals), the rows without a change (FROZEN).
    signal: list[int] = field(default_factory=list)
    size: list[float] = field(default_factory=list)
    threshold: float = 0.5  # the least score of an anomaly (fixed once warm-up has set the stream's step)

    def add(self, expected: float, lower: float, upper: float, score: float, flagged: bool, direction: str | None,
            incident: bool, signal: int = NO_SIGNAL, size: float = 0.0) -> None:
        """One row's verdict."""
        self.signal.append(signal)
        self.size.append(size)
        self.expected.append(expected)
        self.lower.append(lower)
        self.upper.append(upper)
        self.score.append(score)
        self.is_anomaly.append(flagged)
        self.direction.append(direction)
        self.incident.append(incident)


def floats() -> array:
    return array("d")


@dataclass
class SignalFit:
    """What calibrates one signal beyond its window: the window's fitted tail and the signal's error at its
    share of the budget, both as of row ``at`` (refitted every SHAPE_ROWS rows, and more often while the
    window is young; ``calibration`` None before the first fit), and the long-run record of its surprises."""

    calibration: Calibration | None = None
    edge: float = 0.0
    at: int = 0
    bucket: int = 0
    record: Record = field(default_factory=Record)


@dataclass
class ShortSignal:
    """One signal of the short window: its last WINDOW_ROWS numbers (a ring and a sorted copy) and its fit."""

    sizes: array = field(default_factory=floats)
    ranked: array = field(default_factory=floats)
    next: int = 0
    fit: SignalFit = field(default_factory=SignalFit)


@dataclass
class DetectorState:
    """Everything the detector remembers between rows; bounded by lookback_rows(period) numbers, held in
    typed arrays (8 bytes a number) because a server keeps one state per monitor."""

    rows: int = 0
    bucket: int = 0  # the row's place on the refit clock (streaming.SHAPE_ROWS)
    warm_times: list[float] = field(default_factory=list)
    warm_values: list[float] = field(default_factory=list)
    origin: float = 0.0
    step: float = 0.0
    period: int = 0
    counts: int = 0  # 1: a count, judged on the square-root scale (app.compute.detect.counts)
    negative: int = 0  # 1 once a value below 0 came: until then no expected value or range goes below 0
    # The current run of equal values (app.compute.detect.frozen), the longest run before it that was not flagged,
    # and whether this one was flagged (or fell in an incident).
    same_value: float = 0.0
    same_rows: int = 0
    longest_same: int = 0
    same_told: int = 0
    slot_ids: array = field(default_factory=lambda: array("q"))  # ring of 3 seasons + 2 + the habit's reach
    slot_values: array = field(default_factory=floats)
    slot_residuals: array = field(default_factory=floats)  # value - expected, by slot (0 for warm-up rows)
    slot_deviant: array = field(default_factory=lambda: array("b"))  # 1 where the row was beyond its range
    last_slot: int = 0
    # Means of the last three weeks' clock hours (app.compute.detect.weekly), where the season is a day and an
    # hour holds at least LOCAL_ROWS rows (hour_rows, the rows of an hour; 0 elsewhere).
    hour_rows: int = 0
    hour_ids: array = field(default_factory=lambda: array("q"))
    hour_sums: array = field(default_factory=floats)
    hour_counts: array = field(default_factory=lambda: array("q"))
    gaps_hour: int = 0  # the hour day_gaps were worked out for, and they
    day_gaps: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    last: float = 0.0  # last value as the short-term predictors see it
    local: list[float] = field(default_factory=list)
    errors_sorted: array = field(default_factory=floats)
    errors_ring: array = field(default_factory=floats)
    errors_next: int = 0
    chooser_ring: array = field(default_factory=floats)  # PREDICTORS errors a row, NaN where none
    chooser_rows: int = 0
    chooser_next: int = 0
    chooser_sum: list[float] = field(default_factory=lambda: [0.0] * PREDICTORS)
    chooser_count: list[int] = field(default_factory=lambda: [0] * PREDICTORS)
    # The open incident's deviant rows on one side: their count and the real values of the last LOCAL_ROWS of
    # them (what the short-term predictors take when the incident is adopted as the new normal).
    run_side: int = 0
    run_rows: int = 0
    run_values: list[float] = field(default_factory=list)
    # The last QUIET_ROWS rows' deviations beyond the range, signed (+ above, - below), 0 for a row inside it.
    recent_flags: array = field(default_factory=floats)
    recent_next: int = 0
    # The short window's last SHORT_ROWS errors against the anchored predictor (the shift) and one-step error
    # sizes (the spread), and the long window's last LONG_ROWS error sizes (the density) and errors against the
    # predictor anchored LONG_ROWS back (the level), each capped at the error window's largest error.
    short_ring: array = field(default_factory=floats)
    spread_ring: array = field(default_factory=floats)
    short_next: int = 0
    long_ring: array = field(default_factory=floats)
    long_next: int = 0
    level_ring: array = field(default_factory=floats)  # in step with long_ring
    anchors: list[tuple[float, float, int]] = field(default_factory=list)  # predictors.remember_anchor
    shift: ShortSignal = field(default_factory=lambda: ShortSignal())  # the short window's mean error, sized
    spread: ShortSignal = field(default_factory=lambda: ShortSignal())  # and its mean size
    density: ShortSignal = field(default_factory=lambda: ShortSignal())  # the long window's mean size
    level: ShortSignal = field(default_factory=lambda: ShortSignal())  # and its mean error, sized
    error_fit: SignalFit = field(default_factory=lambda: SignalFit())  # calibration of one row's error
    week: int = 0  # rows in a week when the season is a day (the weekly habit), else 0
    marked_slots: array = field(default_factory=lambda: array("q"))  # deviant rows of the last week, by slot
    marked_residuals: array = field(default_factory=floats)
    since_window_alarm: int = 1 << 30  # rows since a window signal raised an alarm
    since_deviant: int = 1 << 30  # rows since a row was beyond its range
    # The last WINDOW_ROWS rows: whether the smallest of the signals' probabilities was at most the top rank's
    # share (1), above it (0), or the row was not counted (-1: in or just after an incident). joint_rows counts
    # the rows coded 0 or 1, joint_hits those coded 1.
    joint_codes: array = field(default_factory=lambda: array("b"))
    joint_next: int = 0
    joint_rows: int = 0
    joint_hits: int = 0


def push_ranked(ring: array, ranked: array, position: int, value: float) -> int:
    """Appends ``value`` to a ring of WINDOW_ROWS (overwriting ``position`` once full) and its sorted copy;
    returns the ring's next position."""
    if len(ring) < WINDOW_ROWS:
        ring.append(value)
    else:
        del ranked[bisect_left(ranked, ring[position])]
        ring[position] = value
        position = (position + 1) % WINDOW_ROWS
    insort(ranked, value)
    return position


def push_ring(ring: array, position: int, size: int, value: float) -> int:
    """Appends ``value`` to a ring of ``size`` (overwriting ``position`` once full); returns the next position."""
    if len(ring) < size:
        ring.append(value)
        return position
    ring[position] = value
    return (position + 1) % size


def any_flag(flags: array) -> bool:
    """Whether any remembered deviation is not 0 (a deviant row's is never 0). Compared as bytes: any() boxes
    every float, and this is asked twice a row."""
    return flags.tobytes() != bytes(8 * len(flags))
