"""anomaly-model-1: a streaming detector whose score is a calibrated probability, thresholded by an alarm budget.

Plain Python, no numpy: a row costs a few microseconds, so a monitor's new point is judged in the web
process from a bounded state, and a whole series in a worker process row by row. Feeding a series in one
call or in any split of calls gives the same numbers (the state carries everything).

How a row is judged (docs/anomalies.md says why each part is there):

1. Expected value. Five one-step predictors: the value one season ago, the last value plus the change
   seen one season ago, the median of the values one, two and three seasons ago, the last value, and the
   mean of the last LOCAL_ROWS values. The one with the smallest mean error (errors taken to the power
   CHOOSER_POWER, so one huge miss does not disqualify a close predictor) over the last CHOOSER_ROWS rows
   gives ``expected``. Seasons are looked up by time (a row's slot is its distance from the first row in
   nominal steps), so gaps, jitter and repeated or backward timestamps need nothing special.
2. Surprise, and its tail probability. Two surprises a row: its absolute error, and the mean of the last
   SHORT_ROWS errors each capped at the start of the error tail (how often the stream has been off lately,
   not how far: denser spikes, a noisier stretch, an outage too small for one row to tell). Each is read
   against the stream's own distribution of that surprise (``Surprises``): below the tail, the share of
   the last WINDOW_ROWS that were at least as large (a conformal p-value); in the tail (the top
   TAIL_SHARE), a generalised Pareto distribution fitted to the last TAIL_SAMPLES exceedances, so heavy
   tails (Student-t, bursts) and light ones (Gaussian) are both extrapolated by their own shape. The row's
   probability of being normal is the smaller of the two, and ``score`` = 1 - that probability.
3. Threshold. A budget of false alarms per week (default DEFAULT_FALSE_ALARMS_PER_WEEK) over the rows a
   week holds at the stream's nominal step gives the probability a row may have by chance:
   ``is_anomaly`` = score >= 1 - budget * step / week, ``threshold`` in the verdicts. The expected range
   is where a row's own error would reach that threshold.
4. Incidents. A row at or over the threshold opens an incident (``is_anomaly``, ``incident`` "open"). While
   it is open, a row's score is the probability that it is further off than every row of the incident so far,
   1 - p(its error) / p(the incident's largest error), both read under today's distribution: a worse row
   raises the alarm again, the rest of the incident does not. It closes after CLOSE_ROWS rows in a row that
   are normal again (probability above NORMAL_P); after ADOPT_ROWS rows that are not, what it shows is the
   new normal ("adopted": a deploy that doubled traffic); or at a row a user marked normal ("feedback").
   Missing points are no rows: a gap neither closes nor ages an incident.
5. Learning. Rows of an incident that are not normal teach the surprise distributions their error capped at
   the range (surprises of the threshold's size happen, as a stream whose bursts are normal must learn, and
   nothing beyond); the short-term predictors see ``expected`` instead of their values and the predictor
   chooser counts them as misses of at most the range. On adoption the short-term predictors take the real
   values of the incident's last rows and the chooser starts again.

``normal`` marks rows a user said are not anomalies (feedback): judged as usual, learnt as normal, and
closing the incident. ``floor`` is a least half-width (a monitor's minimum deviation): a smaller error is
never an anomaly.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, insort
from collections.abc import Sequence
from dataclasses import dataclass, field

from app.compute.detect.results import (
    DEFAULT_FALSE_ALARMS_PER_WEEK,
    budget_for_confidence,
    budget_for_sensitivity,
    confidence_for_budget,
)
from app.series.frequencies import MAX_PERIOD_ROWS, PERIOD_CANDIDATES

__all__ = [
    "DEFAULT_FALSE_ALARMS_PER_WEEK",
    "WARMUP",
    "DetectorState",
    "StreamingDetector",
    "Verdicts",
    "budget_for_confidence",
    "budget_for_sensitivity",
    "confidence_for_budget",
    "lookback_rows",
    "threshold_for",
]

# ---------------------------------------------------------------------------------------------- constants
# Each named once, with why. The benchmark (bench/anomaly.py, bench/synthetic.py) varies the ones the
# constructor takes, by leave-one-category-out on NAB and on the synthetic streams.
WARMUP = 11  # rows 0..WARMUP-1 only teach the detector; with the 12-point minimum the last row is judged
WEEK_SECONDS = 7 * 86400.0
WINDOW_ROWS = 1200  # the recent surprises the body of their distribution is read from: four days of 5-minute rows
TAIL_SHARE = 0.02  # the top 2% of surprises are the tail: its shape is fitted near where alarms are, 24 in a window
TAIL_SAMPLES = 256  # exceedances the tail's shape is fitted on: a long run (about 5,000 rows) of the stream
# A young stream's tail before it has its own: moderately heavy (shape 0.25) with the unit scale, worth
# TAIL_PRIOR_WEIGHT exceedances, so its first weeks alarm less, not more, than a calibrated stream.
TAIL_PRIOR_SHAPE = 0.25
TAIL_PRIOR_WEIGHT = 16.0
MIN_FIT = 8  # fewer exceedances than this tell no shape: the prior stands until then
FIT_EVERY = 8  # a full sample is refitted every 8th exceedance: the fit moves by 1/32 of its sample meanwhile
SHAPE_LIMITS = (-0.4, 0.45)  # the fitted shape is kept where its moment estimator is defined (below 0.5)
UNIT_SHARE = 0.5  # the unit of surprise is the median error: half of the window must move to move it
CHOOSER_ROWS = 288  # errors that choose the predictor: a day of five-minute rows
CHOOSER_POWER = 0.25  # one huge miss must not disqualify a predictor that is close on every other row
LOCAL_ROWS = 8  # the local mean: short enough to follow a level, long enough to smooth a noisy one
SHORT_ROWS = 6  # the short window of the second surprise: half an hour of five-minute rows
NORMAL_P = 0.01  # a row inside an incident is normal again when a normal stream shows it 1 time in 100 or more
CLOSE_ROWS = 48  # normal rows in a row that close an incident: four hours of five-minute rows
ADOPT_ROWS = 144  # abnormal rows after which an incident is the new normal: twelve hours of five-minute rows
FLOOR_RELATIVE = 1e-6  # a perfectly flat stretch must not flag rounding noise
LEAST_P = 1e-300  # a bounded tail says 0 beyond its end; an incident's peak is divided by, so never quite 0
MEANS_UNIT_FLOOR = 1e-3  # short-window means are in error units: a thousandth of one is no change at all
# Two surprises judge a row and the smaller probability counts: at most twice the chance of one, and measured on
# the synthetic streams within the budget (halving each, Bonferroni, missed a third of NAB's windows for nothing).
LOOKS = 1.0
_PREDICTORS = 5  # season, season-adjusted last, median of three seasons, last, local mean
_LAST = 3


def threshold_for(false_alarms_per_week: float, step_seconds: float) -> float:
    """The score at which a row is an anomaly: 1 - the chance a row may have under the budget."""
    rows_per_week = WEEK_SECONDS / step_seconds if step_seconds > 0 else WEEK_SECONDS
    return 1.0 - min(0.5, false_alarms_per_week / rows_per_week)


def lookback_rows(period: int | None) -> int:
    """Rows whose influence a judged row can feel, not counting the fitted tail (a summary of older rows that
    a rebuild from this many rows learns again): the surprise windows, the chooser, three seasons."""
    return WINDOW_ROWS + SHORT_ROWS + CHOOSER_ROWS + 3 * (period or 0) + WARMUP


@dataclass
class Verdicts:
    expected: list[float] = field(default_factory=list)
    lower: list[float] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)
    score: list[float] = field(default_factory=list)
    is_anomaly: list[bool] = field(default_factory=list)
    direction: list[str | None] = field(default_factory=list)
    # Per row: "open" (the row opened an incident), "closed", "adopted", "feedback" (the incident ended at
    # this row, for that reason), or None. An incident's alarm is its first ``is_anomaly`` row.
    incident: list[str | None] = field(default_factory=list)
    threshold: float = 1.0  # is_anomaly == (score >= threshold) on every row


def _floats() -> array:
    return array("d")


@dataclass
class Surprises:
    """One surprise's distribution in a stream: the last WINDOW_ROWS values (a ring and its sorted copy) and the
    tail's exceedances beyond the window's top TAIL_SHARE, in units of the window's median (a ring,
    its sorted copy, and the generalised Pareto fitted to them)."""

    ring: array = field(default_factory=_floats)
    ranked: array = field(default_factory=_floats)
    next: int = 0
    excess_ring: array = field(default_factory=_floats)
    excess_ranked: array = field(default_factory=_floats)
    excess_next: int = 0
    shape: float = TAIL_PRIOR_SHAPE
    scale: float = 1.0
    cut: float = 0.0  # where the tail starts: the window's TAIL_SHARE-th largest value
    cut_count: int = 0  # window values at or above it
    unit_value: float = 0.0
    exceedances: int = 0

    def unit(self) -> float:
        """The median surprise; where more than half are nil (sparse counts, a stream that is mostly flat), a
        quarter of the tail's start, so the tail is measured in steps a person would notice."""
        return self.unit_value

    def start(self) -> tuple[float, int]:
        """Where the tail starts and how many window values reach it."""
        return self.cut, self.cut_count

    def _refresh(self) -> None:
        # Read on every row, changed only by learn: kept rather than looked up (a sixth of a row's cost).
        ranked = self.ranked
        n = len(ranked)
        if n == WINDOW_ROWS:
            k, middle = _FULL_CUT_COUNT, _FULL_UNIT_INDEX
        else:
            k = max(1, math.ceil(TAIL_SHARE * n))
            middle = min(n - 1, int((1.0 - UNIT_SHARE) * n))
        self.cut, self.cut_count = ranked[n - k], k
        quartile = ranked[middle]
        self.unit_value = quartile if quartile > 0.0 else 0.25 * self.cut

    def probability(self, value: float, unit: float) -> float:
        """The chance that this stream shows a surprise at least ``value`` (``unit``: self.unit(), passed in
        because the caller needs it too)."""
        ranked = self.ranked
        n = len(ranked)
        if not n:
            return 1.0
        start, k = self.cut, self.cut_count
        count = n - bisect_left(ranked, value)
        if value <= start or unit <= 0.0:
            return (count + 1) / (n + 1)
        # The tail extrapolates; it never calls a surprise rarer than the window has just shown it to be.
        # Seen once before in the window, a surprise is still news (a young stream's one spike must not make the
        # next one normal); seen twice, the window's own share is the least it can be.
        return max((count - 1) / (n + 1),
                   (k + 1) / (n + 1) * _pareto_tail((value - start) / unit, self.shape, self.scale))

    def quantile(self, probability: float, unit: float) -> float:
        """The least surprise whose probability is at most ``probability``."""
        ranked = self.ranked
        n = len(ranked)
        if not n:
            return math.inf
        start, k = self.cut, self.cut_count
        at_start = (k + 1) / (n + 1)
        if probability >= at_start:
            allowed = int(probability * (n + 1)) - 1  # values that may lie at or above the answer
            index = n - 1 - allowed
            return ranked[0 if index < 0 else (n - 1 if index > n - 1 else index)]
        allowed = int(probability * (n + 1))  # the window's own largest values bound the answer from below
        seen = ranked[n - 2 - allowed] if allowed + 1 < n else 0.0
        ratio = probability / at_start
        shape, scale = self.shape, self.scale
        reach = -scale * math.log(ratio) if abs(shape) < 1e-6 else scale * (ratio ** -shape - 1.0) / shape
        reach = start + unit * reach
        return seen if seen > reach else reach

    def learn(self, value: float, unit: float) -> None:
        ring, ranked = self.ring, self.ranked
        if value > self.cut and unit > 0.0 and ranked:
            self._exceed((value - self.cut) / unit)
        if len(ring) == WINDOW_ROWS:
            position = self.next
            del ranked[bisect_left(ranked, ring[position])]
            ring[position] = value
            self.next = (position + 1) % WINDOW_ROWS
        else:
            ring.append(value)
        insort(ranked, value)
        self._refresh()

    def _exceed(self, excess: float) -> None:
        ring, ranked = self.excess_ring, self.excess_ranked
        if len(ring) < TAIL_SAMPLES:
            ring.append(excess)
        else:
            del ranked[bisect_left(ranked, ring[self.excess_next])]
            ring[self.excess_next] = excess
            self.excess_next = (self.excess_next + 1) % TAIL_SAMPLES
        insort(ranked, excess)
        self.exceedances += 1
        if self.exceedances % FIT_EVERY == 0 or len(ranked) < TAIL_SAMPLES:
            self._fit()

    def _fit(self) -> None:
        """Probability-weighted moments (Hosking and Wallis 1987) of the sorted excesses, pulled toward the prior
        by its weight: robust to the largest excess, closed form, O(TAIL_SAMPLES) per exceedance."""
        ranked = self.excess_ranked
        n = len(ranked)
        if n < MIN_FIT:
            return
        a0 = sum(ranked) / n
        a1 = sum(value * (n - 1 - i) for i, value in enumerate(ranked)) / (n * (n - 1))
        gap = a0 - 2.0 * a1
        if a0 <= 0.0 or gap <= 0.01 * a0:  # ties (capped rows) leave no shape to read: keep the last fit
            return
        low, high = SHAPE_LIMITS
        shape = min(high, max(low, 2.0 - a0 / gap))
        scale = 2.0 * a0 * a1 / gap
        weight = TAIL_PRIOR_WEIGHT
        self.shape = (n * shape + weight * TAIL_PRIOR_SHAPE) / (n + weight)
        self.scale = (n * scale + weight * 1.0) / (n + weight)

    def size(self) -> int:
        return 2 * len(self.ring) + 2 * len(self.excess_ring)


_FULL_CUT_COUNT = max(1, math.ceil(TAIL_SHARE * WINDOW_ROWS))
_FULL_UNIT_INDEX = min(WINDOW_ROWS - 1, int((1.0 - UNIT_SHARE) * WINDOW_ROWS))


def _pareto_tail(excess: float, shape: float, scale: float) -> float:
    """The generalised Pareto survival function (0 beyond a bounded tail's end)."""
    if abs(shape) < 1e-6:
        return math.exp(-excess / scale)
    base = 1.0 + shape * excess / scale
    return 0.0 if base <= 0.0 else base ** (-1.0 / shape)


@dataclass
class DetectorState:
    """Everything the detector remembers between rows; bounded by lookback_rows(period) numbers plus the tails'
    samples, held in typed arrays (8 bytes a number) because a server keeps one state per monitor."""

    rows: int = 0
    warm_times: list[float] = field(default_factory=list)
    warm_values: list[float] = field(default_factory=list)
    origin: float = 0.0
    step: float = 0.0
    period: int = 0
    slot_ids: array = field(default_factory=lambda: array("q"))  # ring of 3 seasons + 2
    slot_values: array = field(default_factory=_floats)
    last_slot: int = 0
    last: float = 0.0  # last value as the short-term predictors see it
    local: list[float] = field(default_factory=list)
    errors: Surprises = field(default_factory=Surprises)
    means: Surprises = field(default_factory=Surprises)
    chooser_ring: array = field(default_factory=_floats)  # _PREDICTORS errors a row, NaN where none
    chooser_rows: int = 0
    chooser_next: int = 0
    chooser_sum: list[float] = field(default_factory=lambda: [0.0] * _PREDICTORS)
    chooser_count: list[int] = field(default_factory=lambda: [0] * _PREDICTORS)
    short_ring: array = field(default_factory=_floats)  # the last SHORT_ROWS errors in units, capped at the tail
    short_next: int = 0
    # The open incident: its least probability (0 < p_peak; 1.0 when none is open), normal and abnormal rows
    # in it so far, its start and peak times, and the real values of its last abnormal rows (for adoption).
    peak_p: float = 1.0
    peak_error: float = 0.0  # the incident's largest error so far, read again on every row of it
    normal_run: int = 0
    abnormal_rows: int = 0
    started_at: float = 0.0
    peak_at: float = 0.0
    run: list[float] = field(default_factory=list)


class StreamingDetector:
    """Configuration only in the constructor; ``update`` judges rows and advances a state."""

    def __init__(
        self,
        *,
        data_frequency: str,
        false_alarms_per_week: float | None = None,
        confidence: float | None = None,
        period: int | None = None,
        floor: tuple[float, float] = (0.0, 0.0),
        short_rows: int = SHORT_ROWS,
        close_rows: int = CLOSE_ROWS,
        adopt_rows: int = ADOPT_ROWS,
    ) -> None:
        """``false_alarms_per_week`` is the budget (``confidence``, the older knob, maps onto it:
        budget_for_confidence); ``period`` in rows overrides the season data_frequency suggests (0: none);
        ``floor`` is (absolute, relative to |expected|): the range is never narrower than either.
        ``short_rows`` (0: no second surprise), ``close_rows`` and ``adopt_rows`` are the constants the
        benchmark varies."""
        if false_alarms_per_week is None:
            false_alarms_per_week = (DEFAULT_FALSE_ALARMS_PER_WEEK if confidence is None
                                     else budget_for_confidence(confidence))
        self.data_frequency = data_frequency
        self.budget = false_alarms_per_week
        self.period_override = period
        self.floor_absolute, self.floor_relative = floor
        self.floor_least = max(self.floor_absolute, 1e-9)
        self._chances: dict[float, float] = {}
        self.short_rows = short_rows
        self.close_rows = close_rows
        self.adopt_rows = adopt_rows

    def initial_state(self) -> DetectorState:
        return DetectorState()

    @staticmethod
    def size(state: DetectorState) -> int:
        """Numbers the state holds (what a cache of states is bounded by)."""
        return (state.errors.size() + state.means.size() + len(state.short_ring) + len(state.chooser_ring)
                + len(state.slot_ids) * 2 + LOCAL_ROWS * 2)

    def threshold(self, state: DetectorState) -> float:
        return threshold_for(self.budget, state.step) if state.rows >= WARMUP else 1.0

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
            _emit(out, value, value, value, 0.0, False, None, None)
            return
        st.rows += 1
        predictions = self._predictions(st, moment)
        choice = self._choose(st, predictions)
        expected = predictions[choice]
        assert expected is not None
        chance = self._chances.get(st.step)
        if chance is None:
            chance = self._chances[st.step] = 1.0 - threshold_for(self.budget, st.step)
        # Written with conditionals, not max(): this runs on every row, and the calls cost a tenth of it.
        least = self.floor_relative * abs(expected)
        least = least if least > self.floor_least else self.floor_least
        other = FLOOR_RELATIVE * abs(value)
        least = other if other > least else least
        residual = value - expected
        error = residual if residual >= 0.0 else -residual
        errors = st.errors
        own_unit = errors.unit_value
        unit = own_unit if own_unit > least else least
        # The range: where the row's own error alone would reach the threshold.
        reach = errors.quantile(chance / LOOKS if self.short_rows else chance, unit)
        halfwidth = reach if reach > least else least
        # Below the floor nothing is news: the surprise is read on a scale stretched so the floor is the range.
        judged = error * reach / least if least > reach else error
        p_error = errors.probability(judged, unit)
        means_unit = 0.0
        k = self.short_rows
        if k:
            mean = self._short_mean(st, judged, unit)
            means = st.means
            if mean >= 0.0 and means.ranked:
                # The short means' unit: their own median, and at least what one row at the start of the errors'
                # tail adds to a short window (a stream that is mostly flat has means of nil).
                means_unit = errors.cut / unit / k
                means_unit = means.unit_value if means.unit_value > means_unit else means_unit
                means_unit = means_unit if means_unit > MEANS_UNIT_FLOOR else MEANS_UNIT_FLOOR
                p_mean = means.probability(mean, means_unit)
                p_error_or_mean = p_mean if p_mean < p_error else p_error
            else:
                p_error_or_mean = p_error
        else:
            p_error_or_mean = p_error
        p = LOOKS * p_error_or_mean
        p = LEAST_P if p < LEAST_P else (1.0 if p > 1.0 else p)
        raw = 1.0 - p
        threshold = 1.0 - chance
        was_open = st.peak_p < 1.0
        event: str | None = None
        if not was_open:
            score = raw
            if score >= threshold:
                event = "open"
                st.started_at = moment
                st.normal_run, st.abnormal_rows, st.run = 0, 0, []
        else:
            # Only a row further off than every row of the open incident is news (its short window holds the
            # incident itself): its error's probability beyond the incident's largest, both read today.
            worst = max(LEAST_P, min(1.0, LOOKS * errors.probability(st.peak_error, unit)))
            score = 1.0 - min(1.0, max(LEAST_P, min(1.0, LOOKS * p_error)) / worst)
        if score >= threshold:
            st.peak_p, st.peak_at = p, moment
        if event or was_open:
            st.peak_error = max(st.peak_error, judged) if was_open else judged
        flagged = score >= threshold
        _emit(out, expected, expected - halfwidth, expected + halfwidth, score, flagged,
              ("up" if residual > 0 else "down") if flagged else None, event)
        # Learning: what the row teaches, given the incident it belongs to.
        abnormal = p <= NORMAL_P
        if normal:
            learn = "normal"
            if st.peak_p < 1.0:  # the user's word closes the incident, one this row opened included
                _close(out, st, "feedback")
        elif event == "open":
            learn = "capped"
        elif was_open:
            if abnormal:
                st.normal_run = 0
                st.abnormal_rows += 1
                st.run.append(value)
                if len(st.run) > LOCAL_ROWS:
                    del st.run[0]
                learn = "capped"
                if st.abnormal_rows >= self.adopt_rows:
                    learn = "adopt"
                    _close(out, st, "adopted")
            else:
                st.normal_run += 1
                learn = "normal"
                if st.normal_run >= self.close_rows:
                    _close(out, st, "closed")
        else:
            learn = "normal"
        self._learn(st, moment, value, expected, halfwidth, predictions, learn, error, own_unit, reach, means_unit)

    def _short_mean(self, st: DetectorState, error: float, unit: float) -> float:
        """The mean of the last short_rows errors (this one included), each in units and capped at the start of
        the errors' tail; -1 until the window is full."""
        k = self.short_rows
        cut = st.errors.cut
        capped = (cut if error > cut else error) / unit if unit > 0.0 else 0.0
        ring = st.short_ring
        if len(ring) < k:
            ring.append(capped)
        else:
            ring[st.short_next] = capped
            st.short_next = (st.short_next + 1) % k
        return sum(ring) / k if len(ring) == k else -1.0

    # -------------------------------------------------------------------------------------- learning

    def _learn(
        self, st: DetectorState, moment: float, value: float, expected: float, halfwidth: float,
        predictions: list[float | None], learn: str, error: float, unit: float, reach: float, means_unit: float,
    ) -> None:
        self._remember_season(st, moment, value)
        # A row not learnt as normal counts against each predictor at most as a miss by the range's half-width,
        # so an incident does not decide which predictor judges the rows after it.
        if learn == "normal":
            errors = [None if p is None else abs(p - value) ** CHOOSER_POWER for p in predictions]
        else:
            errors = [None if p is None else min(abs(p - value), halfwidth) ** CHOOSER_POWER for p in predictions]
        self._push_choice(st, errors)
        if learn == "adopt":
            for offset, real in enumerate(reversed(st.run[-len(st.local):])):
                st.local[-1 - offset] = real
            st.last = value
            st.run = []
            # A new normal: the predictors are judged again from here, or the one that knew the old level best
            # would keep opening incidents for a day.
            st.chooser_ring, st.chooser_rows, st.chooser_next = array("d"), 0, 0
            st.chooser_sum, st.chooser_count = [0.0] * _PREDICTORS, [0] * _PREDICTORS
            return
        if learn == "normal":
            self._remember_short(st, value)
        else:
            self._remember_short(st, expected)
        # Rows of an incident are learnt capped at the range: surprises of the threshold's size happen (a stream
        # whose bursts are normal learns so), and no more, so one huge row cannot reshape the distribution.
        st.errors.learn(reach if learn == "capped" and error > reach else error, unit)
        if self.short_rows and len(st.short_ring) == self.short_rows:
            st.means.learn(sum(st.short_ring) / self.short_rows, means_unit or MEANS_UNIT_FLOOR)

    def _warm_up(self, st: DetectorState, moment: float, value: float) -> None:
        if st.rows:
            st.errors.learn(abs(value - st.last), 0.0)
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
        if period:
            size = 3 * period + 2
            st.slot_ids = array("q", [-(1 << 62)]) * size
            st.slot_values = array("d", [0.0]) * size
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

    def _choose(self, st: DetectorState, predictions: list[float | None]) -> int:
        scored = st.chooser_rows
        needed = min(scored, max(st.period, LOCAL_ROWS))
        best, best_error = _LAST, math.inf
        for j, prediction in enumerate(predictions):
            count = st.chooser_count[j]
            if prediction is None or count == 0 or count < needed:
                continue
            error = st.chooser_sum[j] / count
            if error < best_error:  # seasonal predictors come first: on a tie the season wins
                best, best_error = j, error
        return best

    def _remember_short(self, st: DetectorState, value: float) -> None:
        st.last = value
        st.local.append(value)
        if len(st.local) > LOCAL_ROWS:
            del st.local[0]

    def _remember_season(self, st: DetectorState, moment: float, value: float) -> None:
        if st.period:
            slot = self._slot(st, moment)
            position = slot % len(st.slot_ids)
            st.slot_ids[position], st.slot_values[position] = slot, value
            st.last_slot = slot

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
        base = st.chooser_next * _PREDICTORS
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


def _close(out: Verdicts, st: DetectorState, why: str) -> None:
    out.incident[-1] = why
    st.peak_p, st.normal_run, st.abnormal_rows, st.run = 1.0, 0, 0, []


def _push_ranked(ring: array, ranked: array, position: int, value: float) -> None:
    """Appends ``value`` to a ring of WINDOW_ROWS (overwriting ``position`` once full) and its sorted copy."""
    if len(ring) < WINDOW_ROWS:
        ring.append(value)
    else:
        del ranked[bisect_left(ranked, ring[position])]
        ring[position] = value
    insort(ranked, value)


def _emit(out: Verdicts, expected: float, lower: float, upper: float, score: float, flagged: bool,
          direction: str | None, incident: str | None) -> None:
    out.expected.append(expected)
    out.lower.append(lower)
    out.upper.append(upper)
    out.score.append(score)
    out.is_anomaly.append(flagged)
    out.direction.append(direction)
    out.incident.append(incident)
