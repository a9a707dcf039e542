"""The detectors behind DetectionWork, called in-process: causality, exactness of partial judging, fallback."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.compute.detect import detectors
from app.compute.detect.results import DEFAULT_DETECTOR, DETECTOR_IDS, FALLBACK_DETECTOR, DetectionResult
from app.compute.detect.work import DetectionWork

FIELDS = ("expected", "lower", "upper", "score", "is_anomaly", "direction")


def five_minute_series(n: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    steps = rng.choice([300, 300, 300, 600, 290, 310], size=n - 1)  # gaps and jitter
    times = 1_767_225_600 + np.concatenate([[0], np.cumsum(steps)])
    daily = 10 * np.sin(2 * np.pi * times / 86_400)
    values = 50 + daily + rng.normal(0, 1, n)
    return times.astype(np.int64), values


def check_sane(result: DetectionResult, judged: int) -> None:
    for name in FIELDS:
        assert len(getattr(result, name)) == judged
    for mid, low, high, score, flag, direction in zip(*(getattr(result, name) for name in FIELDS), strict=True):
        assert all(math.isfinite(v) for v in (low, mid, high, score))
        assert low <= mid <= high
        assert 0.0 <= score <= 1.0
        assert flag == (score >= result.threshold)
        assert (direction is not None) == flag and direction in (None, "up", "down")


@pytest.mark.parametrize("detector", DETECTOR_IDS)
@pytest.mark.parametrize("start", [1, 11, 500, 1500, 2999])
def test_judging_a_suffix_equals_judging_everything(detector: str, start: int) -> None:
    times, values = five_minute_series(3000)
    full = DetectionWork(times, values, "Minutes", 0.99, detector).run()
    part = DetectionWork(times, values, "Minutes", 0.99, detector, start=start).run()
    check_sane(full, 3000)
    check_sane(part, 3000 - start)
    for name in FIELDS:
        assert getattr(part, name) == getattr(full, name)[start:], name
    assert (part.warmup_points, part.period) == (full.warmup_points, full.period)


@pytest.mark.parametrize("detector", DETECTOR_IDS)
def test_verdicts_are_causal(detector: str) -> None:
    times, values = five_minute_series(1200, seed=3)
    full = DetectionWork(times, values, "Minutes", 0.99, detector).run()
    for cut in (12, 300, 1199):
        prefix = DetectionWork(times[:cut], values[:cut], "Minutes", 0.99, detector).run()
        for name in FIELDS:
            assert getattr(prefix, name) == getattr(full, name)[:cut], (name, cut)


def test_a_spike_is_flagged_up_and_a_dip_down() -> None:
    times, values = five_minute_series(2000, seed=5)
    values = values.copy()
    values[1500] += 25
    values[1800] -= 25
    result = DetectionWork(times, values, "Minutes", 0.99).run()
    assert result.is_anomaly[1500] and result.direction[1500] == "up"
    assert result.is_anomaly[1800] and result.direction[1800] == "down"
    assert sum(result.is_anomaly) < 40  # a quiet series is mostly normal
    assert result.period == 288


def test_warm_up_rows_score_zero_and_the_minimum_series_judges_its_last_row() -> None:
    times, values = five_minute_series(12)
    result = DetectionWork(times, values, "Minutes", 0.99).run()
    assert result.warmup_points == detectors.WARMUP == 11
    assert result.score[:11] == [0.0] * 11 and not any(result.is_anomaly[:11])
    check_sane(result, 12)


def test_flat_series_never_flags_and_a_step_does() -> None:
    times = np.arange(500, dtype=np.int64) * 3600
    flat = np.full(500, 7.0)
    assert not any(DetectionWork(times, flat, "Hours", 0.99).run().is_anomaly)
    stepped = flat.copy()
    stepped[400:] = 9.0
    result = DetectionWork(times, stepped, "Hours", 0.99).run()
    assert result.is_anomaly[400] and result.direction[400] == "up"


def test_higher_confidence_widens_the_range() -> None:
    times, values = five_minute_series(1500, seed=8)
    narrow = DetectionWork(times, values, "Minutes", 0.9).run()
    wide = DetectionWork(times, values, "Minutes", 0.9999).run()
    assert all(
        w >= n
        for w, n in zip(np.subtract(wide.upper, wide.expected), np.subtract(narrow.upper, narrow.expected), strict=True)
    )
    assert sum(wide.is_anomaly) <= sum(narrow.is_anomaly)


def test_a_failing_default_detector_falls_back_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object) -> DetectionResult:
        raise np.linalg.LinAlgError("singular")

    monkeypatch.setattr(detectors, "streaming_detector", broken)
    times, values = five_minute_series(300)
    result = DetectionWork(times, values, "Minutes", 0.99).run()
    assert result.fallback is not None and FALLBACK_DETECTOR in result.fallback and DEFAULT_DETECTOR in result.fallback
    check_sane(result, 300)


def test_huge_and_tiny_values_stay_finite() -> None:
    times = np.arange(400, dtype=np.int64) * 60
    rng = np.random.default_rng(0)
    for scale in (1e-200, 1e200):
        values = scale * (1 + rng.random(400))
        for detector in DETECTOR_IDS:
            check_sane(DetectionWork(times, values, "Minutes", 0.9999, detector).run(), 400)


@pytest.mark.parametrize("detector", DETECTOR_IDS)
def test_any_length_and_any_start_including_nothing_to_judge(detector: str) -> None:
    # Monitors judge short histories and sometimes no new row at all.
    for n in range(16):
        times = np.arange(n, dtype=np.int64) * 300
        values = np.sin(np.arange(n))
        full = DetectionWork(times, values, "Minutes", 0.99, detector).run()
        assert full.fallback is None
        for start in range(n + 1):
            part = DetectionWork(times, values, "Minutes", 0.99, detector, start=start).run()
            assert part.fallback is None and (part.period, part.warmup_points) == (full.period, full.warmup_points)
            for name in FIELDS:
                assert getattr(part, name) == getattr(full, name)[start:]
