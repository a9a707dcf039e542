"""bench/kpi.py's harness: the README's protocol (a week of train as history, every test row judged once), a
reference that never looks ahead, and figures that are kpi_score.py's own."""

from __future__ import annotations

import importlib.util
import math
import random
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd
import pytest

from tests.support import ROOT

KPI_DEV = next((parent / "shared" / "data" / "kpi-dev" for parent in ROOT.parents
                if (parent / "shared" / "data" / "kpi-dev").is_dir()),
               ROOT.parent / "shared" / "data" / "kpi-dev")


def bench_kpi() -> ModuleType:
    """bench/kpi.py is a script beside bench/common.py, not a package module."""
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("bench_kpi", ROOT / "bench" / "kpi.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def needs_data() -> None:
    if not KPI_DEV.is_dir():
        pytest.skip(f"KPI development data not found at {KPI_DEV}")


def test_reference_z_score_judges_each_row_from_the_rows_before_it() -> None:
    kpi = bench_kpi()
    rng = random.Random(5)
    step = 300.0
    times = np.arange(3 * 2016) * step
    values = np.array([100 + 20 * math.sin(2 * math.pi * i / 288) + rng.gauss(0, 2) for i in range(len(times))])
    scores, flags = kpi.zscore_scores(times, values, step)
    cut = 2 * 2016 + 100
    changed = values.copy()
    changed[cut:] += 500.0
    later_scores, later_flags = kpi.zscore_scores(times, changed, step)
    assert np.array_equal(scores[:cut], later_scores[:cut])
    assert np.array_equal(flags[:cut], later_flags[:cut])
    assert later_flags[cut] and later_scores[cut] > scores[cut]


def test_history_is_the_last_week_of_train_and_every_test_row_follows() -> None:
    needs_data()
    kpi = bench_kpi()
    for kid in ("e0747cad", "54350a12"):
        times, _, history = kpi.load_kpi(kid)
        test = pd.read_csv(KPI_DEV / "test" / f"{kid}.csv.gz")
        train = pd.read_csv(KPI_DEV / "train" / f"{kid}.csv.gz")
        assert history > 0
        assert times[history - 1] == train["timestamp"].iloc[-1] < times[history]
        assert times[history - 1] - times[0] < 7 * 86400
        assert np.array_equal(times[history:], test["timestamp"].to_numpy(np.float64))


def test_figures_are_kpi_scores_own_on_the_five_minute_kpis(tmp_path: Path) -> None:
    needs_data()
    kpi = bench_kpi()
    kids = kpi.kpi_ids(quick=True)
    assert len(kids) == 4
    for kid in kids:
        kpi._stream((kid, "zscore", {}, str(tmp_path)))
    _, mine = kpi.score_method(kids, tmp_path / "zscore")
    official = kpi.score_dir(tmp_path / "zscore")
    assert official["kpis"] == 4 and official["segments"] == mine["segments"]
    assert round(mine["caught_share"], 4) == official["segments_caught"]
    assert round(mine["alarms_per_week"], 3) == official["false_alarms_per_week"]
    assert round(mine["pa_f1"], 4) == official["pa_f1"]
    assert round(mine["best_f1"], 4) == official["best_threshold_f1"]
    for rate in kpi.RATES:
        assert round(mine[f"caught_at_{rate}"], 4) == official[f"caught_at_{rate}_per_week"]


def test_signal_names_are_the_detectors_codes() -> None:
    from app.compute.detect import state

    kpi = bench_kpi()
    codes = {name.lower(): getattr(state, name) for name in ("POINT", "SHIFT", "SPREAD", "DENSITY", "LEVEL", "FROZEN")}
    assert {code: name for name, code in codes.items()} == {k: v for k, v in kpi.SIGNALS.items() if k}


def test_alarms_are_credited_to_the_signal_that_raised_them(tmp_path: Path) -> None:
    """A segment caught goes to its first flagged point within the delay, a false run to its first point, and the
    counts add up to the scorer's caught segments and false-alarm runs."""
    needs_data()
    kpi = bench_kpi()
    kid = "e0747cad"
    data = pd.read_csv(KPI_DEV / "test" / f"{kid}.csv.gz")
    label = data["label"].to_numpy(np.int8)
    starts = np.flatnonzero(np.diff(np.r_[0, label]) == 1)
    flags = np.zeros(len(data), dtype=np.int8)
    signal = np.zeros(len(data), dtype=np.int8)
    flags[starts[0] + 1 : starts[0] + 3] = 1  # caught one point late: the first flagged point's signal counts
    signal[starts[0] + 1], signal[starts[0] + 2] = 5, 1
    quiet = int(np.flatnonzero(label == 0)[500])
    assert not label[quiet : quiet + 3].any()
    flags[quiet : quiet + 3] = 1  # one false-alarm run of three points
    signal[quiet : quiet + 3] = (2, 1, 1)
    (tmp_path / "p").mkdir()
    pd.DataFrame({"timestamp": data["timestamp"], "is_anomaly": flags, "anomaly_score": flags.astype(float),
                  "signal": signal}).to_csv(tmp_path / "p" / f"{kid}.csv", index=False)
    assert kpi.by_signal([kid], tmp_path / "p") == {"level": (1, 0), "shift": (0, 1)}
    _, total = kpi.score_method([kid], tmp_path / "p", with_ranking=False)
    assert (total["caught"], total["runs"]) == (1, 1)
