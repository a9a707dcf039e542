"""A saved detector state is the state: restored at any row, it judges the rest of a stream exactly as the state
that was never saved, and bytes that are not a state of this release are refused with SnapshotError only."""

from __future__ import annotations

import functools
import json
import math
import random
import sys
import zlib
from array import array

import numpy as np
import pytest

from app.compute.detect import snapshot
from app.compute.detect.snapshot import LAYOUT, SnapshotError, decode, encode
from app.compute.detect.state import DetectorState, Verdicts
from app.compute.detect.streaming import StreamingDetector

ROWS = 6_000
SPIKES = (1_200, 2_500, 3_300, 5_100)
SHIFT = 4_000  # the level steps up here
INCIDENT = 3_301  # the row after a spike: the state is inside an incident
OTHER_ORDER = "little" if sys.byteorder == "big" else "big"


def stream(seed: int = 11, *, jitter: float = 0.0) -> tuple[list[float], list[float]]:
    """Five-minute rows: a daily wave with noise, a few spikes and a level shift."""
    rng = np.random.default_rng(seed)
    rows = np.arange(ROWS)
    values = 100 + 30 * np.sin(2 * np.pi * rows / 288) + rng.normal(0, 3, ROWS)
    values[list(SPIKES)] += 80
    values[SHIFT:] += 40
    times = 1.7e9 + 300.0 * rows + (rng.uniform(-jitter, jitter, ROWS) if jitter else 0.0)
    return times.tolist(), values.tolist()


def assert_same_verdicts(left: Verdicts, right: Verdicts) -> None:
    """Every field equal, floats bit for bit (repr round-trips a float, and a NaN reads equal to a NaN)."""
    for name in Verdicts.__dataclass_fields__:
        assert repr(getattr(left, name)) == repr(getattr(right, name)), name


def assert_restored(detector: StreamingDetector, cut: int, times: list[float], values: list[float],
                    normal: list[bool] | None = None) -> tuple[DetectorState, Verdicts]:
    """Feeds the rows before ``cut``, saves and restores the state, feeds the rest to both; returns the restored
    state and the verdicts before the cut."""
    original = detector.initial_state()
    before = detector.update(original, times[:cut], values[:cut], normal[:cut] if normal else None)
    saved = encode(original)
    restored = decode(saved)
    assert encode(restored) == saved
    assert repr(restored) == repr(original)  # every field, nested ones and the calibrations' too
    rest = [times[cut:], values[cut:], normal[cut:] if normal else None]
    assert_same_verdicts(detector.update(original, *rest), detector.update(restored, *rest))
    assert encode(restored) == encode(original)
    return restored, before


@pytest.mark.parametrize("cut", [5, 15, 2_000, INCIDENT, 4_500])
def test_a_restored_state_judges_the_rest_exactly_as_the_original(cut: int) -> None:
    times, values = stream()
    detector = StreamingDetector(data_frequency="Minutes")
    _, before = assert_restored(detector, cut, times, values)
    assert before.incident[-1] == (cut == INCIDENT)  # one cut inside an incident, the others outside


def test_without_a_season_on_irregular_rows() -> None:
    times, values = stream(5, jitter=60.0)
    for cut in (15, 3_000, INCIDENT):
        restored, _ = assert_restored(StreamingDetector(data_frequency="Minutes", period=0), cut, times, values)
        assert restored.period == 0 and not restored.slot_ids


def test_with_feedback_that_rows_are_normal() -> None:
    times, values = stream(3)
    normal = [row in (2_501, 4_001, 4_002) or row % 997 == 0 for row in range(ROWS)]
    for cut in (2_502, 4_001, 4_500):
        assert_restored(StreamingDetector(data_frequency="Minutes"), cut, times, values, normal)


def test_the_calibrations_share_their_signals_arrays_and_records_again() -> None:
    times, values = stream()
    detector = StreamingDetector(data_frequency="Minutes")
    original = detector.initial_state()
    detector.update(original, times[:4_500], values[:4_500])
    restored = decode(encode(original))
    pairs = [(restored.error_fit, restored.errors_sorted)] + [
        (signal.fit, signal.ranked) for signal in (restored.shift, restored.spread, restored.density)]
    for fit, ranked in pairs:
        assert fit.calibration is not None
        assert fit.calibration.ranked is ranked
        assert fit.calibration.record is fit.record


def test_the_nans_of_a_predictor_with_nothing_to_read_survive() -> None:
    times, values = stream()
    detector = StreamingDetector(data_frequency="Minutes")
    state = detector.initial_state()
    detector.update(state, times[:600], values[:600])  # no median of three seasons yet
    restored = decode(encode(state))
    assert any(math.isnan(x) for x in restored.chooser_ring)
    assert restored.chooser_ring.tobytes() == state.chooser_ring.tobytes()


def test_a_calibration_that_shares_nothing_is_not_saved() -> None:
    times, values = stream()
    detector = StreamingDetector(data_frequency="Minutes")
    state = detector.initial_state()
    detector.update(state, times[:500], values[:500])
    assert state.error_fit.calibration is not None
    state.error_fit.calibration = state.error_fit.calibration._replace(ranked=array("d", state.errors_sorted))
    with pytest.raises(ValueError, match="own sorted array"):
        encode(state)


def test_an_empty_state_round_trips() -> None:
    assert repr(decode(encode(DetectorState()))) == repr(DetectorState())


@functools.cache
def saved_state() -> bytes:
    times, values = stream()
    detector = StreamingDetector(data_frequency="Minutes")
    state = detector.initial_state()
    detector.update(state, times[:1_500], values[:1_500])
    return encode(state)


def rewritten(saved: bytes, **changes: object) -> bytes:
    """The same snapshot with header fields changed."""
    body = zlib.decompress(saved)
    size = int.from_bytes(body[:4], "little")
    header = json.loads(body[4:4 + size]) | changes
    raw = json.dumps(header).encode()
    return zlib.compress(len(raw).to_bytes(4, "little") + raw + body[4 + size:], 1)


def test_the_layout_is_a_short_tag_fixed_at_import() -> None:
    assert len(LAYOUT) == 16 and int(LAYOUT, 16) >= 0
    assert snapshot._layout() == LAYOUT
    assert decode(rewritten(saved_state())) is not None  # rewriting alone keeps a snapshot readable


@pytest.mark.parametrize("bad", [
    b"", b"\x00", b"not a snapshot", bytes(random.Random(1).randrange(256) for _ in range(5_000)),
    zlib.compress(b""), zlib.compress(b"\x05\x00\x00\x00[1,2]"), zlib.compress(b"\xff\xff\xff\xff{}"),
])
def test_random_bytes_are_refused(bad: bytes) -> None:
    with pytest.raises(SnapshotError):
        decode(bad)


def test_a_truncated_or_extended_snapshot_is_refused() -> None:
    saved = saved_state()
    for end in (1, 10, len(saved) // 2, len(saved) - 1):
        with pytest.raises(SnapshotError):
            decode(saved[:end])
    with pytest.raises(SnapshotError):
        decode(saved + b"\x00")


@pytest.mark.parametrize("changes", [
    {"layout": "0123456789abcdef"}, {"format": snapshot.FORMAT + 1}, {"order": OTHER_ORDER},
    {"ints": []}, {"arrays": []}, {"ints": "x"}, {"arrays": [["x", 1]]},
])
def test_another_layout_format_or_byte_order_is_refused(changes: dict[str, object]) -> None:
    with pytest.raises(SnapshotError):
        decode(rewritten(saved_state(), **changes))


def test_damage_inside_the_compression_is_refused_or_read_never_another_error() -> None:
    """zlib's checksum catches damage to the compressed bytes; damage before compression (a bug, a crafted state)
    must still end in a state or a SnapshotError."""
    body = bytearray(zlib.decompress(saved_state()))
    rng = random.Random(2)
    for _ in range(300):
        damaged = bytearray(body)
        for _ in range(rng.randint(1, 4)):
            position = rng.randrange(min(len(damaged), 2_000)) if rng.random() < 0.7 else rng.randrange(len(damaged))
            damaged[position] = rng.randrange(256)
        try:
            decode(zlib.compress(bytes(damaged), 1))
        except SnapshotError:
            pass
