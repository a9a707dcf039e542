"""The default detector's promises: causal and split-invariant, robust to what it flags, level shifts adopted."""

from __future__ import annotations

import math
import random
from statistics import median

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.compute.detect import frozen
from app.compute.detect.budget import DEFAULT_FALSE_ALARMS_PER_WEEK, row_probability
from app.compute.detect.predictors import slot
from app.compute.detect.streaming import ADOPT_ROWS, QUIET_ROWS, WARMUP, StreamingDetector, Verdicts
from app.compute.detect.surprises import WINDOW_ROWS
from app.series.frequencies import median_gap

HOUR = 3600.0


def hourly(values: list[float]) -> tuple[list[float], list[float]]:
    return [1.7e9 + HOUR * i for i in range(len(values))], values


def daily_wave(n: int, seed: int = 7) -> list[float]:
    rng = random.Random(seed)
    return [120 + 60 * math.sin(2 * math.pi * (i + 16) / 24) + rng.gauss(0, 5) for i in range(n)]


def judge(values: list[float], **config: object) -> Verdicts:
    detector = StreamingDetector(data_frequency="Hours", **config)  # type: ignore[arg-type]
    times, values = hourly(values)
    return detector.update(detector.initial_state(), times, values)


def halfwidth(verdicts: Verdicts, row: int) -> float:
    return verdicts.upper[row] - verdicts.expected[row]


def test_spikes_then_a_drop_the_drop_is_flagged_and_the_recoveries_are_not() -> None:
    values = daily_wave(400)
    assert 170 < values[350] < 200  # the drop below starts from the daily peak
    clean = list(values)
    for row in (150, 151, 300):
        values[row] += 600
    values[350] = clean[350] = 53.0
    spiky, quiet = judge(values), judge(clean)

    assert spiky.is_anomaly[350] and quiet.is_anomaly[350]
    assert spiky.direction[350] == "down"
    # One incident, one anomaly: row 151 repeats row 150's deviation, so only 150 is news.
    assert [row for row, flagged in enumerate(spiky.is_anomaly) if flagged] == [150, 300, 350]
    assert not spiky.is_anomaly[152] and not spiky.is_anomaly[301]
    # The range after each spike is back near its width before it within a few rows, and never below zero.
    for spike in (151, 300):
        assert halfwidth(spiky, spike + 3) <= 1.5 * halfwidth(spiky, spike - 1)
    assert halfwidth(spiky, 350) <= 1.5 * halfwidth(quiet, 350)
    assert spiky.lower[350] > 0


def test_a_level_shift_is_one_open_incident_then_becomes_the_new_normal() -> None:
    rng = random.Random(3)
    values = [100 + rng.gauss(0, 2) for _ in range(300)] + [200 + rng.gauss(0, 2) for _ in range(100)]
    verdicts = judge(values, period=0)
    flagged = [row for row, is_anomaly in enumerate(verdicts.is_anomaly) if is_anomaly]
    assert flagged == [300]  # flagged when it happens, once: the rows after it are the same incident
    assert not any(verdicts.incident[:300])
    # The incident stays open, judged against the old level, until it has lasted long enough to be the new one.
    adopted = 300 + ADOPT_ROWS
    assert all(verdicts.incident[300:adopted])
    assert all(verdicts.upper[row] < values[row] for row in range(300, adopted))
    assert not any(verdicts.incident[adopted:])
    assert verdicts.expected[-1] == pytest.approx(200, abs=10)


def test_an_incident_ends_after_quiet_rows_and_missing_rows_do_not_end_it() -> None:
    rng = random.Random(8)
    values = [100 + rng.gauss(0, 2) for _ in range(400)]
    values[200] += 60
    times, _ = hourly(values)
    times = times[:230] + [t + 30 * HOUR for t in times[230:]]  # thirty missing hours inside the incident
    detector = StreamingDetector(data_frequency="Hours", period=0)
    verdicts = detector.update(detector.initial_state(), times, values)
    assert verdicts.is_anomaly[200] and verdicts.incident[200]
    assert all(verdicts.incident[200 : 200 + QUIET_ROWS])  # the gap is not quiet rows
    assert not any(verdicts.incident[200 + QUIET_ROWS :])


def test_feedback_ends_the_incident() -> None:
    rng = random.Random(5)
    values = [100 + rng.gauss(0, 2) for _ in range(300)]
    values[200] += 60
    told = judge(values, period=0)
    detector = StreamingDetector(data_frequency="Hours", period=0)
    times, _ = hourly(values)
    marked = detector.update(detector.initial_state(), times, values, normal=[i == 200 for i in range(300)])
    assert told.incident[201] and not marked.incident[200] and not marked.incident[201]


@pytest.mark.parametrize("spike", [60.0, 150.0, 400.0])
def test_a_spike_marked_normal_does_not_become_the_level_the_next_rows_are_judged_against(spike: float) -> None:
    rng = random.Random(5)
    values = [100 + rng.gauss(0, 2) for _ in range(300)]
    values[200] += spike
    detector = StreamingDetector(data_frequency="Hours", period=0)
    times, _ = hourly(values)
    marked = detector.update(detector.initial_state(), times, values, normal=[i == 200 for i in range(300)])
    assert marked.is_anomaly[200]  # the verdict of the row itself stands
    # The rows back at normal are normal: before, the spike entered the local mean (+150: rows 201 and 202
    # flagged, expected climbing to 126 as the stand-ins of flagged rows kept it up).
    assert not any(marked.is_anomaly[201:260])
    assert all(abs(expected - 100) < 10 for expected in marked.expected[201:260])


@settings(max_examples=30, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=600), max_size=6), seed=st.integers(0, 1000))
def test_any_split_into_calls_gives_the_same_verdicts(cuts: list[int], seed: int) -> None:
    values = daily_wave(600, seed)
    values[200] += 500
    times, _ = hourly(values)
    detector = StreamingDetector(data_frequency="Hours")
    whole = detector.update(detector.initial_state(), times, values)
    state = detector.initial_state()
    pieces = Verdicts()
    bounds = [0, *sorted(cuts), len(values)]
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        part = detector.update(state, times[lo:hi], values[lo:hi])
        for name in ("expected", "lower", "upper", "score", "is_anomaly", "direction", "incident", "signal", "size"):
            getattr(pieces, name).extend(getattr(part, name))
        pieces.threshold = part.threshold
    assert pieces == whole


def test_later_rows_never_change_earlier_verdicts() -> None:
    values = daily_wave(300)
    short = judge(values[:200])
    values[250] = 9999.0
    long = judge(values)
    assert long.score[:200] == short.score and long.expected[:200] == short.expected


def test_repeated_and_backward_timestamps_are_judged_in_order() -> None:
    values = daily_wave(200)
    times, _ = hourly(values)
    times[100] = times[99]  # an hour written twice
    times[150:] = [t - 55 * 60 for t in times[150:]]  # a clock stepping back 55 minutes
    detector = StreamingDetector(data_frequency="Hours")
    verdicts = detector.update(detector.initial_state(), times, values)
    assert len(verdicts.score) == 200
    assert all(math.isfinite(x) for x in verdicts.expected + verdicts.lower + verdicts.upper)


def test_one_incident_is_one_anomaly_and_its_larger_rows_are_news_only_beyond_its_peak() -> None:
    values = [100.0 + (i % 2) for i in range(200)]
    values[150], values[152] = 110.0, 130.0
    verdicts = judge(values, period=0)
    assert verdicts.is_anomaly[150]
    # The larger row's probability is conditional on the peak already told, so it scores below the peak's.
    assert 0.0 < verdicts.score[152] < verdicts.score[150]
    values[152] = 109.0  # smaller, same side, two rows later: explained by the incident entirely
    smaller = judge(values, period=0)
    assert not smaller.is_anomaly[152] and smaller.upper[152] < 109.0
    values[152] = 100.0 + 1e6  # far beyond the peak: news again
    assert judge(values, period=0).is_anomaly[152]


def five_minutes(values: list[float], **config: object) -> Verdicts:
    detector = StreamingDetector(data_frequency="Minutes", **config)  # type: ignore[arg-type]
    return detector.update(detector.initial_state(), [1.7e9 + 300.0 * i for i in range(len(values))], values)


def test_a_noisier_stretch_is_flagged_once_though_no_row_leaves_the_range() -> None:
    rng = random.Random(1)
    values = [100 + rng.gauss(0, 2) for _ in range(3000)]
    for row in range(2500, 2524):  # two hours swinging twice the usual noise either way
        values[row] += 4 if row % 2 else -4
    without = five_minutes(values, period=0, short_rows=0, long_rows=0)
    assert not any(without.is_anomaly)  # no row alone is beyond its range
    verdicts = five_minutes(values, period=0)
    flagged = [row for row, is_anomaly in enumerate(verdicts.is_anomaly) if is_anomaly]
    assert len(flagged) == 1 and 2500 <= flagged[0] < 2524  # the short window: one incident, one anomaly
    row = flagged[0]
    assert verdicts.score[row] >= verdicts.threshold and verdicts.lower[row] <= values[row] <= verdicts.upper[row]


def test_a_daily_spike_at_about_the_same_time_is_a_habit_after_two_days() -> None:
    rng = random.Random(2)
    rows_a_day = 288  # five-minute rows
    values = [10 + rng.gauss(0, 0.1) for _ in range(rows_a_day * 12)]
    spikes = []
    for day in range(1, 12):  # a nightly job, up to 20 minutes early or late, a little lighter each night
        row = day * rows_a_day + 40 + rng.randint(-4, 4)
        values[row] += 60 if day == 9 else 30 - 0.5 * day
        spikes.append(row)
    times = [1.7e9 + 300.0 * i for i in range(len(values))]
    detector = StreamingDetector(data_frequency="Minutes")
    verdicts = detector.update(detector.initial_state(), times, values)
    flagged = [row for row in spikes if verdicts.is_anomaly[row]]
    # News until it has been seen on two of the last three days; the night it doubled is news again.
    assert flagged == [spikes[0], spikes[1], spikes[8]]
    # Without the habit rule each night is news to the record of surprises, which learns them as the stream's
    # own tail: the range widens for every other time of day.
    without = StreamingDetector(data_frequency="Minutes", habit=0)
    unexplained = without.update(without.initial_state(), times, values)
    quiet = len(values) - 100
    assert halfwidth(unexplained, quiet) > 2 * halfwidth(verdicts, quiet)


def test_feedback_rows_are_learnt_as_normal() -> None:
    rng = random.Random(5)
    values = [100.0]
    for row in range(1, 300):  # a random walk: the last value is its best predictor
        values.append(values[-1] + rng.gauss(0, 1) + (60 if row == 200 else 0))
    detector = StreamingDetector(data_frequency="Hours", period=0)
    times, _ = hourly(values)
    told = detector.update(detector.initial_state(), times, values, normal=[i == 200 for i in range(300)])
    untold = judge(values, period=0)
    assert told.is_anomaly[200] and untold.is_anomaly[200]  # the verdict of the row itself stands
    # The next row is judged against the new level once told, and is still beyond the range (the same
    # incident) while untold.
    assert told.lower[201] <= values[201] <= told.upper[201]
    assert values[201] > untold.upper[201]


def test_the_floor_keeps_small_deviations_quiet() -> None:
    values = [10.0 + 0.01 * (i % 3) for i in range(200)]
    values[150] = 10.5
    assert judge(values, period=0).is_anomaly[150]
    assert not judge(values, period=0, floor=(1.0, 0.0)).is_anomaly[150]
    assert not judge(values, period=0, floor=(0.0, 0.1)).is_anomaly[150]


def test_warm_up_and_edge_series() -> None:
    for values in ([5.0] * 12, [0.0] * 50, [1e12 + i for i in range(50)], [1e-9 * (i % 5) for i in range(50)],
                   [-3.0 - i for i in range(50)]):
        verdicts = judge(values)
        assert verdicts.score[:WARMUP] == [0.0] * WARMUP
        assert len(verdicts.score) == len(values)
        for row in range(len(values)):
            assert verdicts.lower[row] <= verdicts.expected[row] <= verdicts.upper[row]
            assert 0.0 <= verdicts.score[row] <= 1.0
    assert not any(judge([5.0] * 100).is_anomaly)


def noise(kind: str, n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    draw = {
        "gaussian": lambda: rng.gauss(0, 1),
        "laplace": lambda: rng.expovariate(1) - rng.expovariate(1),
        "student-t3": lambda: rng.gauss(0, 1) / math.sqrt(sum(rng.gauss(0, 1) ** 2 for _ in range(3)) / 3),
        "lognormal": lambda: math.exp(rng.gauss(0, 1)),
        "uniform": lambda: rng.uniform(0, 1),
    }[kind]
    return [draw() for _ in range(n)]


@pytest.mark.parametrize("scale, shift", [(1e-6, 0.0), (1e6, 0.0), (3.0, 1e3), (-2.0, 5.0)])
def test_the_verdicts_do_not_depend_on_the_streams_units(scale: float, shift: float) -> None:
    # The range is a rank of the stream's own errors, so a quiet stream and a loud one with the same shape get
    # the same alarms: one threshold, whatever the units (and a flipped stream, its mirror image). Only a level
    # a million times the noise is not moved freely: there the least range (rounding noise) takes over.
    values = noise("student-t3", 3000, 1)
    values[2000] += 30
    base = judge(values, period=0)
    moved = judge([scale * v + shift for v in values], period=0)
    assert moved.is_anomaly == base.is_anomaly
    assert moved.score == pytest.approx(base.score, rel=1e-6, abs=1e-9)
    assert base.is_anomaly[2000]


@pytest.mark.parametrize("gaps, data_frequency, step", [
    ([301, 299, 302, 300, 298, 301], "Minutes", 300.0),  # a pusher's timer, a few seconds off the grid
    ([3_601, 3_599, 3_600, 3_602], "Hours", 3_600.0),
    ([90, 90, 91, 90], "Minutes", 90.0),  # not near a whole number of minutes: the gaps as they are
    ([4_500, 4_501, 4_499], "Hours", 4_500.0),  # 75 minutes is a cadence of its own, not an hour
    ([2_678_400, 2_592_000, 2_678_400], "Monthly", 2_678_400.0),  # a month has no fixed length
    ([301, 299, 302], None, 301.0),
])
def test_the_step_is_a_whole_number_of_the_frequency_s_units_when_the_gaps_are_near_one(
        gaps: list[int], data_frequency: str | None, step: float) -> None:
    times = [1.7e9]
    for gap in gaps:
        times.append(times[-1] + gap)
    assert median_gap(times, data_frequency) == step


def test_timestamps_a_few_seconds_off_the_grid_keep_the_day_in_rows() -> None:
    # Five-minute rows whose timestamps a timer moves by up to 5 s: the step is 300 s and a day 288 rows, as on
    # the grid; with the median gap (301 s here) a day was 287 rows, and every row's season drifted by a slot
    # every 300 rows.
    rng = random.Random(3)
    grid = [1.7e9 + 300.0 * i for i in range(600)]
    values = [100 + 30 * math.sin(2 * math.pi * i / 288) + rng.gauss(0, 2) for i in range(600)]
    jittered = [float(round(t + rng.uniform(-5, 5))) for t in grid]
    detector = StreamingDetector(data_frequency="Minutes")
    for times in (grid, jittered):
        state = detector.initial_state()
        detector.update(state, times, values)
        assert (state.step, state.period) == (300.0, 288)


@pytest.mark.parametrize("shift", [0.1, 1.2247])
def test_a_stream_predicted_exactly_gets_the_same_verdicts_at_any_level(shift: float) -> None:
    # Zeros with a pair of spikes every 100 rows, then denser spikes: most rows are predicted exactly. At a level
    # floats cannot hold exactly the same predictions miss by rounding noise, which must still read as exact
    # (errors, the choice of predictor): otherwise the record, the ranks and the chooser's ties all move, and this
    # stream lost its alarm at 0.1.
    values = [20.0 if i % 100 in (0, 6) or (i > 3000 and i % 25 == 0) else 0.0 for i in range(4032)]
    detector = StreamingDetector(data_frequency="Minutes")
    times = [1.7e9 + 300.0 * i for i in range(len(values))]
    base = detector.update(detector.initial_state(), times, values)
    moved = detector.update(detector.initial_state(), times, [v + shift for v in values])
    assert moved.is_anomaly == base.is_anomaly
    assert sum(base.is_anomaly) == 2


@pytest.mark.parametrize("rate, factor, seed", [
    (5.0, 0.0, 0), (5.0, 0.0, 3), (3.0, 0.0, 2), (3.0, 0.0, 5),  # a low count that stops
    (20.0, 0.5, 0), (20.0, 0.5, 4),  # a count that halves
])
def test_a_count_whose_level_drops_for_good_is_flagged_once(rate: float, factor: float, seed: int) -> None:
    # Minute counts with a daily wave for three days, then a day at ``factor`` of the level. On the count's own
    # scale no row is beyond its range (a zero is common enough at a rate of 3), and the six-row shift is within
    # its noise, so the one-step predictors follow the drop within eight rows and the stream is then predicted
    # exactly: without the level signal the day after is never flagged. The long window's mean error against what
    # was expected 36 rows back flags it once. On the square-root scale (a count's default) it is flagged once too.
    numbers = np.random.default_rng(seed)
    day = 1440
    wave = 1 + 0.3 * np.sin(2 * np.pi * np.arange(4 * day) / day)
    values = [float(v) for v in numbers.poisson(rate * wave[: 3 * day])]
    values += [float(v) for v in numbers.poisson(rate * factor * wave[3 * day :])]
    times = [1.7e9 - 1.7e9 % 86400 + 60.0 * i for i in range(len(values))]
    flagged = {}
    settings: dict[str, dict[str, bool]] = {"default": {}, "raw": {"counts": False},
                                            "raw, no level": {"counts": False, "level": False}}
    for name, options in settings.items():
        detector = StreamingDetector(data_frequency="Minutes", **options)
        verdicts = detector.update(detector.initial_state(), times, values)
        flagged[name] = [row - 3 * day for row in range(3 * day, 4 * day) if verdicts.is_anomaly[row]]
    for name in ("default", "raw"):
        assert len(flagged[name]) == 1 and flagged[name][0] <= 40
    # Without the level signal a count that halves is not flagged; one that stops is, once, as a value that stopped
    # moving (its zeros): a run far longer than any the stream had (app.compute.detect.frozen).
    assert len(flagged["raw, no level"]) == (1 if factor == 0.0 else 0)
    assert all(row <= 2 * frozen.LEAST_RUN for row in flagged["raw, no level"])


@pytest.mark.parametrize("seed", [0, 1, 3])
def test_a_level_shift_told_once_is_not_told_again_by_the_level_signal(seed: int) -> None:
    # A level halves for good (ten noise units: every row beyond the range). The first row is flagged and the
    # predictors follow; the level signal's window then holds errors against anchors from before the drop for
    # two long windows, past the incident's end, and flagged the same drop again there (5 of 5 seeds). A move an
    # incident told is not news to it: the alarms are the ones the detector raises without the level signal.
    numbers = np.random.default_rng(seed)
    day = 1440
    values = [100.0 * (1.0 if i < 3 * day else 0.5) + 5.0 * float(numbers.standard_normal()) for i in range(5 * day)]
    times = [1.7e9 - 1.7e9 % 86400 + 60.0 * i for i in range(len(values))]
    flagged = {}
    for level in (True, False):
        detector = StreamingDetector(data_frequency="Minutes", level=level)
        verdicts = detector.update(detector.initial_state(), times, values)
        flagged[level] = [row for row in range(3 * day, 5 * day) if verdicts.is_anomaly[row]]
    assert flagged[True] == flagged[False]
    assert flagged[True][0] == 3 * day


@pytest.mark.parametrize("kind", ["gaussian", "laplace", "student-t3", "lognormal", "uniform"])
def test_noise_alone_raises_few_alarms_whatever_its_distribution(kind: str) -> None:
    # Pure noise is flagged about as often as the default budget allows (one row a week: 1/168 of hourly rows),
    # light tails or heavy, and never much more: the calibration is honest, not merely conservative.
    allowed = row_probability(DEFAULT_FALSE_ALARMS_PER_WEEK, 3600.0)
    rates = []
    for seed in range(3):
        verdicts = judge(noise(kind, 4000, seed), period=0)
        rates.append(sum(verdicts.is_anomaly) / (4000 - WARMUP))
    assert max(rates) <= 1.25 * allowed


def test_the_signals_share_the_budget_as_many_as_they_behave_as() -> None:
    # A spike is a noisier and a denser stretch too: on a spiky stream the signals agree, so they count as fewer
    # than four. The count comes from the last window of quiet rows, kept as a ring whose totals never drift.
    values = noise("gaussian", 6000, 3)
    for row in range(300, 6000, 97):
        values[row] += 6.0
    detector = StreamingDetector(data_frequency="Hours", period=0)
    state = detector.initial_state()
    times, values = hourly(values)
    for start in range(0, 6000, 1000):  # in pieces: the ring wraps across calls
        detector.update(state, times[start : start + 1000], values[start : start + 1000])
    codes = list(state.joint_codes)
    assert len(codes) == WINDOW_ROWS
    assert state.joint_rows == sum(1 for code in codes if code >= 0)
    assert state.joint_hits == sum(1 for code in codes if code == 1)
    assert 1.0 <= detector._effective_signals(state) < detector.signals
    assert StreamingDetector(data_frequency="Hours", period=0, joint=False)._effective_signals(state) == 4.0


FIVE_MINUTES = 300.0
TUESDAY = 1_699_920_000.0  # 2023-11-14 00:00 UTC


def weekday(moment: float) -> int:
    """0 Monday to 6 Sunday (UTC): epoch day 0 was a Thursday."""
    return (int(moment // 86400) + 3) % 7


def weekends_lower(days: int, *, seed: int, lower_weekends: set[int] | None = None) -> tuple[list[float], list[float]]:
    """Five-minute rows from a Tuesday 00:07 (not on the hour): a daily wave, noise, and a weekend at 70% of the
    weekdays (every weekend, or the weeks in ``lower_weekends``)."""
    rng = random.Random(seed)
    times, values = [], []
    for i in range(days * 288):
        moment = TUESDAY + 420.0 + FIVE_MINUTES * i
        week = int((moment - TUESDAY) // (7 * 86400))
        level = 100 + 30 * math.sin(2 * math.pi * (moment % 86400) / 86400)
        if weekday(moment) >= 5 and (lower_weekends is None or week in lower_weekends):
            level *= 0.7
        times.append(moment)
        values.append(level + rng.gauss(0, 2))
    return times, values


def after_step(moment: float) -> bool:
    """Within three hours after a weekend's start (Saturday 00:00) or end (Monday 00:00)."""
    return weekday(moment) in (5, 0) and moment % 86400 < 3 * HOUR


def test_a_weekend_seen_the_last_two_weeks_is_expected() -> None:
    from app.compute.detect import weekly

    times, values = weekends_lower(35, seed=4)
    third = TUESDAY + (4 + 14) * 86400  # the third Saturday: two weeks of hour means and a day before it
    stepped = [row for row, moment in enumerate(times) if moment >= third and after_step(moment)]
    last_week = [row for row, moment in enumerate(times) if moment >= TUESDAY + 29 * 86400]
    judged = {}
    for learnt in (True, False):
        detector = StreamingDetector(data_frequency="Minutes", week_pattern=learnt)
        judged[learnt] = detector.update(detector.initial_state(), times, values)
    learning, blind = judged[True], judged[False]
    # From the third weekend on, the rows after the steps into and out of it are expected at the weekend's level
    # and back (within about the noise, whose sd is 2), not at yesterday's, and none is flagged.
    missed = {learnt: sum(abs(values[row] - v.expected[row]) for row in stepped) / len(stepped)
              for learnt, v in judged.items()}
    assert missed[True] < 3 < 10 < missed[False]
    assert not any(learning.is_anomaly[row] for row in stepped)
    # Without it each turn is a surprise the error record keeps as tail: the range stays several times wider.
    assert median(halfwidth(blind, row) for row in last_week) > 3 * median(halfwidth(learning, row)
                                                                           for row in last_week)

    # What moves the predictors: the change of the hour means a week and two weeks ago, where they agree.
    detector = StreamingDetector(data_frequency="Minutes")
    state = detector.initial_state()
    saturday = TUESDAY + 25 * 86400  # the fourth Saturday, 00:00
    seen = sum(1 for moment in times if moment < saturday)
    detector.update(state, times[:seen], values[:seen])
    into_weekend = slot(state, saturday + 120.0)
    # The rows step by 30 at midnight (100 to 70); the hour means by about 23 (the daily wave rises through the
    # hour after midnight and fell through the one before), 31 more than the day before them.
    week, excess = weekly.hour_turn(state, state.last_slot, into_weekend)
    assert -27 < week < -19 and -35 < excess < -27
    assert weekly.step(state, state.last_slot, into_weekend) == week
    assert weekly.day_gaps(state, into_weekend)[0] == pytest.approx(-30, abs=3)  # Saturday against Friday
    # Sunday's midnight: the day before changed (Saturday's step), the week hardly did.
    sunday = saturday + 86400
    since, now = slot(state, sunday - 180.0), slot(state, sunday + 120.0)
    assert 25 < weekly.hour_turn(state, since, now)[1] < 33 and abs(weekly.step(state, since, now)) < 7
    assert abs(weekly.day_gaps(state, slot(state, sunday + 7200.0))[0]) < 1.5  # Sunday is like Saturday
    # A stream whose weekend was lower one week only has no such pattern.
    once = StreamingDetector(data_frequency="Minutes")
    times, values = weekends_lower(35, seed=4, lower_weekends={2})
    state = once.initial_state()
    once.update(state, times[:seen], values[:seen])
    assert weekly.step(state, state.last_slot, into_weekend) == 0.0
    assert abs(weekly.day_gaps(state, into_weekend)[0]) < 1.5  # the noise of four hour means, no step


def test_a_streams_second_weekend_is_expected_from_its_first() -> None:
    """A stream's second week has no two weeks ago: the turn of an hour takes the change a week ago alone, so the
    second weekend's start is expected; a value some days ago waits for two weeks."""
    from app.compute.detect import weekly

    times, values = weekends_lower(14, seed=4)
    second = TUESDAY + 11 * 86400  # the second Saturday, 00:00
    detector = StreamingDetector(data_frequency="Minutes")
    verdicts = detector.update(detector.initial_state(), times, values)
    stepped = [row for row, moment in enumerate(times) if moment >= second and after_step(moment)]
    assert not any(verdicts.is_anomaly[row] for row in stepped)  # the code before flagged one

    state = detector.initial_state()
    seen = sum(1 for moment in times if moment < second)
    detector.update(state, times[:seen], values[:seen])
    into_weekend = slot(state, second + 120.0)
    week, excess = weekly.hour_turn(state, state.last_slot, into_weekend)
    assert -27 < week < -19 and -35 < excess < -27  # as from the third weekend on (the test above)
    assert weekly.step(state, state.last_slot, into_weekend) == week
    assert weekly.day_gaps(state, into_weekend) == [0.0, 0.0, 0.0]


def test_a_gauge_that_rarely_moves_learns_its_moves() -> None:
    # A gauge that holds one value and moves by half a unit on one row in 250: the detector predicts it exactly
    # on almost every row, so the window's top rank is an error of 0. Its moves are then read among the errors
    # above 0: a move as large as those the window holds is as common as the window says, not beyond a range of
    # width 0. The first move is news, and so is one ten times larger than any before; the moves between are
    # learnt as the record learns any heavy tail, its threshold at most doubling with each (a handful of moves).
    values = [42.0] * 6000
    moves = list(range(400, 6000, 250))
    for count, row in enumerate(moves):
        values[row] += 0.5 if count % 2 else -0.5
    values[5555] = 47.0
    detector = StreamingDetector(data_frequency="Minutes", period=0)
    times = [1.7e9 + 60.0 * i for i in range(len(values))]
    verdicts = detector.update(detector.initial_state(), times, values)
    flagged = [row for row in range(len(values)) if verdicts.is_anomaly[row]]
    assert flagged[0] == moves[0]
    assert not [row for row in flagged if moves[6] <= row < 5555]
    assert 5555 in flagged


@pytest.mark.parametrize("step", [60, 300])
@pytest.mark.parametrize("noise", ["gaussian", "student_t3", "poisson"])
@pytest.mark.parametrize("factor", [0.1, 0.5, 2.0])
def test_a_gauge_that_drops_to_a_tenth_halves_or_doubles_is_flagged_within_eight_rows(
        step: int, noise: str, factor: float) -> None:
    # Three days and a third of a daily wave (a gauge with Gaussian or Student-t noise, or a count), then the level
    # times ``factor`` for good: an operator needs the first flag within the scorer's 8 rows, not when the long
    # window has seen it.
    rng = np.random.default_rng(11)
    day = 86400 // step
    n = 4 * day
    level = 100 * (1 + 0.3 * np.sin(2 * np.pi * np.arange(n) / day))
    change = 3 * day + day // 3
    if noise == "poisson":
        values = np.where(np.arange(n) < change, rng.poisson(level), rng.poisson(level * factor)).astype(float)
    else:
        jitter = rng.normal(0, 5, n) if noise == "gaussian" else 5 * rng.standard_t(3, n)
        values = np.where(np.arange(n) < change, level, level * factor) + jitter * min(1.0, factor)
    times = 1.7e9 - 1.7e9 % 86400 + step * np.arange(n)
    detector = StreamingDetector(data_frequency="Minutes")
    verdicts = detector.update(detector.initial_state(), times.tolist(), values.tolist())
    flags = np.flatnonzero(verdicts.is_anomaly)
    after = flags[flags >= change]
    assert len(after) and after[0] - change < 8
    assert verdicts.signal[after[0]] and verdicts.direction[after[0]] == ("down" if factor < 1 else "up")
    # Not a detector that flags everything: before the change, at most the couple of alarms a young stream with
    # heavy-tailed noise raises in its first days, while its record is short.
    assert len(flags[(flags >= day) & (flags < change)]) <= 2
