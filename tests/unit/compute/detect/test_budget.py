"""The alarm budget: is_anomaly is exactly anomaly_score >= threshold on every row, and a stream without
anomalies raises about the budgeted number of false alarms per week whatever its noise and spacing."""

from __future__ import annotations

import csv
import math
import random

import pytest

from app.compute.detect.budget import budget_for_sensitivity, row_probability
from app.compute.detect.streaming import StreamingDetector, Verdicts
from tests.support import ROOT

NAB_DEV = next((parent / "shared" / "data" / "nab-dev" / "data" for parent in ROOT.parents
                if (parent / "shared" / "data" / "nab-dev" / "data").is_dir()),
               ROOT.parent / "shared" / "data" / "nab-dev" / "data")
WEEK = 7 * 86400


def judge(times: list[float], values: list[float], frequency: str = "Minutes", **config: object) -> Verdicts:
    detector = StreamingDetector(data_frequency=frequency, **config)  # type: ignore[arg-type]
    return detector.update(detector.initial_state(), times, values)


def test_is_anomaly_is_exactly_the_score_at_the_threshold_on_every_nab_file() -> None:
    if not NAB_DEV.is_dir():
        pytest.skip(f"NAB development data not found at {NAB_DEV}")
    files = sorted(NAB_DEV.glob("*/*.csv"))
    assert len(files) == 41
    flagged = 0
    for path in files:
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
        times = [_epoch(r["timestamp"]) for r in rows]
        verdicts = judge(times, [float(r["value"]) for r in rows],
                         "Hours" if path.parent.name == "realAdExchange" else "Minutes")
        assert 0.99 <= verdicts.threshold < 1.0
        assert verdicts.is_anomaly == [score >= verdicts.threshold for score in verdicts.score], path.name
        assert all(0.0 <= score <= 1.0 for score in verdicts.score)
        flagged += sum(verdicts.is_anomaly)
    assert flagged  # the files hold labelled anomalies: a detector that never fires would pass vacuously


def _epoch(text: str) -> float:
    from datetime import UTC, datetime

    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def stream(kind: str, step: int, weeks: int, seed: int) -> tuple[list[float], list[float]]:
    """A stream without anomalies: a daily wave and a weekend dip under one kind of noise."""
    rng = random.Random(seed)
    times, values = [], []
    for i in range(weeks * WEEK // step):
        t = 1_700_006_400 + i * step
        level = 100 * (1 + 0.3 * math.sin(2 * math.pi * (t % 86400) / 86400)) * (0.8 if (t // 86400) % 7 >= 5 else 1)
        if kind == "gaussian":
            value = level + rng.gauss(0, 5)
        elif kind == "student-t3":
            value = level + 5 * rng.gauss(0, 1) / math.sqrt(sum(rng.gauss(0, 1) ** 2 for _ in range(3)) / 3)
        else:  # Poisson counts around a tenth of the level, by the sum of exponential gaps
            count, clock = 0, rng.expovariate(1.0)
            while clock < level / 10:
                count, clock = count + 1, clock + rng.expovariate(1.0)
            value = float(count)
        times.append(float(t))
        values.append(value)
    return times, values


@pytest.mark.parametrize("kind", ["gaussian", "student-t3", "poisson"])
@pytest.mark.parametrize("step", [60, 300])
def test_a_stream_without_anomalies_raises_about_its_budget_per_week(kind: str, step: int) -> None:
    weeks = 3
    times, values = stream(kind, step, weeks, seed=7)
    learning = 86400 // step  # the first day teaches the detector its season
    default = judge(times, values)
    assert default.threshold == pytest.approx(1 - row_probability(1.0, step))
    per_week = sum(default.is_anomaly[learning:]) / weeks
    # One a week is the budget; a factor of three either way is noise over three weeks.
    assert per_week <= 3.0, f"{per_week:.2f} false alarms a week"
    lenient = judge(times, values, false_alarms_per_week=30.0)
    assert sum(lenient.is_anomaly[learning:]) > sum(default.is_anomaly[learning:])
    assert lenient.threshold < default.threshold


@pytest.mark.parametrize("kind", ["gaussian", "student-t3", "poisson"])
def test_a_lenient_budget_is_spent_not_explained_away_as_habits(kind: str) -> None:
    # At a hundred a week a deviation just beyond the range shows within two hours of this time on most days:
    # counted as a habit, it would explain away most rows the budget allows (a third to a half of them).
    weeks = 3
    times, values = stream(kind, 60, weeks, seed=7)
    per_week = sum(judge(times, values, false_alarms_per_week=100.0).is_anomaly[1440:]) / weeks
    assert 50 <= per_week <= 200, f"{per_week:.1f} a week against a budget of 100"


def test_sensitivity_spans_ten_thousand_times_the_budget() -> None:
    assert budget_for_sensitivity(0) == pytest.approx(0.01)
    assert budget_for_sensitivity(99) == pytest.approx(100.0)
    assert budget_for_sensitivity(round(99 / 2)) == pytest.approx(1.0, rel=0.05)
    # A coarse stream is capped at one row in 100, whatever the budget.
    assert row_probability(1000.0, 3600) == 0.01


def test_confidence_sets_the_threshold_instead() -> None:
    times, values = stream("gaussian", 300, 1, seed=1)
    assert judge(times, values, confidence=0.999).threshold == pytest.approx(0.999)
    with pytest.raises(ValueError):
        StreamingDetector(data_frequency="Minutes", confidence=0.99, false_alarms_per_week=1.0)


def test_one_spike_does_not_blind_a_young_stream() -> None:
    rng = random.Random(4)
    values = [10 + rng.gauss(0, 1) for _ in range(60)]
    values[30] = 90.0
    times = [1.7e9 + 60.0 * i for i in range(60)]
    verdicts = judge(times, values)
    assert verdicts.is_anomaly[30]
    before, after = verdicts.upper[29] - verdicts.expected[29], verdicts.upper[59] - verdicts.expected[59]
    # The spike enters the record at most at twice the threshold's error: the range may grow about that much
    # (its tail beyond is the window's model), not to the spike's size (about 80).
    assert after <= 3 * before and after < 40

