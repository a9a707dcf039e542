"""The streaming detector's window signals (app.compute.detect.streaming, step 3 of its docstring): a shift and a
noisier stretch over the last short_rows rows, a denser stretch and a level over the last long_rows, each
calibrated against its own window and record as a row's error is; and which of them is the least likely, so a
flagged row can say why."""

from __future__ import annotations

import math
from array import array
from typing import NamedTuple

from app.compute.detect.state import (
    DENSITY,
    LEVEL,
    NO_SIGNAL,
    RECORD_CAP,
    SHIFT,
    SPREAD,
    WARMUP,
    DetectorState,
    ShortSignal,
    SignalFit,
    push_ranked,
    push_ring,
)
from app.compute.detect.surprises import WINDOW_ROWS, Calibration, calibrate, floored, tail_shape


class Window(NamedTuple):
    """The least likely window signal: its probability, which one (state's signal codes) and its mean."""

    probability: float
    signal: int
    mean: float

    def least(self, probability: float, signal: int, mean: float) -> Window:
        return Window(probability, signal, mean) if probability < self.probability else self


class WindowSignals:
    """What StreamingDetector does with its windows; its configuration is the detector's."""

    top_rank: int
    quiet_rows: int
    short_rows: int
    long_rows: int
    level: bool
    joint: bool
    signals: int
    joint_share: float

    def _calibrated(self, st: DetectorState, ranked: array, fit: SignalFit, least: float,
                    per_signal: float) -> tuple[Calibration, float]:
        """The signal's calibration for this row and the error at which its probability is ``per_signal``
        (never below ``least``). The window's tail and that error are refitted every SHAPE_ROWS rows (every
        sixteenth of the window's rows while it is young): they move slowly, and a refit costs a hundred
        logarithms and a bisection."""
        calibration = fit.calibration
        # Refits fall on the stream's clock (every SHAPE_ROWS steps of epoch time), not on a count of rows, so a
        # state rebuilt from the last rows of a stored series refits where the one that judged them did.
        bucket = st.bucket
        young = len(ranked) < WINDOW_ROWS
        if calibration is None or (st.rows - fit.at >= max(1, len(ranked) // 16) if young else bucket != fit.bucket):
            # A young window's shape is mostly noise (and a bimodal start, a daily step not yet predicted, reads
            # as a heavy tail): it counts in proportion to how full the window is, exponential before.
            shape = tail_shape(ranked, self.top_rank) * min(1.0, len(ranked) / WINDOW_ROWS)
            calibration = calibrate(ranked, self.top_rank, shape, fit.record)
            fit.calibration, fit.at, fit.bucket = calibration, st.rows, bucket
            fit.edge = calibration.quantile(per_signal) if calibration.unit > 0 else 0.0
        if fit.edge >= least:
            return calibration, fit.edge
        return floored(calibration, fit.edge, least, per_signal), least

    def _window_probability(self, st: DetectorState, error: float, anchored: float, deep: float, least: float,
                            per_signal: float, incident: bool) -> Window:
        """The smallest calibrated probability of the window signals (1 where there are none yet), which signal
        it is, and that signal's mean: the short window's mean anchored error (a shift) and its mean size (a
        noisier stretch), and the long window's mean size (a denser stretch) and its mean error against the
        predictor anchored a long window back (``deep``: a level). Each row's error is capped at the largest of
        the error window: one wild row must not carry a mean, it is judged on its own. ``incident``: a row was
        judged deviant lately (or this one is)."""
        cap = st.errors_sorted[-1] if st.errors_sorted else math.inf
        capped, anchored = max(-cap, min(error, cap)), max(-cap, min(anchored, cap))
        smallest = Window(1.0, NO_SIGNAL, 0.0)
        k = self.short_rows
        if k:
            position = st.short_next
            st.short_next = push_ring(st.short_ring, position, k, anchored)
            push_ring(st.spread_ring, position, k, abs(capped))
            if len(st.short_ring) == k:
                shift = sum(st.short_ring) / k
                spread = sum(st.spread_ring) / k
                smallest = smallest.least(self._window_signal(st, st.shift, abs(shift), least, per_signal, incident),
                                          SHIFT, shift)
                smallest = smallest.least(self._window_signal(st, st.spread, spread, least, per_signal, incident),
                                          SPREAD, spread)
        n = self.long_rows
        if n:
            position = st.long_next
            st.long_next = push_ring(st.long_ring, position, n, abs(capped))
            if self.level:
                push_ring(st.level_ring, position, n, max(-cap, min(deep, cap)))
            if len(st.long_ring) == n:
                density = sum(st.long_ring) / n
                smallest = smallest.least(
                    self._window_signal(st, st.density, density, least, per_signal, incident), DENSITY, density)
                if self.level:
                    # The level reads rows anchored a long window back: a move an incident told is in it for two
                    # long windows after, past the incident's end, and is not news there.
                    told = min(st.since_deviant, st.since_window_alarm) < 2 * n
                    level = sum(st.level_ring) / n
                    smallest = smallest.least(
                        self._window_signal(st, st.level, abs(level), least, per_signal, incident, told), LEVEL, level)
        return smallest

    def _window_signal(self, st: DetectorState, signal: ShortSignal, size: float, least: float,
                       per_signal: float, incident: bool, told: bool = False) -> float:
        """One window signal's probability, read against the WINDOW_ROWS such numbers before it and its own
        record; 1 for a deviation of the incident already told (a row was judged deviant lately, or a window
        alarm was raised within quiet_rows; ``told``: a signal whose window reaches further back says when). Its
        record keeps the rows outside a point incident (a spike's aftermath is not a window's normal) but not the
        row that raises a window alarm: the rows that repeat a told alarm enter it, capped at twice the threshold
        as the point record keeps its news, so a heavy-tailed window signal is learnt while a shift seen once is
        flagged again when it recurs."""
        probability = 1.0
        if len(signal.ranked) >= WARMUP:
            calibration, edge = self._calibrated(st, signal.ranked, signal.fit, least, per_signal)
            probability = calibration.probability(size)
            if probability <= per_signal and (st.since_window_alarm < self.quiet_rows or incident or told):
                probability = 1.0
            recorded = probability > per_signal and not incident and calibration.unit > 0
            signal.fit.record.add(min(size, RECORD_CAP * edge) / calibration.unit / calibration.stretch
                                  if recorded else None)
        else:
            signal.fit.record.add(None)
        signal.next = push_ranked(signal.sizes, signal.ranked, signal.next, size)
        return probability

    def _effective_signals(self, st: DetectorState) -> float:
        """How many independent signals the budget is shared among: their number, or fewer where they move
        together (a spike is a noisier and a denser stretch too). Each signal's probability is exact at its
        window's top rank (joint_share), so the share of the stream's last quiet rows whose smallest probability
        is at most joint_share, over joint_share, is how many independent signals they behave as. Rows in or
        just after an incident are not counted; until half a window of rows is, all of them."""
        if not self.joint or st.joint_rows < WINDOW_ROWS // 2:
            return float(self.signals)
        return max(1.0, min(float(self.signals), st.joint_hits / (st.joint_rows * self.joint_share)))

    def _count_joint(self, st: DetectorState, code: int) -> None:
        """One row into the ring of the last WINDOW_ROWS: 1 where the smallest probability was at most
        joint_share, 0 where it was not, -1 for a row not counted."""
        codes = st.joint_codes  # bytes, not push_ring's floats: the compiled detector would pass 1.0 to them
        if len(codes) < WINDOW_ROWS:
            codes.append(code)
        else:
            dropped = codes[st.joint_next]
            if dropped >= 0:
                st.joint_rows -= 1
                st.joint_hits -= dropped
            codes[st.joint_next] = code
            st.joint_next = (st.joint_next + 1) % WINDOW_ROWS
        if code >= 0:
            st.joint_rows += 1
            st.joint_hits += code

    def _push_error(self, st: DetectorState, error: float) -> None:
        """One row's error into the error window (its ring and sorted copy)."""
        st.errors_next = push_ranked(st.errors_ring, st.errors_sorted, st.errors_next, error)
