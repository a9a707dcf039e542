"""anomaly-model-1: a streaming detector that judges each row from the rows before it, robust to what it flags.

Plain Python, no numpy: a row costs a few microseconds, so a monitor's new point is judged in the web
process from a bounded state, and a whole series in a worker process row by row. Feeding a series in one
call or in any split of calls gives the same numbers (the state carries everything).

How a row is judged (docs/anomalies.md says why each part is there):

1. Expected value. Five one-step predictors: the value one season ago, the last value plus the change
   seen one season ago, the median of the values one, two and three seasons ago, the last value, and the
   mean of the last LOCAL_ROWS values. The one with the smallest mean error (errors taken to the power
   CHOOSER_POWER, so one huge miss does not disqualify a close predictor) over the last CHOOSER_ROWS rows
   gives ``expected``; a predictor competes once it has been scored for a season (or CHOOSER_ROWS rows).
   Seasons are looked up by time: a row's slot is its distance from the first row in nominal steps, so
   gaps, jitter and repeated or backward timestamps need nothing special.
   After a gap of more than LOCAL_ROWS rows only the seasonal predictors compete (when one is ready).
2. Calibrated score (app.compute.detect.surprises). ``anomaly_score`` is the probability that the row is not
   normal: one minus the share of normal rows whose error is at least as large, by the stream's own record
   of its last RECORD_ROWS surprises blended with a generalised Pareto tail of its last WINDOW_ROWS errors.
3. An alarm budget. The threshold is 1 - false_alarms_per_week / the rows in a week (or ``confidence``);
   ``is_anomaly`` is exactly score >= threshold. Three signals share the budget: this row's error, and over
   the last SHORT_ROWS rows the size of their mean error (a shift) and their mean size (a noisier
   stretch), each calibrated against its own window and record; the score is one minus three times the
   smallest of their probabilities (NAB's anomaly likelihood in this detector's terms).
4. One incident, one anomaly; habits. Within QUIET_ROWS of a row beyond the range on the same side, or
   where a habit (a deviation this large at this time on two of the last three seasons, or a week ago on
   a daily season) explains it, a row's probability is conditional on the deviation already seen: 1 when
   it is no larger. A short-window alarm during an incident, or within QUIET_ROWS of another, is the same.
5. Robust to what it flags. A flagged row does not enter the short-term predictors (last value, local
   mean): they see ``expected`` instead, so the return to normal after a spike is judged against normal.
   After REANCHOR_ROWS flagged rows in a row on the same side the new level is adopted: those rows' real
   values replace the stand-ins, so a deploy that doubled traffic is flagged once, then is the new normal.
   Seasonal memory keeps real values (a daily pattern that changes is learnt the next day; the median of
   three seasons keeps a one-off spike from echoing a day later), and every error enters the scale window,
   where one rank per incident is all it can take.

``normal`` marks rows a user said are not anomalies (feedback): they are judged as usual but learnt as
normal rows. ``floor`` is a least half-width (a monitor's minimum deviation).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence

from app.compute.detect.budget import DEFAULT_FALSE_ALARMS_PER_WEEK, row_probability
from app.compute.detect.state import PREDICTORS, DetectorState, ShortSignal, SignalFit, Verdicts, push_ranked
from app.compute.detect.surprises import BINS, RECORD_ROWS, WINDOW_ROWS, Calibration, calibrate, floored, tail_shape
from app.series.frequencies import DAY, MAX_PERIOD_ROWS, PERIOD_CANDIDATES

# Rows 0..WARMUP-1 only teach the detector; with the 12-point minimum the last row is still judged.
WARMUP = 11
TOP_RANK = 12  # the unit of surprise: the 12th-largest error of the window, 1% of a full one
SHAPE_ROWS = 64  # the window's tail and the threshold are refitted every 64 steps of the stream (docs/anomalies.md)
# A surprise beyond the threshold enters the record at most at twice the threshold: a heavy tail is still
# learnt (the threshold can climb twice as high with each such row), but one spike on a young stream cannot
# widen its range to the spike's size.
RECORD_CAP = 2.0
MAX_MARKED = 2048  # deviant rows a week's habit remembers at most
CHOOSER_ROWS = 288  # errors that choose the predictor: a day of five-minute rows
CHOOSER_POWER = 0.25
LOCAL_ROWS = 8
REANCHOR_ROWS = 3
QUIET_ROWS = 48  # one incident, one anomaly: how long a flagged deviation stays the news
HABIT_SHARE = 1 / 12  # how near this time of the season a habit is looked for: two hours of a day
SHORT_ROWS = 6  # the short window whose mean error is the second signal: half an hour of five-minute rows
_LAST = 3
_SHORT_TERM = (1, 3, 4)  # the predictors that read the last rows: season-adjusted last, last, local mean


def lookback_rows(period: int | None) -> int:
    """Rows whose influence a judged row can feel (a bound: the sum of every reach): the error window (and the
    short window of its oldest mean), the record, the chooser, a week of seasons (the weekly habit) and the
    habit's reach."""
    season = period or 0
    return (WINDOW_ROWS + SHORT_ROWS + RECORD_ROWS + CHOOSER_ROWS + 7 * season + round(season * HABIT_SHARE)
            + WARMUP)


class StreamingDetector:
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
        habit: float = HABIT_SHARE,
    ) -> None:
        """The threshold is set by ``false_alarms_per_week`` (default one) or, instead, by ``confidence``: the
        share of normal rows below it. ``period`` in rows overrides the season data_frequency suggests (0:
        none); ``floor`` is (absolute, relative to |expected|): the range is never narrower than either.
        ``top_rank``, ``quiet_rows``, ``short_rows`` (0: no second signal) and ``habit`` (the share
        of a season a habit is looked for either side of a row's time; 0: none) are the constants chosen by
        leave-one-category-out (the benchmark varies them)."""
        if confidence is not None and false_alarms_per_week is not None:
            raise ValueError("give confidence or false_alarms_per_week, not both")
        self.data_frequency = data_frequency
        self.confidence = confidence
        self.false_alarms_per_week = (DEFAULT_FALSE_ALARMS_PER_WEEK if false_alarms_per_week is None
                                      else false_alarms_per_week)
        self.top_rank = top_rank
        self.quiet_rows = quiet_rows
        self.short_rows = short_rows
        self.habit = habit
        self.period_override = period
        self.floor_absolute, self.floor_relative = floor

    def row_probability(self, state: DetectorState) -> float:
        """How often a normal row may be flagged: the budget spread over a week of rows at the stream's step
        (once warm-up fixed it), or one minus ``confidence``."""
        if self.confidence is not None:
            return 1.0 - self.confidence
        return row_probability(self.false_alarms_per_week, state.step)

    def threshold(self, state: DetectorState) -> float:
        """``is_anomaly`` is exactly ``anomaly_score >= threshold``."""
        return 1.0 - self.row_probability(state)

    def initial_state(self) -> DetectorState:
        return DetectorState()

    @staticmethod
    def size(state: DetectorState) -> int:
        """Numbers the state holds (what a cache of states is bounded by)."""
        return (len(state.errors_ring) * 2 + len(state.shift.sizes) * 2 + len(state.spread.sizes) * 2
                + len(state.short_ring) + len(state.marked_slots) * 2
                + 3 * (BINS + 2 + len(state.error_fit.record.codes) // 8)  # a record's code is a byte
                + len(state.chooser_ring) + len(state.slot_ids) * 3 + LOCAL_ROWS + QUIET_ROWS)

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
        if st.rows < WARMUP:
            self._warm_up(st, moment, value)
            _emit(out, value, value, value, 0.0, False, None)
            return
        st.rows += 1
        predictions = self._predictions(st, moment)
        choice = self._choose(st, predictions, moment)
        expected = predictions[choice]
        assert expected is not None
        least = max(
            self.floor_absolute,
            self.floor_relative * abs(expected),
            1e-9 + 1e-6 * abs(value),  # a perfectly flat stretch must not flag rounding noise
        )
        allowed = self.row_probability(st)
        # Three signals are read at once (this row; the last few rows' mean error and their mean size), so each
        # gets a third of the budget.
        signals = 3 if self.short_rows else 1
        per_signal = allowed / signals
        residual = value - expected
        error = abs(residual)
        calibration, halfwidth = self._calibrated(st, moment, st.errors_sorted, st.error_fit, least, per_signal)
        raw = calibration.probability(error)
        deviant = raw <= per_signal
        point = raw
        if deviant:
            # One incident is one anomaly: within an open incident a row is news only as far as it is beyond
            # the incident's peak, so its probability is conditional on that peak having been seen. A habit (a
            # deviation as large at this time in two of the last three seasons, or a week ago) likewise.
            reference = self._explained(st, moment, residual)
            if reference >= error:
                point = 1.0
            elif reference >= halfwidth:
                point = min(1.0, raw / max(calibration.probability(reference), 1e-300))
            self._mark(st, moment, residual)
        # The record keeps normal rows, and of an incident only its news: incidents must not become normal.
        incident_open = any(st.recent_flags)
        recorded = (not deviant and not incident_open) or (deviant and point <= per_signal)
        st.error_fit.record.add(min(error, RECORD_CAP * halfwidth) / calibration.unit / calibration.stretch
                                if recorded and calibration.unit > 0 else None)
        short, drift = self._short_probability(st, moment, residual, least, per_signal, incident_open or deviant)
        probability = min(1.0, signals * min(point, short))
        flagged = probability <= allowed
        if flagged and short < point:
            st.since_short_alarm = 0
        _emit(out, expected, expected - halfwidth, expected + halfwidth, 1.0 - probability, flagged,
              ("up" if residual > 0 else "down") if flagged else None)
        self._remember_flag(st, residual if deviant else 0.0)
        self._learn(st, moment, value, expected, halfwidth, predictions, deviant and not normal)

    def _calibrated(self, st: DetectorState, moment: float, ranked: array, fit: SignalFit, least: float,
                    per_signal: float) -> tuple[Calibration, float]:
        """The signal's calibration for this row and the error at which its probability is ``per_signal``
        (never below ``least``). The window's tail and that error are refitted every SHAPE_ROWS rows (every
        sixteenth of the window's rows while it is young): they move slowly, and a refit costs a hundred
        logarithms and a bisection."""
        calibration = fit.calibration
        # Refits fall on the stream's clock (every SHAPE_ROWS steps of epoch time), not on a count of rows, so a
        # state rebuilt from the last rows of a stored series refits where the one that judged them did.
        bucket = math.floor(moment / (SHAPE_ROWS * st.step)) if st.step > 0 else st.rows // SHAPE_ROWS
        young = len(ranked) < WINDOW_ROWS
        if calibration is None or (st.rows - fit.at >= max(1, len(ranked) // 16) if young else bucket != fit.bucket):
            # A young window's shape is mostly noise (and a bimodal start, a daily step not yet predicted, reads
            # as a heavy tail): it counts in proportion to how full the window is, exponential before.
            shape = tail_shape(ranked, self.top_rank) * min(1.0, len(ranked) / WINDOW_ROWS)
            calibration = calibrate(ranked, self.top_rank, shape, fit.record)
            fit.calibration, fit.at, fit.bucket = calibration, st.rows, bucket
            fit.edge = calibration.quantile(per_signal) if calibration.unit > 0 else 0.0
        return floored(calibration, fit.edge, least, per_signal), max(fit.edge, least)

    def _short_probability(self, st: DetectorState, moment: float, error: float, least: float, per_signal: float,
                           incident: bool) -> tuple[float, float]:
        """The calibrated probability of the last short_rows rows together (this one included, each error
        capped at the largest of the window): the size of their mean error (a shift) and their mean size (a
        noisier stretch), each read against the WINDOW_ROWS such numbers before it and its own record as one
        error is; the smaller of the two, and the mean error (its sign is the side). ``incident``: a row was
        judged deviant lately (or this one is)."""
        k = self.short_rows
        st.since_short_alarm += 1
        if not k:
            return 1.0, 0.0
        ring = st.short_ring
        capped = error
        if st.errors_sorted:  # one wild row must not carry the mean by itself: that row is judged on its own
            capped = max(-st.errors_sorted[-1], min(error, st.errors_sorted[-1]))
        if len(ring) < k:
            ring.append(capped)
        else:
            ring[st.short_next] = capped
            st.short_next = (st.short_next + 1) % k
        if len(ring) < k:
            return 1.0, 0.0
        drift = sum(ring) / k
        spread = sum(abs(x) for x in ring) / k
        shift_p = self._short_signal(st, moment, st.shift, abs(drift), least, per_signal, incident)
        spread_p = self._short_signal(st, moment, st.spread, spread, least, per_signal, incident)
        return min(shift_p, spread_p), drift

    def _short_signal(self, st: DetectorState, moment: float, signal: ShortSignal, size: float, least: float,
                      per_signal: float, incident: bool) -> float:
        probability = 1.0
        if len(signal.ranked) >= WARMUP:
            calibration, edge = self._calibrated(st, moment, signal.ranked, signal.fit, least, per_signal)
            probability = calibration.probability(size)
            told = probability <= per_signal and (st.since_short_alarm <= self.quiet_rows or incident)
            if told:
                # The same incident: a row was judged deviant lately (on its own, news or explained), or this
                # change was already told.
                probability = 1.0
            recorded = not told and (probability <= per_signal or not incident) and calibration.unit > 0
            signal.fit.record.add(min(size, RECORD_CAP * edge) / calibration.unit / calibration.stretch
                                  if recorded else None)
        else:
            signal.fit.record.add(None)
        signal.next = push_ranked(signal.sizes, signal.ranked, signal.next, size)
        return probability

    def _habit_reach(self, period: int) -> int:
        return round(period * self.habit)

    def _explained(self, st: DetectorState, moment: float, residual: float) -> float:
        """The largest deviation on this row's side that explains it: the peak of an open incident (rows judged
        deviant in the last quiet_rows rows), or a habit: the deviation seen within the habit's reach of this
        time of the season in two of the last three seasons (the second largest of their largest), or at this
        time a week ago on a daily season. 0 if none."""
        side = 1.0 if residual > 0 else -1.0
        explained = max(0.0, max((side * earlier for earlier in st.recent_flags), default=0.0))
        reach = self._habit_reach(st.period)
        if not reach or explained >= abs(residual):
            return explained
        slot = self._slot(st, moment)
        ids, residuals, size = st.slot_ids, st.slot_residuals, len(st.slot_ids)
        largest = []
        for back in (1, 2, 3):
            centre = slot - back * st.period
            seen = 0.0
            for near in range(centre - reach, centre + reach + 1):
                position = near % size
                if ids[position] == near:
                    seen = max(seen, side * residuals[position])
            largest.append(seen)
        explained = max(explained, sorted(largest)[1])
        if st.week:
            low, high = slot - st.week - reach, slot - st.week + reach
            for marked, deviation in zip(st.marked_slots, st.marked_residuals, strict=True):
                if low <= marked <= high:
                    explained = max(explained, side * deviation)
        return explained

    def _mark(self, st: DetectorState, moment: float, residual: float) -> None:
        """Remembers a deviant row for a week and the habit's reach (a daily season's weekly habit)."""
        if not st.week:
            return
        slot = self._slot(st, moment)
        oldest = slot - st.week - self._habit_reach(st.period)
        drop = 0
        while drop < len(st.marked_slots) and (st.marked_slots[drop] < oldest or len(st.marked_slots) - drop
                                               >= MAX_MARKED):
            drop += 1
        if drop:
            del st.marked_slots[:drop]
            del st.marked_residuals[:drop]
        st.marked_slots.append(slot)
        st.marked_residuals.append(residual)

    def _remember_flag(self, st: DetectorState, deviation: float) -> None:
        if not self.quiet_rows:
            return
        if len(st.recent_flags) < self.quiet_rows:
            st.recent_flags.append(deviation)
        else:
            st.recent_flags[st.recent_next] = deviation
            st.recent_next = (st.recent_next + 1) % self.quiet_rows

    def _warm_up(self, st: DetectorState, moment: float, value: float) -> None:
        if st.rows:
            self._push_error(st, abs(value - st.last))
        st.rows += 1
        st.warm_times.append(moment)
        st.warm_values.append(value)
        self._remember_short(st, value)
        if st.rows == WARMUP:
            self._start(st)

    def _start(self, st: DetectorState) -> None:
        """Nominal step and season, fixed once warm-up ends so later rows never change them."""
        times = st.warm_times
        gaps = sorted(b - a for a, b in zip(times, times[1:], strict=False))
        step = gaps[len(gaps) // 2] if gaps else 0.0
        st.origin, st.step = times[0], max(step, 0.0)
        period = 0
        if st.step > 0:
            if self.period_override is not None:
                period = self.period_override if self.period_override >= 2 else 0
            else:
                for seconds in PERIOD_CANDIDATES.get(self.data_frequency, ()):
                    rows = seconds / st.step
                    if 4 <= rows <= MAX_PERIOD_ROWS:
                        period = round(rows)
                        break
        st.period = period
        if period and abs(period * st.step - DAY) <= st.step:
            st.week = 7 * period
        if period:
            size = 3 * period + 2 + self._habit_reach(period)
            st.slot_ids = array("q", [-(1 << 62)]) * size
            st.slot_values = array("d", [0.0]) * size
            st.slot_residuals = array("d", [0.0]) * size
            for moment, value in zip(times, st.warm_values, strict=True):
                self._remember_season(st, moment, value)
        st.warm_times, st.warm_values = [], []

    def _slot(self, st: DetectorState, moment: float) -> int:
        return math.floor((moment - st.origin) / st.step + 0.5)

    def _season(self, st: DetectorState, slot: int) -> float | None:
        position = slot % len(st.slot_ids)
        return st.slot_values[position] if st.slot_ids[position] == slot else None

    def _predictions(self, st: DetectorState, moment: float) -> list[float | None]:
        predictions: list[float | None] = [None, None, None, st.last, sum(st.local) / len(st.local)]
        period = st.period
        if period:
            slot = self._slot(st, moment)
            one = self._season(st, slot - period)
            if one is not None:
                predictions[0] = one
                before = self._season(st, st.last_slot - period)
                if before is not None:
                    predictions[1] = st.last + one - before
                two, three = self._season(st, slot - 2 * period), self._season(st, slot - 3 * period)
                if two is not None and three is not None:
                    predictions[2] = sorted((one, two, three))[1]
        return predictions

    def _choose(self, st: DetectorState, predictions: list[float | None], moment: float) -> int:
        scored = st.chooser_rows
        needed = min(scored, max(st.period, LOCAL_ROWS))
        ready = [j for j, prediction in enumerate(predictions)
                 if prediction is not None and st.chooser_count[j] and st.chooser_count[j] >= needed]
        # After a gap longer than the local window the last values describe another time of the season: the
        # seasonal predictors alone compete, if one is ready.
        if st.period and self._slot(st, moment) - st.last_slot > LOCAL_ROWS:
            seasonal = [j for j in ready if j not in _SHORT_TERM]
            ready = seasonal or ready
        best, best_error = _LAST, math.inf
        for j in ready:  # seasonal predictors come first: on a tie the season wins
            error = st.chooser_sum[j] / st.chooser_count[j]
            if error < best_error:
                best, best_error = j, error
        return best

    # -------------------------------------------------------------------------------------- learning

    def _learn(
        self, st: DetectorState, moment: float, value: float, expected: float, halfwidth: float,
        predictions: list[float | None], flagged: bool,
    ) -> None:
        self._push_error(st, abs(value - expected))
        # A flagged row counts against each predictor at most as a miss by the range's half-width, so an
        # incident does not decide which predictor judges the rows after it.
        if flagged:
            errors = [None if p is None else min(abs(p - value), halfwidth) ** CHOOSER_POWER for p in predictions]
        else:
            errors = [None if p is None else abs(p - value) ** CHOOSER_POWER for p in predictions]
        self._push_choice(st, errors)
        self._remember_season(st, moment, value, value - expected)
        if not flagged:
            st.run, st.run_side = [], 0
            self._remember_short(st, value)
            return
        side = 1 if value > expected else -1
        if side != st.run_side:
            st.run, st.run_side = [], side
        st.run.append((moment, value))
        self._remember_short(st, expected)
        if len(st.run) >= REANCHOR_ROWS:  # a new level, not an incident: adopt it
            for offset, (_, real) in enumerate(reversed(st.run[-len(st.local):])):
                st.local[-1 - offset] = real
            st.last = value
            st.run, st.run_side = [], 0

    def _remember_short(self, st: DetectorState, value: float) -> None:
        st.last = value
        st.local.append(value)
        if len(st.local) > LOCAL_ROWS:
            del st.local[0]

    def _remember_season(self, st: DetectorState, moment: float, value: float, residual: float = 0.0) -> None:
        if st.period:
            slot = self._slot(st, moment)
            position = slot % len(st.slot_ids)
            st.slot_ids[position], st.slot_values[position] = slot, value
            st.slot_residuals[position] = residual
            st.last_slot = slot

    def _push_error(self, st: DetectorState, error: float) -> None:
        st.errors_next = push_ranked(st.errors_ring, st.errors_sorted, st.errors_next, error)

    def _push_choice(self, st: DetectorState, errors: list[float | None]) -> None:
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


def _emit(out: Verdicts, expected: float, lower: float, upper: float, score: float, flagged: bool,
          direction: str | None) -> None:
    out.expected.append(expected)
    out.lower.append(lower)
    out.upper.append(upper)
    out.score.append(score)
    out.is_anomaly.append(flagged)
    out.direction.append(direction)
