"""Counts are judged on the square-root scale (app.compute.detect.counts), and answered on their own."""

from __future__ import annotations

import numpy as np
import pytest

from app.compute.detect.counts import looks_like_counts, stabilised, unstabilised, width_on_scale
from app.compute.detect.snapshot import decode, encode
from app.compute.detect.state import Verdicts
from app.compute.detect.streaming import WARMUP, StreamingDetector

DAY = 1440


def minute_times(rows: int) -> list[float]:
    """``rows`` minutes from a midnight (UTC)."""
    return [1.7e9 - 1.7e9 % 86400 + 60.0 * i for i in range(rows)]


def minute_counts(days: int = 3, seed: int = 1) -> tuple[list[float], list[float]]:
    """A count of 4 a minute at night and 20 at noon."""
    rate = 12 + 8 * np.sin(2 * np.pi * (np.arange(days * DAY) / DAY - 0.25))
    values = np.random.default_rng(seed).poisson(rate).astype(float).tolist()
    return minute_times(len(values)), values


@pytest.mark.parametrize("values, counts", [
    ([3, 5, 2, 4, 6, 3, 1, 4, 5, 2, 3], True),  # a Poisson count of about 3
    ([41, 52, 38, 47, 45, 50, 36, 44, 49, 40, 43], True),  # of about 45
    ([58, 63, 63, 64, 58, 63, 60, 60, 62, 62, 59], False),  # a speed: whole numbers, far less dispersed
    ([251643, 3203510, 287397, 238944, 245880, 234170, 255797, 244002, 514385, 270883, 249887], False),  # bytes
    ([3.5, 5, 2, 4, 6, 3, 1, 4, 5, 2, 3], False),  # not whole
    ([3, -5, 2, 4, 6, 3, 1, 4, 5, 2, 3], False),  # negative
    ([0] * 11, False),  # nothing to tell
    ([20] * 11, False),
])
def test_a_count_is_whole_non_negative_numbers_as_dispersed_as_a_poisson_count(values: list[float],
                                                                             counts: bool) -> None:
    assert looks_like_counts([float(v) for v in values]) is counts


def test_a_poisson_count_is_recognised_99_times_in_100() -> None:
    numbers = np.random.default_rng(0)
    for rate in (1.0, 5.0, 50.0):
        samples = numbers.poisson(rate, (4000, WARMUP)).astype(float)
        share = np.mean([looks_like_counts(row.tolist()) for row in samples if row.sum() > 0])
        assert 0.98 <= share <= 1.0


def test_the_scale_and_back() -> None:
    for count in (0.0, 1.0, 4.0, 1e6):
        assert unstabilised(stabilised(count)) == pytest.approx(count, abs=1e-9)
    for count, width in ((100.0, 10.0), (4.0, 10.0), (0.0, 3.0)):
        scaled = stabilised(count)
        half = width_on_scale(scaled, width)
        assert unstabilised(scaled + half) - count >= width - 1e-9
        assert count - unstabilised(scaled - half) >= width - 1e-9 or unstabilised(scaled - half) <= 1e-9


def test_a_count_is_judged_on_the_square_root_scale_and_answered_on_its_own() -> None:
    times, values = minute_counts()
    detector = StreamingDetector(data_frequency="Minutes")
    state = detector.initial_state()
    verdicts = detector.update(state, times, values)
    assert state.counts == 1
    later = range(DAY, len(values))
    # A count's range is wider above its expected value than below, and wider at noon (20) than at night (4).
    assert all(verdicts.upper[i] - verdicts.expected[i] > verdicts.expected[i] - verdicts.lower[i] for i in later)
    width = {hour: np.median([verdicts.upper[i] - verdicts.lower[i] for i in later if (i % DAY) // 60 == hour])
             for hour in (0, 12)}
    assert width[12] > 1.5 * width[0]
    raw = StreamingDetector(data_frequency="Minutes", counts=False)
    raw_state = raw.initial_state()
    same = raw.update(raw_state, times, values)
    assert raw_state.counts == 0
    # Symmetric, but cut at 0 where it would reach below: a stream never below 0 is not expected there.
    assert all(symmetric_or_cut_at_0(same, i) for i in later)
    # The same numbers with a fraction are not a count: symmetric again.
    fractions = detector.update(detector.initial_state(), times, [v + 0.5 for v in values])
    assert all(symmetric_or_cut_at_0(fractions, i) for i in later)


def symmetric_or_cut_at_0(verdicts: Verdicts, i: int) -> bool:
    above = verdicts.upper[i] - verdicts.expected[i]
    if verdicts.lower[i] == 0.0:
        return verdicts.expected[i] - above <= 1e-9
    return above == pytest.approx(verdicts.expected[i] - verdicts.lower[i])


def test_a_sparse_counts_range_never_goes_below_zero() -> None:
    values = [float(v) for v in np.random.default_rng(3).poisson(0.6, 2 * DAY)]
    times = minute_times(len(values))
    detector = StreamingDetector(data_frequency="Minutes")
    state = detector.initial_state()
    verdicts = detector.update(state, times, values)
    assert state.counts == 1
    judged = range(WARMUP, len(values))
    assert min(verdicts.lower[i] for i in judged) == 0.0
    assert min(verdicts.expected[i] for i in judged) >= 0.0


def test_a_floor_holds_on_the_counts_own_scale() -> None:
    times, values = minute_counts(days=2)
    detector = StreamingDetector(data_frequency="Minutes", floor=(15.0, 0.0))
    verdicts = detector.update(detector.initial_state(), times, values)
    for i in range(WARMUP, len(values)):
        assert verdicts.upper[i] - verdicts.expected[i] >= 15.0 - 1e-9
        assert verdicts.expected[i] - verdicts.lower[i] >= 15.0 - 1e-9 or verdicts.lower[i] <= 1e-9


@pytest.mark.parametrize("cuts", [[5], [WARMUP], [3, 700, 2000]])
def test_a_count_fed_in_pieces_or_restored_from_bytes_gets_the_same_verdicts(cuts: list[int]) -> None:
    times, values = minute_counts(days=2, seed=4)
    values[2500] += 60  # a spike, so an incident is in the state too
    detector = StreamingDetector(data_frequency="Minutes")
    whole = detector.update(detector.initial_state(), times, values)
    state = detector.initial_state()
    pieces = Verdicts()
    bounds = [0, *cuts, len(values)]
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        state = decode(encode(state))
        part = detector.update(state, times[lo:hi], values[lo:hi])
        for name in ("expected", "lower", "upper", "score", "is_anomaly", "direction", "incident", "signal",
                     "size"):
            getattr(pieces, name).extend(getattr(part, name))
        pieces.threshold = part.threshold
    assert pieces == whole
    assert whole.is_anomaly[2500]
