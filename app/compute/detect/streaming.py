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
2. Scale. The half-width of the expected range is BAND_MARGIN times the TOP_RANK-th largest of the last
   WINDOW_ROWS absolute errors (the 99th percentile of a full window). Reading a rank rather than a
   fixed percentile means up to TOP_RANK - 1 incidents cannot widen the range however short the history;
   in a history shorter than 32 * TOP_RANK rows one rank is used per 32 rows. ``confidence`` stretches the
   range as a normal distribution would (1 at 0.99).
3. Score. r = distance from ``expected`` / half-width; score = r^2 / (1 + r^2): 0.5 exactly on the edge of
   the range, still rising far outside it. ``is_anomaly`` is score >= 0.5. One incident is one anomaly: a
   deviation no larger than one flagged on the same side in the last QUIET_ROWS rows is not news, and
   scores just below 0.5 (it still counts as deviant for part 5). Nor is a habit: a deviation no larger
   than one on the same side within HABIT_SHARE of a season of this time, in two of the last three
   seasons (a daily job's spike, a few minutes early or late each day).
4. A change in the error distribution. The mean absolute error of the last SHORT_ROWS rows (this one
   included) is read against the WINDOW_ROWS such means before it by the same rule and margin as one
   error (r = the mean over the range's margin times the TOP_RANK-th largest earlier mean), and the
   row's score is the larger of the two. It is NAB's anomaly likelihood in this detector's terms, a
   short average of recent surprise against its own long-run distribution: denser spikes or a noisier
   stretch are flagged even when no single row leaves the range. A short window holding a row beyond
   the range is not news (that row was judged on its own), nor is a second such alarm within QUIET_ROWS
   rows: either scores just below 0.5. It changes nothing the detector learns.
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
from bisect import bisect_left, insort
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import NormalDist

from app.series.frequencies import MAX_PERIOD_ROWS, PERIOD_CANDIDATES

# Rows 0..WARMUP-1 only teach the detector; with the 12-point minimum the last row is still judged.
WARMUP = 11
WINDOW_ROWS = 1200  # errors that set the scale: about four days of five-minute rows
TOP_RANK = 12  # the scale rests on the 12th-largest error: 1% of a full window
ROWS_PER_RANK = 32  # in a shorter history, one rank per 32 rows (never fewer than one)
BAND_MARGIN = 1.5
CHOOSER_ROWS = 288  # errors that choose the predictor: a day of five-minute rows
CHOOSER_POWER = 0.25
LOCAL_ROWS = 8
REANCHOR_ROWS = 3
QUIET_ROWS = 48  # one incident, one anomaly: how long a flagged deviation stays the news
HABIT_SHARE = 1 / 12  # how near this time of the season a habit is looked for: two hours of a day
SHORT_ROWS = 6  # the short window whose mean error is the second signal: half an hour of five-minute rows
_Z99 = NormalDist().inv_cdf(0.995)
_PREDICTORS = 5  # season, season-adjusted last, median of three seasons, last, local mean
_JUST_BELOW = math.nextafter(0.5, 0.0)  # the score of a deviation that is part of an incident already flagged
_LAST = 3


def stretch_for(confidence: float) -> float:
    """How much wider than at confidence 0.99 the range is at ``confidence``."""
    return NormalDist().inv_cdf(0.5 + confidence / 2) / _Z99


def lookback_rows(period: int | None) -> int:
    """Rows whose influence a judged row can feel: the scale window (and the short window of its oldest mean),
    the chooser, and three seasons and the habit's reach."""
    return WINDOW_ROWS + SHORT_ROWS + CHOOSER_ROWS + 3 * (period or 0) + round((period or 0) * HABIT_SHARE) + WARMUP


@dataclass
class Verdicts:
    expected: list[float] = field(default_factory=list)
    lower: list[float] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)
    score: list[float] = field(default_factory=list)
    is_anomaly: list[bool] = field(default_factory=list)
    direction: list[str | None] = field(default_factory=list)


def _floats() -> array:
    return array("d")


@dataclass
class DetectorState:
    """Everything the detector remembers between rows; bounded by lookback_rows(period) numbers, held in
    typed arrays (8 bytes a number) because a server keeps one state per monitor."""

    rows: int = 0
    warm_times: list[float] = field(default_factory=list)
    warm_values: list[float] = field(default_factory=list)
    origin: float = 0.0
    step: float = 0.0
    period: int = 0
    slot_ids: array = field(default_factory=lambda: array("q"))  # ring of 3 seasons + 2 + the habit's reach
    slot_values: array = field(default_factory=_floats)
    slot_residuals: array = field(default_factory=_floats)  # value - expected, by slot (0 for warm-up rows)
    last_slot: int = 0
    last: float = 0.0  # last value as the short-term predictors see it
    local: list[float] = field(default_factory=list)
    errors_sorted: array = field(default_factory=_floats)
    errors_ring: array = field(default_factory=_floats)
    errors_next: int = 0
    chooser_ring: array = field(default_factory=_floats)  # _PREDICTORS errors a row, NaN where none
    chooser_rows: int = 0
    chooser_next: int = 0
    chooser_sum: list[float] = field(default_factory=lambda: [0.0] * _PREDICTORS)
    chooser_count: list[int] = field(default_factory=lambda: [0] * _PREDICTORS)
    run_side: int = 0
    run: list[tuple[float, float]] = field(default_factory=list)  # (time, value) of the current flagged run
    # The last QUIET_ROWS rows' deviations beyond the range, signed (+ above, - below), 0 for a row inside it.
    recent_flags: array = field(default_factory=_floats)
    recent_next: int = 0
    short_ring: array = field(default_factory=_floats)  # the last SHORT_ROWS errors, capped at the half-width
    short_next: int = 0
    means_sorted: array = field(default_factory=_floats)  # the last WINDOW_ROWS short-window means
    means_ring: array = field(default_factory=_floats)
    means_next: int = 0
    since_flag: int = 1 << 30  # rows since the last row beyond the range
    since_short_alarm: int = 1 << 30


class StreamingDetector:
    """Configuration only in the constructor; ``update`` judges rows and advances a state."""

    def __init__(
        self,
        *,
        data_frequency: str,
        confidence: float = 0.99,
        period: int | None = None,
        floor: tuple[float, float] = (0.0, 0.0),
        margin: float = BAND_MARGIN,
        top_rank: int = TOP_RANK,
        quiet_rows: int = QUIET_ROWS,
        short_rows: int = SHORT_ROWS,
        habit: float = HABIT_SHARE,
    ) -> None:
        """``period`` in rows overrides the season data_frequency suggests (0: none); ``floor`` is
        (absolute, relative to |expected|): the range is never narrower than either. ``margin``, ``top_rank``,
        ``quiet_rows``, ``short_rows`` (0: no second signal) and ``habit`` (the share of a season a habit is
        looked for either side of a row's time; 0: none) are the constants chosen by leave-one-category-out (the
        benchmark varies them)."""
        self.data_frequency = data_frequency
        self.stretch = margin * stretch_for(confidence)
        self.top_rank = top_rank
        self.quiet_rows = quiet_rows
        self.short_rows = short_rows
        self.habit = habit
        self.period_override = period
        self.floor_absolute, self.floor_relative = floor

    def initial_state(self) -> DetectorState:
        return DetectorState()

    @staticmethod
    def size(state: DetectorState) -> int:
        """Numbers the state holds (what a cache of states is bounded by)."""
        return (len(state.errors_ring) * 2 + len(state.means_ring) * 2 + len(state.short_ring)
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
        return out

    # ------------------------------------------------------------------------------------------ one row

    def _row(self, st: DetectorState, moment: float, value: float, normal: bool, out: Verdicts) -> None:
        if st.rows < WARMUP:
            self._warm_up(st, moment, value)
            _emit(out, value, value, value, 0.0, False, None)
            return
        st.rows += 1
        predictions = self._predictions(st, moment)
        choice = self._choose(st, predictions)
        expected = predictions[choice]
        assert expected is not None
        least = max(
            self.floor_absolute,
            self.floor_relative * abs(expected),
            1e-9 + 1e-6 * abs(value),  # a perfectly flat stretch must not flag rounding noise
        )
        halfwidth = max(self.stretch * self._scale(st), least)
        residual = value - expected
        ratio = abs(residual) / halfwidth
        lifted = ratio * ratio
        score = 1.0 if math.isinf(lifted) else lifted / (1.0 + lifted)
        flagged = score >= 0.5
        news = flagged and not self._seen_lately(st, residual) and not self._habit(st, moment, residual)
        if flagged and not news:
            score = _JUST_BELOW
        short_score = self._short_score(st, abs(residual), least)
        st.since_flag = 0 if flagged else st.since_flag + 1
        st.since_short_alarm += 1
        if short_score > score:
            # The short window holds a deviation already judged on its own, or the same change already told.
            if short_score >= 0.5 and (st.since_flag < self.short_rows or st.since_short_alarm <= self.quiet_rows):
                short_score = _JUST_BELOW
            score = short_score
            if score >= 0.5:
                news = True
                st.since_short_alarm = 0
        _emit(out, expected, expected - halfwidth, expected + halfwidth, score, news,
              ("up" if residual > 0 else "down") if news else None)
        self._remember_flag(st, residual if flagged else 0.0)
        self._learn(st, moment, value, expected, halfwidth, predictions, flagged and not normal)

    def _short_score(self, st: DetectorState, capped: float, least: float) -> float:
        """The mean capped error of the last short_rows rows (this one included) against the WINDOW_ROWS
        means before it, read as the point score reads one error against the errors before it."""
        k = self.short_rows
        if not k:
            return 0.0
        ring = st.short_ring
        if len(ring) < k:
            ring.append(capped)
        else:
            ring[st.short_next] = capped
            st.short_next = (st.short_next + 1) % k
        mean = sum(ring) / len(ring)
        means = st.means_sorted
        score = 0.0
        if len(ring) == k and means:
            rank = min(self.top_rank, max(1, len(means) // ROWS_PER_RANK))
            width = max(self.stretch * means[len(means) - rank], least)
            lifted = (mean / width) ** 2
            score = 1.0 if math.isinf(lifted) else lifted / (1.0 + lifted)
        if len(ring) == k:
            full = len(st.means_ring) == WINDOW_ROWS
            _push_ranked(st.means_ring, means, st.means_next, mean)
            if full:
                st.means_next = (st.means_next + 1) % WINDOW_ROWS
        return score

    def _habit_reach(self, period: int) -> int:
        return round(period * self.habit)

    def _habit(self, st: DetectorState, moment: float, residual: float) -> bool:
        """Whether a deviation on the same side at least as large was seen within the habit's reach of this
        time of the season in two of the last three seasons: a daily job's spike is then a habit, not news."""
        reach = self._habit_reach(st.period)
        if not reach:
            return False
        slot = self._slot(st, moment)
        ids, residuals, size = st.slot_ids, st.slot_residuals, len(st.slot_ids)
        seasons = 0
        for back in (1, 2, 3):
            centre = slot - back * st.period
            for near in range(centre - reach, centre + reach + 1):
                position = near % size
                if ids[position] == near and (residuals[position] >= residual if residual > 0
                                              else residuals[position] <= residual):
                    seasons += 1
                    break
            if seasons == 2 or seasons + 3 - back < 2:
                break
        return seasons >= 2

    def _seen_lately(self, st: DetectorState, residual: float) -> bool:
        """Whether a deviation on the same side at least as large was flagged in the last QUIET_ROWS rows:
        then this one is part of the same incident, not news (it still counts as deviant when learning)."""
        if residual > 0:
            return any(earlier >= residual for earlier in st.recent_flags)
        return any(earlier <= residual for earlier in st.recent_flags)

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

    def _scale(self, st: DetectorState) -> float:
        errors = st.errors_sorted
        if not errors:
            return 0.0
        rank = min(self.top_rank, max(1, len(errors) // ROWS_PER_RANK))
        return errors[len(errors) - rank]

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
        if len(st.errors_ring) < WINDOW_ROWS:
            st.errors_ring.append(error)
        else:
            oldest = st.errors_ring[st.errors_next]
            st.errors_ring[st.errors_next] = error
            st.errors_next = (st.errors_next + 1) % WINDOW_ROWS
            del st.errors_sorted[bisect_left(st.errors_sorted, oldest)]
        insort(st.errors_sorted, error)

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


def _push_ranked(ring: array, ranked: array, position: int, value: float) -> None:
    """Appends ``value`` to a ring of WINDOW_ROWS (overwriting ``position`` once full) and its sorted copy."""
    if len(ring) < WINDOW_ROWS:
        ring.append(value)
    else:
        del ranked[bisect_left(ranked, ring[position])]
        ring[position] = value
    insort(ranked, value)


def _emit(out: Verdicts, expected: float, lower: float, upper: float, score: float, flagged: bool,
          direction: str | None) -> None:
    out.expected.append(expected)
    out.lower.append(lower)
    out.upper.append(upper)
    out.score.append(score)
    out.is_anomaly.append(flagged)
    out.direction.append(direction)
