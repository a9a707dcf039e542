"""A value that stops moving is an anomaly (app.compute.detect.frozen): a gauge whose exporter hangs is flagged
within 60 rows, once, with a reason; runs a stream has every night are its own, and a stream flat from its start
is flat by nature."""

from __future__ import annotations

import math

import numpy as np

from app.compute.detect.reasons import reason
from app.compute.detect.state import FROZEN
from app.compute.detect.streaming import StreamingDetector

DAY = 288  # five-minute rows


def judge(values: list[float], step: float = 300.0) -> object:
    detector = StreamingDetector(data_frequency="Minutes")
    return detector.update(detector.initial_state(), [1.7e9 + step * i for i in range(len(values))], values)


def gauge(days: int, seed: int = 1) -> list[float]:
    noise = np.random.default_rng(seed)
    return [round(50 + 10 * math.sin(2 * math.pi * i / DAY) + noise.normal(0, 2), 2) for i in range(days * DAY)]


def test_a_gauge_that_hangs_is_flagged_once_within_60_rows_and_says_why() -> None:
    for seed in range(5):
        values = gauge(5, seed)
        hang = len(values) - 200
        values[hang:] = [values[hang]] * 200
        verdicts = judge(values)
        flagged = [row for row in range(hang, len(values)) if verdicts.is_anomaly[row]]
        assert flagged and flagged[0] - hang < 60, (seed, flagged)
        assert len(flagged) == 1 and verdicts.signal[flagged[0]] == FROZEN, (seed, flagged)
        why = reason(verdicts.signal[flagged[0]], verdicts.size[flagged[0]], values[flagged[0]],
                     verdicts.lower[flagged[0]], verdicts.upper[flagged[0]])
        assert why is not None and "has not changed for" in why
        assert not any(verdicts.is_anomaly[:hang])


def test_nightly_zeros_of_a_count_are_its_own_runs() -> None:
    noise = np.random.default_rng(7)
    values = []
    for i in range(10 * DAY):
        hour = (i % DAY) / 12
        values.append(0.0 if hour < 4 else float(noise.poisson(20 + 10 * math.sin(math.pi * (hour - 4) / 20))))
    verdicts = judge(values)
    assert not any(verdicts.signal[row] == FROZEN for row in range(len(values))), "a night is not a hang"


def test_a_stream_flat_from_its_start_is_not_flagged_for_it() -> None:
    verdicts = judge([3.0] * (6 * DAY))
    assert not any(verdicts.is_anomaly)
