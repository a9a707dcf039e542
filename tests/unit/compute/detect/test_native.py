"""The compiled detector (app.compute.detect.native) stands for its sources only when it was built from them, and
gives the same numbers bit for bit: every verdict, split anywhere, and the states it saves, which a process running
the sources reads (and the other way round)."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from app.compute.detect import native
from app.compute.detect.native import COMPILED, PURE_VARIABLE, STAMP, compiled_dir, current_build, fingerprint
from tests.support import ROOT, missing_service

DAY = 86_400.0


def _series() -> list[tuple[str, dict, list[float], list[float], list[bool] | None]]:
    """Streams that take every path: a daily season with spikes, a dip and a level shift, five-minute and one-minute
    steps, counts, a flat stretch, gaps and repeated stamps, feedback, a floor, a confidence, no season."""
    rng = random.Random(7)
    out = []
    times = [1_700_000_000.0 + 300.0 * i for i in range(3_000)]
    values = [100 + 30 * math.sin(2 * math.pi * i / 288) + rng.gauss(0, 3) for i in range(3_000)]
    for i in range(400, 3_000, 517):
        values[i] += 45 * (1 if i % 2 else -1)
    for i in range(2_200, 3_000):
        values[i] *= 1.8
    out.append(("seasonal", {"data_frequency": "Minutes"}, times, values, None))
    normal = [i in (401, 2_201) for i in range(3_000)]
    out.append(("feedback", {"data_frequency": "Minutes", "floor": (2.0, 0.01)}, times, values, normal))
    counts = [float(sum(rng.random() < 0.04 for _ in range(50))) for _ in range(2_500)]
    counts[1_500:1_560] = [0.0] * 60
    minutes = [1_700_000_000.0 + 60.0 * i for i in range(2_500)]
    out.append(("counts", {"data_frequency": "Seconds", "false_alarms_per_week": 0.1}, minutes, counts, None))
    gappy = [t for i, t in enumerate(minutes) if not 700 <= i < 900 and i % 97]
    gappy[1_000:1_003] = [gappy[1_000]] * 3  # repeated stamps
    flat = [5.0 if 600 <= i < 1_100 else 5.0 + rng.gauss(0, 0.2) for i in range(len(gappy))]
    out.append(("gaps", {"data_frequency": "Minutes", "confidence": 0.999, "period": 0}, gappy, flat, None))
    irregular = [1_600_000_000.0 + DAY * i + rng.uniform(-3_000, 3_000) for i in range(800)]
    walk = [0.0]
    for _ in range(799):
        walk.append(walk[-1] + rng.gauss(0, 1))
    out.append(("daily", {"data_frequency": "Daily"}, irregular, walk, None))
    return out


def _verdicts(state_hex: dict[str, str] | None = None) -> dict[str, object]:
    """Every series judged whole, and in two parts with the state saved and restored between them; floats as hex.
    With ``state_hex``, the second parts start from those saved states (another process's)."""
    from app.compute.detect import snapshot
    from app.compute.detect.streaming import StreamingDetector

    def exact(verdicts: object) -> list[object]:
        return [[x.hex() if isinstance(x, float) else x for x in getattr(verdicts, name)]
                for name in ("expected", "lower", "upper", "score", "is_anomaly", "direction", "incident")]

    out: dict[str, object] = {"compiled": native.active()}
    for name, settings, times, values, normal in _series():
        detector = StreamingDetector(**settings)
        whole = detector.update(detector.initial_state(), times, values, normal)
        cut = len(times) // 3
        first = detector.initial_state()
        detector.update(first, times[:cut], values[:cut], normal[:cut] if normal else None)
        saved = snapshot.encode(first)
        restored = snapshot.decode(bytes.fromhex(state_hex[name]) if state_hex else saved)
        rest = detector.update(restored, times[cut:], values[cut:], normal[cut:] if normal else None)
        out[name] = {"whole": exact(whole), "threshold": whole.threshold.hex(), "state": saved.hex(),
                     "rest": exact(rest)}
    return out


def _in_plain_python(state_hex: dict[str, str] | None = None) -> dict:
    code = ("import json, sys\nfrom tests.unit.compute.detect.test_native import _verdicts\n"
            "print(json.dumps(_verdicts(json.loads(sys.stdin.read()))))")
    env = {**os.environ, PURE_VARIABLE: "1"}
    done = subprocess.run([sys.executable, "-c", code], input=json.dumps(state_hex), capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300, check=True)
    result: dict = json.loads(done.stdout)
    return result


def test_the_compiled_detector_gives_the_plain_one_s_numbers_and_reads_its_states() -> None:
    if not native.active():
        missing_service("the compiled detector is not built (make install builds it; needs a C compiler)")
    ours = _verdicts()
    plain = _in_plain_python()
    assert ours["compiled"] is True and plain["compiled"] is False
    for name, *_ in _series():
        assert ours[name]["whole"] == plain[name]["whole"], name
        assert ours[name]["threshold"] == plain[name]["threshold"], name
        assert ours[name]["state"] == plain[name]["state"], name  # byte for byte, so either process reads it
        whole_rest = [column[len(column) - len(ours[name]["rest"][0]):] for column in ours[name]["whole"]]
        assert ours[name]["rest"] == whole_rest, name
    # The plain detector goes on from states the compiled one saved, to the same numbers.
    crossed = _in_plain_python({name: ours[name]["state"] for name, *_ in _series()})
    for name, *_ in _series():
        assert crossed[name]["rest"] == ours[name]["rest"], name


def _fake_build(tmp_path: Path) -> Path:
    modules = tmp_path / "lib" / "app" / "compute" / "detect"
    modules.mkdir(parents=True)
    stamp = fingerprint()
    for name in COMPILED:
        (modules / f"{name}{stamp['extension']}").write_bytes(b"")
    (tmp_path / STAMP).write_text(json.dumps(stamp))
    return modules


def test_a_build_of_the_current_sources_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PURE_VARIABLE, raising=False)
    assert compiled_dir(tmp_path) is None  # nothing built
    modules = _fake_build(tmp_path)
    assert compiled_dir(tmp_path) == modules
    monkeypatch.setenv(PURE_VARIABLE, "1")
    assert compiled_dir(tmp_path) is None
    assert current_build(tmp_path) == modules  # still current: make does not rebuild it


@pytest.mark.parametrize("damage", ["source changed", "another interpreter", "module missing", "stamp unreadable"])
def test_a_build_that_is_not_of_the_current_sources_is_not_used(tmp_path: Path, damage: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PURE_VARIABLE, raising=False)
    modules = _fake_build(tmp_path)
    stamp = json.loads((tmp_path / STAMP).read_text())
    if damage == "source changed":
        stamp["app/compute/detect/streaming.py"] = "0" * 64
    elif damage == "another interpreter":
        stamp["extension"] = ".cpython-312-x86_64-linux-gnu.so"
    elif damage == "module missing":
        (modules / f"surprises{stamp['extension']}").unlink()
    (tmp_path / STAMP).write_text("{" if damage == "stamp unreadable" else json.dumps(stamp))
    assert compiled_dir(tmp_path) is None


def test_the_stamp_covers_every_compiled_module_and_what_it_reads() -> None:
    names = set(fingerprint())
    assert {f"app/compute/detect/{name}.py" for name in COMPILED} | {"app/compute/detect/state.py",
                                                                     "app/series/frequencies.py"} <= names
    # What the detector's modules import from this project is compiled with them or stamped.
    for name in COMPILED:
        source = (ROOT / "app" / "compute" / "detect" / f"{name}.py").read_text()
        for line in source.splitlines():
            if line.startswith("from app.") and " import " in line:
                module = line.split()[1]
                if module == "app.compute.detect":
                    continue  # "from app.compute.detect import predictors": a compiled module
                assert f"{module.replace('.', '/')}.py" in names, (name, module)
