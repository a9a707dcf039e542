"""How a row's surprise becomes a calibrated probability (anomaly-model-1).

A surprise is an error's size in units of the reference: the top-rank error of the detector's recent window
(its 98th percentile once the window is full; among the errors above 0 where that rank is an exact prediction,
see tail_ranks). Its tail probability, the share of normal rows that surprise
at least as much, blends two estimates:

- the stream's own long-run record of surprises: a histogram over log-spaced bins of its last RECORD_ROWS
  rows, so a surprise seen once a week on this stream is, here, a once-a-week surprise whatever the shape
  of its noise (Gaussian, heavy-tailed, counts, bursts, a weekly step);
- a generalised Pareto tail fitted to the recent window (order statistics, so incidents in the window cannot
  move it), worth PRIOR_ROWS rows of record: it speaks for a young stream, and beyond anything recorded.

This is NAB's anomaly likelihood in this detector's terms: a raw score read against its own long-run
distribution, with heavy tails modelled rather than assumed Gaussian.
"""

from __future__ import annotations

import math
import operator
from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Final, NamedTuple

WINDOW_ROWS: Final = 1200  # errors in the recent window: about four days of five-minute rows
ROWS_PER_RANK: Final = 32  # in a shorter window, one rank per 32 rows
MIN_RANK: Final = 3  # never higher than the 3rd-largest error: two spikes cannot blind a young stream
TAIL_SPAN: Final = 10.0  # the window's tail is fitted between the top rank and ten times it (the top 1% and 10%)
MAX_SHAPE: Final = 0.5  # the heaviest tail the window model allows (Student-t with two degrees of freedom)
BINS_PER_DECADE: Final = 16
DECADES: Final = 3  # surprises from 1 to 1000 references; larger ones share the last bin
BINS: Final = BINS_PER_DECADE * DECADES
RECORD_ROWS: Final = 20_160  # the record's reach: two weeks of minute rows, ten weeks of five-minute rows
BELOW: Final = -1  # a record's codes besides its bins
SKIPPED: Final = -2
PRIOR_ROWS: Final = float(WINDOW_ROWS)  # what the window's model is worth against the record, in rows


class Tail(NamedTuple):
    """A generalised Pareto tail above ``start``: P(error > start + x) = share * (1 + shape*x/scale)^(-1/shape)."""

    start: float
    share: float
    scale: float
    shape: float
    top: float  # the error at the top rank: the unit of surprise


@dataclass
class Record:
    """The record of one signal's surprises over the last RECORD_ROWS judged rows: each row's code in a ring
    (its bin, BELOW for a surprise under 1, SKIPPED for a row not recorded) and the counts per bin. A
    sliding window rather than a fading one, so that a state rebuilt from the last rows of a stored series
    is exactly the state that judged them one by one."""

    codes: array = field(default_factory=lambda: array("b"))
    next: int = 0
    bins: array = field(default_factory=lambda: array("d", [0.0]) * BINS)
    total: float = 0.0

    def add(self, surprise: float | None) -> None:
        """Records a row's surprise, or (None) that the row was judged but not recorded."""
        if surprise is None:
            code = SKIPPED
        elif surprise < 1.0:
            code = BELOW
        else:
            code = min(BINS - 1, int(math.log10(surprise) * BINS_PER_DECADE))
        codes = self.codes
        if len(codes) < RECORD_ROWS:
            codes.append(code)
        else:
            self._forget(codes[self.next])
            codes[self.next] = code
            self.next = (self.next + 1) % RECORD_ROWS
        if code != SKIPPED:
            self.total += 1.0
            if code != BELOW:
                self.bins[code] += 1.0

    def _forget(self, code: int) -> None:
        if code != SKIPPED:
            self.total -= 1.0
            if code != BELOW:
                self.bins[code] -= 1.0

    def beyond(self, surprise: float, suffix: list[float] | None = None) -> float:
        """Recorded surprises at least this large (within a bin, spread evenly in log); ``suffix`` (from
        suffix_sums) saves the sum when many surprises are read against one record."""
        if surprise < 1.0:
            return self.total
        position = math.log10(surprise) * BINS_PER_DECADE
        index = int(position)
        if index >= BINS:
            return self.bins[BINS - 1] * 0.5 ** (position - BINS + 1)  # the open last bin halves per bin width
        above = suffix[index + 1] if suffix is not None else sum(self.bins[index + 1:])
        return above + self.bins[index] * (1.0 - (position - index))

    def suffix_sums(self) -> list[float]:
        sums = [0.0] * (BINS + 1)
        for i in range(BINS - 1, -1, -1):
            sums[i] = sums[i + 1] + self.bins[i]
        return sums


def ranks(n: int, top_rank: int) -> tuple[int, int]:
    """The window's top rank (the top_rank-th largest of a full window, one per 32 rows in a shorter one, never
    above the 3rd) and its bottom rank, TAIL_SPAN times lower."""
    top = min(n, top_rank, max(MIN_RANK, n // ROWS_PER_RANK))
    return top, min(n, round(top * TAIL_SPAN))


def tail_ranks(ranked: array, top_rank: int) -> tuple[int, int]:
    """``ranks`` of the window; where most of its errors are exactly 0 (a stream that rarely moves, predicted
    exactly), those of its errors above 0: the tail is the other rows' (their share of the window stays the tail's
    share), so a change as large as one the window holds is as common as the window says, not beyond a range of 0."""
    n = len(ranked)
    top, bottom = ranks(n, top_rank)
    if n and ranked[n - top] <= 0.0:
        moved = n - bisect_right(ranked, 0.0)
        if moved:
            return ranks(moved, top_rank)
    return top, bottom


def tail_shape(ranked: array, top_rank: int) -> float:
    """The window's tail shape by the moment estimator (Dekkers, Einmahl and de Haan) over the errors above
    the bottom rank, those above the top rank lowered to it (incidents cannot move it); 0 (exponential) to
    MAX_SHAPE."""
    n = len(ranked)
    top, bottom = tail_ranks(ranked, top_rank)
    start = ranked[n - bottom] if n else 0.0
    if bottom < 3 or start <= 0:
        return 0.0
    # The ranks above the top one are the last top - 1 of the sorted window: they count as the top one.
    cap = math.log(ranked[n - top] / start)
    # The sums of log(x / start) and of its square, from the logs alone (map keeps the loop in C: a refit of four
    # signals otherwise costs more than the rows between refits).
    logs = list(map(math.log, ranked[n - bottom + 1 : n - top + 1]))
    origin = math.log(start)
    total = sum(logs)
    squares = sum(map(operator.mul, logs, logs))
    count = len(logs) + top - 1
    first = (total - len(logs) * origin + (top - 1) * cap) / count
    second = (squares - 2.0 * origin * total + len(logs) * origin * origin + (top - 1) * cap * cap) / count
    if second <= 0 or first * first >= second:
        return 0.0
    return min(MAX_SHAPE, max(0.0, first + 1.0 - 0.5 / (1.0 - first * first / second)))


def fit_tail(ranked: array, top_rank: int, shape: float) -> Tail:
    """A generalised Pareto tail of the window above its bottom rank, with ``shape``, through its top rank."""
    n = len(ranked)
    if not n:
        return Tail(0.0, 1.0, 0.0, 0.0, 0.0)
    top, bottom = tail_ranks(ranked, top_rank)
    start, highest = ranked[n - bottom], ranked[n - top]
    high = highest - start
    span = math.log(bottom / top) if bottom > top else 0.0
    if shape > 1e-6 and span:
        return Tail(start, bottom / n, high * shape / math.expm1(shape * span), shape, highest)
    return Tail(start, bottom / n, high / span if span else high, 0.0, highest)


def window_probability(tail: Tail, ranked: array, error: float) -> float:
    """P(a normal error >= ``error``) by the window alone: its fitted tail above the tail's start, its own
    ranks below."""
    if error <= tail.start:
        n = len(ranked)
        return (n - bisect_left(ranked, error)) / n if n else 1.0
    if tail.scale <= 0:
        return 0.0
    excess = (error - tail.start) / tail.scale
    if tail.shape == 0.0:
        return tail.share * math.exp(-excess)
    return tail.share * (1.0 + tail.shape * excess) ** (-1.0 / tail.shape)


class Calibration(NamedTuple):
    """One signal's calibration for one row: the window's tail and ranks, the unit of surprise, the record,
    and ``stretch``: errors are read divided by it (above 1 where a floor widens the range)."""

    tail: Tail
    ranked: array
    unit: float
    record: Record
    stretch: float = 1.0

    def probability(self, error: float, suffix: list[float] | None = None) -> float:
        """The blended tail probability of an error this large."""
        error /= self.stretch
        if self.unit <= 0:  # a window of exact predictions: only the floor, as an exponential tail, says how rare
            return math.exp(-error * self.tail.scale) if error > 0 else 1.0
        surprise = error / self.unit
        prior = window_probability(self.tail, self.ranked, error)
        if surprise < 1.0:
            return prior
        record = self.record
        return (record.beyond(surprise, suffix) + PRIOR_ROWS * prior) / (record.total + PRIOR_ROWS)

    def quantile(self, probability: float) -> float:
        """The error whose blended tail probability is ``probability``, by bisection (at least the unit)."""
        if self.unit <= 0:
            return self.stretch * math.log(1.0 / probability) / self.tail.scale if self.tail.scale > 0 else 0.0
        suffix = self.record.suffix_sums()
        low, high = self.unit, self.unit * 2.0
        while self.probability(high * self.stretch, suffix) > probability and high < self.unit * 1e12:
            low, high = high, high * 2.0
        for _ in range(20):  # to a millionth of the bracket: far finer than a range is read
            middle = 0.5 * (low + high)
            if self.probability(middle * self.stretch, suffix) > probability:
                low = middle
            else:
                high = middle
        return high * self.stretch


def calibrate(ranked: array, top_rank: int, shape: float, record: Record) -> Calibration:
    tail = fit_tail(ranked, top_rank, shape)
    return Calibration(tail, ranked, tail.top, record)


def floored(calibration: Calibration, edge: float, least: float, probability: float) -> Calibration:
    """``calibration`` stretched so that the error at ``probability`` is at least ``least`` (a floor); ``edge``
    is that error before stretching."""
    if edge >= least:
        return calibration
    if calibration.unit <= 0 or edge <= 0:
        # Exact predictions so far: the floor is the range, and the tail beyond it exponential.
        return Calibration(Tail(0.0, 1.0, math.log(1.0 / probability) / least, 0.0, 0.0), calibration.ranked, 0.0,
                           calibration.record)
    return calibration._replace(stretch=least / edge)
