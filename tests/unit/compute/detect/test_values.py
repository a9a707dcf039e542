"""Every finite value the API accepts (magnitudes up to 1e300, subnormals) gives finite verdicts, and the state it
leaves keeps judging, through a save and restore too (app.compute.detect.values)."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.compute.detect import snapshot
from app.compute.detect.streaming import StreamingDetector
from app.compute.detect.values import JUDGED_LIMIT, judged

MAX_ABS_VALUE = 1e300  # what the API accepts (app.monitors.schemas, app.series)
EXTREMES = [0.0, -0.0, 5e-324, -5e-324, 1e-310, 1e-200, 1e-150, 1.0, 1e150, -1e150, 1e155, 1e200, MAX_ABS_VALUE,
            -MAX_ABS_VALUE]
STEPS = {"Minutes": 60, "Hours": 3_600, "Daily": 86_400}


def finite(values: list[float]) -> bool:
    return all(map(math.isfinite, values))


values = st.one_of(st.sampled_from(EXTREMES), st.floats(-MAX_ABS_VALUE, MAX_ABS_VALUE, allow_subnormal=True),
                   st.integers(0, 5).map(float))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(values, min_size=12, max_size=160), st.sampled_from(sorted(STEPS)), st.data())
def test_any_accepted_values_give_finite_verdicts_and_a_state_that_keeps_working(
    stream: list[float], frequency: str, data: st.DataObject
) -> None:
    detector = StreamingDetector(data_frequency=frequency)
    state = detector.initial_state()
    times = [1.7e9 + STEPS[frequency] * i for i in range(len(stream) + 30)]
    cut = data.draw(st.integers(1, len(stream)))
    first = detector.update(state, times[:cut], stream[:cut])
    state = snapshot.decode(snapshot.encode(state))  # a poisoned state would be refused here
    second = detector.update(state, times[cut:len(stream)], stream[cut:])
    after = detector.update(state, times[len(stream):], [1.0 + i % 3 for i in range(30)])
    for verdicts in (first, second, after):
        for name in ("expected", "lower", "upper", "score"):
            assert finite(getattr(verdicts, name)), name
        # Every flagged row has a signal, so a reason; no other row has one.
        assert [bool(code) for code in verdicts.signal] == verdicts.is_anomaly


def test_a_huge_value_in_warm_up_or_later_is_flagged_and_the_stream_goes_on() -> None:
    for at in (5, 40):
        stream = [1.0 + i % 3 for i in range(at)] + [1e300] + [1.0 + i % 3 for i in range(60)]
        detector = StreamingDetector(data_frequency="Minutes")
        verdicts = detector.update(detector.initial_state(), [1.7e9 + 60 * i for i in range(len(stream))], stream)
        assert finite(verdicts.score) and finite(verdicts.upper)
        if at >= 11:  # warm-up rows only teach
            assert verdicts.is_anomaly[at]
        assert not any(verdicts.is_anomaly[at + 30:])


def test_values_are_judged_within_the_limit_and_tiny_ones_as_zero() -> None:
    assert judged(1e300) == JUDGED_LIMIT and judged(-1e300) == -JUDGED_LIMIT
    assert judged(5e-324) == 0.0 and judged(-1e-200) == 0.0
    assert judged(123.5) == 123.5 and judged(-1e-9) == -1e-9


def test_a_stream_never_below_0_is_never_expected_below_0() -> None:
    # A scrape duration: small, never negative, with the odd slow scrape.
    stream = [0.02 + 0.01 * ((i * 7919) % 13) / 13 + (0.12 if i % 97 == 50 else 0.0) for i in range(600)]
    detector = StreamingDetector(data_frequency="Minutes")
    verdicts = detector.update(detector.initial_state(), [1.7e9 + 60 * i for i in range(600)], stream)
    assert min(verdicts.lower) >= 0.0 and min(verdicts.expected) >= 0.0
    # One value below 0 and the range may go there: the clamp is the stream's own history, not a rule on metrics.
    shifted = [value - 0.03 for value in stream]
    verdicts = detector.update(detector.initial_state(), [1.7e9 + 60 * i for i in range(600)], shifted)
    assert min(verdicts.lower) < 0.0
