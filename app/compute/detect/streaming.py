"""anomaly-model-1: a streaming detector that judges each row from the rows before it, robust to what it flags.

Typed Python, no numpy, compiled by mypyc where built (app.compute.detect.native): a row's work is bounded,
so a monitor's new point is judged in the web process from a bounded state, and a whole series in a worker
process row by row. Feeding a series in one call or in any split of calls gives the same numbers (the state
carries everything).

How a row is judged (docs/anomalies.md says why each part is there):

1. Expected value (app.compute.detect.predictors): five one-step predictors, the one with the smallest
   recent mean error gives ``expected``. After a gap of more than LOCAL_ROWS rows only the seasonal
   predictors compete. On a daily season the week's own pattern moves them (app.compute.detect.weekly): a
   value some days ago by how much this hour differed from that day's a week ago, the last values at the turn
   of an hour by the change that turn made a week ago beyond the day before's; each only where two weeks ago
   agrees (a turn in a stream's second week: a week ago alone), so a weekend's start and end are expected and
   one odd week teaches nothing after the second.
2. Calibrated score (app.compute.detect.surprises). ``anomaly_score`` is the probability that the row is not
   normal: one minus the share of normal rows whose error is at least as large, by the stream's own record
   of its last RECORD_ROWS surprises blended with a generalised Pareto tail of its last WINDOW_ROWS errors.
3. An alarm budget. The threshold is 1 - false_alarms_per_week / the rows in a week (or ``confidence``);
   ``is_anomaly`` is exactly score >= threshold. Five signals share the budget: this row's error; over the
   last SHORT_ROWS rows the size of their mean error against the predictor anchored SHORT_ROWS rows back (a
   shift the one-step predictors would follow) and their mean size (a noisier stretch); and over the last
   LONG_ROWS rows their mean size (a denser stretch: spikes that come more often) and the size of their mean
   error against the predictor anchored LONG_ROWS back (a level that moved by less than a shift shows in six
   rows: a low count gone to zero). Each is calibrated against its own window and record; the score is one
   minus k times the smallest of their probabilities (NAB's anomaly likelihood in this detector's terms),
   where k is how many independent signals they behave as on this stream: from 1 (they always agree) to 4
   (they never do; the shift and the level ask one question at two horizons), measured where each signal's
   probability is exact (its window's top rank).
4. Incidents. A row beyond the range, or a window signal beyond its own, opens an incident, or continues the
   open one; it ends after quiet_rows rows in a row with neither (rows, not time: missing points neither end
   nor reset it), when a user marks one of its rows normal, or when it is adopted (5). Within it a row is
   news only as far as it goes beyond the incident's peak on its side (its probability is conditional on the
   peak), and window alarms are the same incident. A habit (app.compute.detect.habits: a deviation this large
   at this time on two of the last three seasons, or a week ago on a daily season, as rare as the default
   budget's range) does too.
5. Robust to what it flags. A row beyond the range does not enter the short-term predictors (last value,
   local mean): they see ``expected`` instead, so the return to normal after a spike is judged against
   normal. An incident whose rows have been beyond the range on one side adopt_rows times is a new level, not
   an incident: its last real values replace the stand-ins, so a deploy that doubled traffic is flagged once,
   stays one open incident, then is the new normal. Seasonal memory keeps real values (a daily pattern that
   changes is learnt the next day; the median of three seasons keeps a one-off spike from echoing a day later).
   Every error enters the scale window, where one rank per incident is all it can take; the window signals'
   records keep only rows outside incidents.

``normal`` marks rows a user said are not anomalies (feedback): they are judged as usual, learnt as normal
rows (one beyond its range is the last value, but the local mean takes its expected value, so a spike marked
normal does not become the level), and end the open incident. ``floor`` is a least half-width (a monitor's
minimum deviation).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from typing import Final

from app.compute.detect import frozen, habits, weekly
from app.compute.detect import predictors as p
from app.compute.detect.budget import DEFAULT_FALSE_ALARMS_PER_WEEK, row_probability
from app.compute.detect.counts import looks_like_counts, stabilised, unstabilised, width_on_scale
from app.compute.detect.state import (
    FROZEN,
    POINT,
    RECORD_CAP,
    SHAPE_ROWS,
    WARMUP,
    DetectorState,
    Verdicts,
    any_flag,
    push_ring,
)
from app.compute.detect.surprises import BINS, RECORD_ROWS, WINDOW_ROWS
from app.compute.detect.values import judged
from app.compute.detect.windows import WindowSignals
from app.series.frequencies import median_gap, period_seconds

TOP_RANK: Final = 24  # the unit of surprise: the 24th-largest error of the window, 2% of a full one
QUIET_ROWS: Final = 48  # an incident ends after this many rows in a row with nothing beyond its range
ADOPT_ROWS: Final = 12  # a run beyond the range on one side this long is a new level: an hour of five-minute rows
HABIT_SHARE: Final = 1 / 12  # how near this time of the season a habit is looked for: two hours of a day
SHORT_ROWS: Final = 6  # the short window of the shift and spread signals: half an hour of five-minute rows
LONG_ROWS: Final = 36  # the long window of the density and level signals: three hours of five-minute rows


def lookback_rows(period: int | None, step: float | None = None) -> int:
    """Rows whose influence a judged row can feel (a bound: the sum of every reach): the rows that count how many
    signals share the budget, the error window (and the long window of its oldest mean, with that window's
    anchor), the record, the chooser, a week of seasons (the weekly habit) and the habit's reach, and where the
    week's pattern is kept (``step`` None: wherever it may be) its hour means: two weeks, three days and
    two hours of a daily season (app.compute.detect.weekly)."""
    season = period or 0
    rows = (2 * WINDOW_ROWS + 2 * LONG_ROWS + RECORD_ROWS + p.CHOOSER_ROWS + 7 * season
            + round(season * HABIT_SHARE) + WARMUP)
    if step is None or weekly.keeps_week(season, step, p.LOCAL_ROWS):
        rows += 17 * season + 2 * round(season / 24)
    return rows


class StreamingDetector(WindowSignals):
    """Configuration only in the constructor; ``update`` judges rows and advances a state."""

    def __init__(
        self,
        *,
        data_frequency: str,
        confidence: float | None = None,
        false_alarms_per_week: float | None = None,
        period: int | None = None,
        floor: tuple[float, float] = (0.0, 0.0),
        top_rank: int = TOP_RANK,
        quiet_rows: int = QUIET_ROWS,
        short_rows: int = SHORT_ROWS,
        long_rows: int = LONG_ROWS,
        level: bool = True,
        habit: float = HABIT_SHARE,
        adopt_rows: int = ADOPT_ROWS,
        joint: bool = True,
        week_pattern: bool = True,
        counts: bool = True,
    ) -> None:
        """The threshold is set by ``false_alarms_per_week`` (default one) or, instead, by ``confidence``: the
        share of normal rows below it. ``period`` in rows overrides the season data_frequency suggests (0:
        none); ``floor`` is (absolute, relative to |expected|): the range is never narrower than either.
        ``top_rank``, ``quiet_rows``, ``short_rows`` (0: no shift and spread signals), ``long_rows`` (0: no
        density and level signals), ``level`` (False: no level signal), ``habit`` (the share of a season a habit
        is looked for either side of a row's time; 0: none), ``adopt_rows`` and ``joint`` (False: every signal
        takes an equal share of the budget, however much they move together) are the constants chosen by
        leave-one-category-out (the benchmark varies them). ``week_pattern`` False: the week's own pattern is not
        learnt (app.compute.detect.weekly). ``counts`` False: a count is judged on its own scale, not on the square-root
        scale (app.compute.detect.counts)."""
        if confidence is not None and false_alarms_per_week is not None:
            raise ValueError("give confidence or false_alarms_per_week, not both")
        self.data_frequency = data_frequency
        self.confidence = confidence
        self.false_alarms_per_week = (DEFAULT_FALSE_ALARMS_PER_WEEK if false_alarms_per_week is None
                                      else false_alarms_per_week)
        self.top_rank = top_rank
        self.quiet_rows = max(1, quiet_rows)
        self.short_rows = short_rows
        self.long_rows = long_rows
        self.level = level and long_rows > 0
        # How far back the anchored predictors are kept: the short window's shift, and the long window's level.
        self.anchor_rows = max(short_rows, long_rows if self.level else 0)
        self.habit = habit
        self.adopt_rows = max(1, adopt_rows)
        self.joint = joint
        self.week_pattern = week_pattern
        self.counts = counts
        # Where each signal's probability is its window's top rank: exact there, whatever the tail model says.
        self.joint_share = top_rank / WINDOW_ROWS
        self.period_override = period
        self.floor_absolute, self.floor_relative = floor
        self._allowed = (math.nan, 0.0)
        # The most signals the budget is shared among (_effective_signals). The level is the shift's question (has
        # the level moved?) over the long window, so the two count once: with the level counted apart, a young
        # stream (k at its most until half a window of rows is counted) would share its budget one way too many
        # and miss window alarms, and on long streams the measured k stays below the most either way.
        self.signals = 1 + (2 if short_rows else 0) + (1 if long_rows else 0)

    def row_probability(self, state: DetectorState) -> float:
        """How often a normal row may be flagged: the budget spread over a week of rows at the stream's step
        (once warm-up fixed it), or one minus ``confidence``."""
        if self.confidence is not None:
            return 1.0 - self.confidence
        if state.step != self._allowed[0]:  # asked on every row, and the step is fixed once warm-up ends
            self._allowed = (state.step, row_probability(self.false_alarms_per_week, state.step))
        return self._allowed[1]

    def threshold(self, state: DetectorState) -> float:
        """``is_anomaly`` is exactly ``anomaly_score >= threshold``."""
        return 1.0 - self.row_probability(state)

    def initial_state(self) -> DetectorState:
        return DetectorState()

    @staticmethod
    def size(state: DetectorState) -> int:
        """Numbers the state holds (what a cache of states is bounded by)."""
        signals = (state.shift, state.spread, state.density, state.level)
        return (len(state.errors_ring) * 2 + sum(len(signal.sizes) * 2 for signal in signals)
                + len(state.short_ring) * 2 + len(state.long_ring) + len(state.level_ring) + len(state.anchors) * 3
                + len(state.marked_slots) * 2 + len(state.joint_codes) // 8
                + 4 * (BINS + 2 + len(state.error_fit.record.codes) // 8)  # a record's code is a byte
                + len(state.chooser_ring) + len(state.slot_ids) * 3 + len(state.hour_ids) * 3 + p.LOCAL_ROWS * 2
                + len(state.recent_flags))

    def update(
        self,
        state: DetectorState,
        times: Sequence[float],
        values: Sequence[float],
        normal: Sequence[bool] | None = None,
    ) -> Verdicts:
        """Judges the rows in order, each from the rows before it, and advances ``state`` past them."""
        out = Verdicts()
        for index, (moment, value) in enumerate(zip(times, values, strict=True)):
            self._row(state, float(moment), float(value), bool(normal[index]) if normal else False, out)
        out.threshold = self.threshold(state)
        return out

    # ------------------------------------------------------------------------------------------ one row

    def _row(self, st: DetectorState, moment: float, value: float, normal: bool, out: Verdicts) -> None:
        value = judged(value)
        st.negative = 1 if value < 0.0 else st.negative
        if st.rows < WARMUP:
            self._warm_up(st, moment, value)
            out.add(value, value, value, 0.0, False, None, False)
            return
        st.rows += 1
        run = frozen.stuck(st, value)
        if st.counts:
            value = stabilised(value)
        st.bucket = math.floor(moment / (SHAPE_ROWS * st.step)) if st.step > 0 else st.rows // SHAPE_ROWS
        now = p.slot(st, moment) if st.period else 0
        carried, excess = p.carry_over_hour(st, now) if st.hour_rows else (0.0, 0.0)
        candidates = p.predictions(st, now, carried, excess)
        choice = p.choose(st, candidates, seasonal_only=bool(st.period) and now - st.last_slot > p.LOCAL_ROWS)
        expected = candidates[choice]
        assert expected is not None
        shown = unstabilised(expected) if st.counts else expected  # on the stream's own scale
        floor = max(self.floor_absolute, self.floor_relative * abs(shown))
        # A perfectly flat stretch must not flag rounding noise; the floor is on the stream's own scale.
        least = max(width_on_scale(expected, floor) if st.counts else floor, 1e-9 + 1e-6 * abs(value))
        rounding = p.rounding(value)
        allowed = self.row_probability(st)
        signals = self._effective_signals(st)
        per_signal = allowed / signals
        residual = p.exact(value - expected, rounding)
        error = abs(residual)
        calibration, halfwidth = self._calibrated(st, st.errors_sorted, st.error_fit, least, per_signal)
        raw = calibration.probability(error)
        deviant = raw <= per_signal
        st.since_deviant = 0 if deviant else st.since_deviant + 1
        point = raw
        if deviant:
            # One incident is one anomaly: within an open incident a row is news only as far as it is beyond
            # the incident's peak, so its probability is conditional on that peak having been seen. A habit
            # likewise, if as rare as the default budget's range: above that budget, noise just beyond the range
            # shows within a habit's reach by chance most days and would explain nearly every row away.
            reach = self._habit_reach(st.period)
            peak, habit = habits.explained(st, now, residual, reach)
            rare = row_probability(DEFAULT_FALSE_ALARMS_PER_WEEK, st.step) / signals
            habitual = habit > peak and (per_signal <= rare or calibration.probability(habit) <= rare)
            reference = habit if habitual else peak
            if reference >= error:
                point = 1.0
            elif reference >= halfwidth:
                point = min(1.0, raw / max(calibration.probability(reference), 1e-300))
            habits.mark(st, now, residual, reach)
        # The record keeps normal rows, and of an incident only its news: incidents must not become normal.
        incident_open = any_flag(st.recent_flags)
        recorded = (not deviant and not incident_open) or (deviant and point <= per_signal)
        st.error_fit.record.add(min(error, RECORD_CAP * halfwidth) / calibration.unit / calibration.stretch
                                if recorded and calibration.unit > 0 else None)
        anchored = p.exact(p.anchored_error(st, now, value, expected, choice, self.short_rows), rounding)
        deep = p.exact(p.anchored_error(st, now, value, expected, choice, self.long_rows), rounding) if self.level \
            else 0.0
        window, signal, size = self._window_probability(st, residual, anchored, deep, least, per_signal,
                                                        incident_open or deviant)
        if point <= window:
            signal, size = POINT, residual
        smallest = min(point, window)
        if self.joint:
            quiet = not (incident_open or deviant) and st.since_window_alarm >= self.quiet_rows
            self._count_joint(st, (1 if smallest <= self.joint_share else 0) if quiet else -1)
        probability = min(1.0, signals * smallest)
        flagged = probability <= allowed
        if incident_open or deviant or flagged:
            frozen.told(st)
        elif run:  # a value that stopped moving: one alarm, an incident as a window signal's is
            probability, flagged, signal, size = allowed, True, FROZEN, float(run)
        st.since_window_alarm += 1
        if flagged and (window < point or signal == FROZEN):
            st.since_window_alarm = 0
        still_open = self._remember_flag(st, residual if deviant else 0.0)
        if normal:  # feedback: the row is normal, so the incident it belonged to is over
            self._end_incident(st)
            still_open = self._incident_open(st)
        lower, upper = expected - halfwidth, expected + halfwidth
        if st.counts:
            lower, upper = unstabilised(lower), unstabilised(upper)
        elif not st.negative:  # a stream never below 0 (a duration, a size) is not expected below 0 either
            shown, lower, upper = max(shown, 0.0), max(lower, 0.0), max(upper, 0.0)
        direction = ("up" if residual > 0 else "down") if flagged else None
        if flagged and st.counts and signal != FROZEN:  # the signal's size in counts, at this row's expected count
            size = math.copysign(unstabilised(expected + abs(size)) - unstabilised(expected), size)
        out.add(shown, lower, upper, 1.0 - probability, flagged, direction, still_open, signal if flagged else 0,
                size if flagged else 0.0)
        self._learn(st, now, value, expected, residual, halfwidth, candidates, deviant and not normal,
                    deviant and normal)
        p.remember_anchor(st, self.anchor_rows)

    def _incident_open(self, st: DetectorState) -> bool:
        return any_flag(st.recent_flags) or st.since_window_alarm < self.quiet_rows

    def _end_incident(self, st: DetectorState) -> None:
        """The incident is over (adopted, or marked normal): the windows start afresh, without its rows."""
        for i in range(len(st.recent_flags)):
            st.recent_flags[i] = 0.0
        st.since_window_alarm = st.since_deviant = 1 << 30
        st.run_side, st.run_rows, st.run_values, st.anchors = 0, 0, [], []
        st.short_ring, st.spread_ring, st.long_ring, st.level_ring = array("d"), array("d"), array("d"), array("d")
        st.short_next = st.long_next = 0

    # ------------------------------------------------------------------------------------ habits, incidents

    def _habit_reach(self, period: int) -> int:
        return round(period * self.habit)

    def _remember_flag(self, st: DetectorState, deviation: float) -> bool:
        """Remembers this row's deviation (0 if not deviant); whether an incident is still open."""
        st.recent_next = push_ring(st.recent_flags, st.recent_next, self.quiet_rows, deviation)
        if self._incident_open(st):
            return True
        st.run_side, st.run_rows, st.run_values = 0, 0, []
        return False

    # -------------------------------------------------------------------------------------- learning

    def _warm_up(self, st: DetectorState, moment: float, value: float) -> None:
        st.rows += 1
        st.warm_times.append(moment)
        st.warm_values.append(value)
        if st.rows == WARMUP:
            self._start(st)

    def _start(self, st: DetectorState) -> None:
        """Scale, step and season, fixed once warm-up ends; its rows then teach the error window on that scale."""
        times = st.warm_times
        if self.counts and looks_like_counts(st.warm_values):
            st.counts = 1
            st.warm_values = [stabilised(value) for value in st.warm_values]
        for index, value in enumerate(st.warm_values):
            if index:
                self._push_error(st, abs(value - st.warm_values[index - 1]))
            p.remember_short(st, value)
        st.origin, st.step = times[0], max(median_gap(times, self.data_frequency), 0.0)
        period = st.period = self.season_rows(st.step)
        if weekly.daily(period, st.step):
            st.week = 7 * period
            if self.week_pattern:
                weekly.start(st, p.LOCAL_ROWS)
        if period:
            size = 3 * period + 2 + self._habit_reach(period)
            st.slot_ids = array("q", [-(1 << 62)]) * size
            st.slot_values = array("d", [0.0]) * size
            st.slot_residuals = array("d", [0.0]) * size
            st.slot_deviant = array("b", [0]) * size
            for moment, value in zip(times, st.warm_values, strict=True):
                p.remember_season(st, p.slot(st, moment), value)
        st.warm_times, st.warm_values = [], []

    def season_rows(self, step: float) -> int:
        """The season in rows ``step`` seconds apart (the constructor's, or the data frequency's); 0 for none."""
        if self.period_override is not None:
            return self.period_override if self.period_override >= 2 and step > 0 else 0
        seconds = period_seconds(self.data_frequency, step)
        return round(seconds / step) if seconds else 0

    def rebuild_rows(self, times: Sequence[float]) -> int:
        """How many of a series' newest rows a state rebuilt from them needs (``times``: the newest few): the
        look-back of their median gap (as warm-up reads the step) and its season. More rows give the same state,
        but for the scale of a count near app.compute.detect.counts' edge, which the first rows replayed decide."""
        step = median_gap(times, self.data_frequency)
        return lookback_rows(self.season_rows(step), step)

    def _learn(
        self, st: DetectorState, now: int, value: float, expected: float, residual: float, halfwidth: float,
        candidates: list[float | None], flagged: bool, told: bool,
    ) -> None:
        """``residual``: the row's error (0 within rounding); ``flagged``: the row was beyond its range; ``told``: it
        was, and a user said it is normal."""
        self._push_error(st, abs(residual))
        p.score_predictors(st, candidates, value, halfwidth if flagged else None)
        p.remember_season(st, now, value, residual, flagged)
        if told:
            # The last value (a level the stream keeps is read from there), not a sample of the local level: a
            # spike told normal that entered the local mean made the rows back at normal deviate, and their
            # stand-ins (the expected value) kept the mean up until they were adopted.
            p.remember_short(st, expected)
            st.last = value
            return
        if not flagged:
            p.remember_short(st, value)
            return
        side = 1 if value > expected else -1
        if side != st.run_side:
            st.run_side, st.run_rows, st.run_values = side, 0, []
        st.run_rows += 1
        st.run_values = [*st.run_values[1 - p.LOCAL_ROWS:], value]
        p.remember_short(st, expected)
        if st.run_rows >= self.adopt_rows:  # a new level, not an incident: adopt it
            for offset, real in enumerate(reversed(st.run_values)):
                st.local[-1 - offset] = real
            st.last = value
            self._end_incident(st)
