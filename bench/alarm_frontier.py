"""What catching more of the KPIs' incidents costs elsewhere: the detector's calibration moved step by step.

    python bench/alarm_frontier.py [--quick]

The default detector (anomaly-model-1) reads how rare a row's error is from the stream's own record of its
surprises (app.compute.detect.surprises), so a surprise the stream shows several times a week is, by that record,
no alarm. On a stream whose incidents are that frequent (the KPI development set has about five labelled segments
a KPI-week) the record learns the incidents as normal. This suite moves the calibration away from the record, one
step at a time, and reads each step on every development set in the same run:

- the alarm budget a user sets (``false_alarms_per_week``: 1, the default, and 3);
- RECORD_CAP (app.compute.detect.state): how far beyond its range a flagged row's news enters the record (2.0
  ships; 1.0 records an alarm at the range's edge, so past alarms barely widen it);
- PRIOR_ROWS (app.compute.detect.surprises): what the window's fitted Pareto tail is worth against the record, in
  rows (1,200 ships; the record holds up to 20,160); at 10^12 the record is ignored and only the fitted tail of
  the last WINDOW_ROWS errors speaks.

Per step: the KPIs (segments caught within 8 points and false-alarm runs per KPI-week at the detector's own
threshold, every alarm a KPI-week, best-threshold F1 and the share caught at 1 and 5 false alarms a week,
bench/kpi.py's scoring), NAB's development categories (standard profile at the detector's own threshold,
bench/anomaly.py's scoring; false alarms on artificialNoAnomaly) and the synthetic anomaly-free streams of
bench/synthetic.py (false alarms per stream-week per noise kind, seeds SEEDS).

The module constants are patched in worker processes that run the detector's sources (FORECAST_PURE_DETECTOR=1):
the compiled build reads its constants at build time. Writes bench/results/alarm-frontier.md and prints it
(--quick: prints only).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

os.environ["FORECAST_PURE_DETECTOR"] = "1"  # before anything imports the detector: patched constants must be read
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import anomaly  # noqa: E402
import common as c  # noqa: E402
import kpi  # noqa: E402
import synthetic  # noqa: E402

SEEDS = (1, 2, 3)
# name -> (constructor keywords, module constants patched)
STEPS: dict[str, tuple[dict, dict[str, float]]] = {
    "shipped": ({}, {}),
    "false_alarms_per_week=3": ({"false_alarms_per_week": 3.0}, {}),
    "RECORD_CAP=1.25": ({}, {"RECORD_CAP": 1.25}),
    "RECORD_CAP=1.0": ({}, {"RECORD_CAP": 1.0}),
    "PRIOR_ROWS=50,000": ({}, {"PRIOR_ROWS": 50_000.0}),
    "PRIOR_ROWS=200,000": ({}, {"PRIOR_ROWS": 200_000.0}),
    "PRIOR_ROWS=10^12 (record ignored)": ({}, {"PRIOR_ROWS": 1e12}),
}
QUICK_STEPS = ("shipped", "PRIOR_ROWS=10^12 (record ignored)")
# Where each constant is read: a name imported with ``from ... import`` is a binding of its own in each module.
PATCH_SITES = {"RECORD_CAP": ("state", "streaming", "windows"), "PRIOR_ROWS": ("surprises",)}

SHIPPED_CONSTANTS: dict[str, float] = {}  # this process's constants as the sources set them
Task = tuple[str, str, object]  # step, what ("kpi", "nab", "synthetic"), which (a KPI id, a NAB index, a stream)


def detector_for(step: str, data_frequency: str):  # noqa: ANN201 - the detector of the sources being run
    """A StreamingDetector of ``step``, its module constants set in this process (every step's constants are set
    afresh, so a worker may run any step after any other)."""
    import importlib

    from app.compute.detect import native

    assert not native.active(), "patched constants need the detector's sources, not its compiled build"
    keywords, constants = STEPS[step]
    for name, sites in PATCH_SITES.items():
        modules = [importlib.import_module(f"app.compute.detect.{module}") for module in sites]
        shipped = SHIPPED_CONSTANTS.setdefault(name, getattr(modules[0], name))  # read before any patch
        for module in modules:
            setattr(module, name, constants.get(name, shipped))
    from app.compute.detect.streaming import StreamingDetector

    return StreamingDetector(data_frequency=data_frequency, **keywords)


def run_task(task: Task) -> tuple[Task, object]:
    step, what, which = task
    if what == "kpi":
        times, values, history = kpi.load_kpi(str(which))
        detector = detector_for(step, kpi.DATA_FREQUENCY)
        verdicts = detector.update(detector.initial_state(), times.tolist(), values.tolist())
        frame = pd.DataFrame({"timestamp": times[history:].astype(np.int64),
                              "is_anomaly": np.asarray(verdicts.is_anomaly, dtype=np.int8)[history:],
                              "anomaly_score": np.asarray(verdicts.score, dtype=np.float64)[history:]})
        return task, frame
    if what == "nab":
        rel, stamps, times, values = NAB[int(str(which))]
        detector = detector_for(step, anomaly.NAB_FREQUENCY[rel.split("/")[0]])
        verdicts = detector.update(detector.initial_state(), times, values)
        return task, (rel, anomaly.file_parts(rel, stamps, [1.0 if a else 0.0 for a in verdicts.is_anomaly]))
    stream = which
    assert isinstance(stream, synthetic.Stream)
    detector = detector_for(step, "Minutes")
    verdicts = detector.update(detector.initial_state(), stream.times, stream.values)
    return task, (stream.kind, synthetic.false_alarms(stream, list(verdicts.is_anomaly)),
                  synthetic.weeks(stream))


NAB = anomaly.load_nab()


def synthetic_streams(quick: bool) -> list[synthetic.Stream]:
    seeds = SEEDS[:1] if quick else SEEDS
    out = []
    for kind_index, kind in enumerate(synthetic.KINDS):
        for step_index, step_name in enumerate(synthetic.STEPS):
            for seed in seeds:
                out.append(synthetic.make_stream(1000 * seed + 10 * kind_index + step_index, kind, step_name, False))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two steps, the five-minute KPIs, one seed")
    args = parser.parse_args()
    if not kpi.available():
        print(f"KPI development data not found at {kpi.KPI_ROOT}", file=sys.stderr)
        return 2
    steps = list(QUICK_STEPS if args.quick else STEPS)
    kids = kpi.kpi_ids(args.quick)
    streams = synthetic_streams(args.quick)
    tasks: list[Task] = [(step, "kpi", kid) for step in steps for kid in kids]
    tasks += [(step, "synthetic", stream) for step in steps for stream in streams]
    tasks += [(step, "nab", index) for step in steps for index in range(len(NAB))]
    started = time.perf_counter()
    kpi_frames: dict[str, dict[str, pd.DataFrame]] = defaultdict(dict)
    nab_parts: dict[str, dict] = defaultdict(dict)
    alarms: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0]))
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as pool:
        for (step, what, which), result in pool.map(run_task, tasks, chunksize=1):
            if what == "kpi":
                kpi_frames[step][str(which)] = result
            elif what == "nab":
                rel, parts = result
                nab_parts[step][rel] = parts
            else:
                kind, count, weeks = result
                alarms[step][kind][0] += count
                alarms[step][kind][1] += weeks
    wall = time.perf_counter() - started
    rows = []
    scored = [cat for cat in anomaly.CATEGORIES if cat != anomaly.NO_WINDOWS]
    for step in steps:
        with c.temp_dir("bench-frontier-") as tmp:
            for kid, frame in kpi_frames[step].items():
                frame.to_csv(tmp / f"{kid}.csv", index=False, float_format="%.17g")
            _, total = kpi.score_method(kids, tmp)
        nab = {cat: anomaly.normalised(nab_parts[step], [cat]) for cat in scored}
        rows.append([
            step, f"{total['caught_share']:.1%}", f"{total['alarms_per_week']:.2f}",
            f"{kpi.alarms_per_week(total):.2f}", f"{total['best_f1']:.3f}",
            f"{total['caught_at_1']:.1%} / {total['caught_at_5']:.1%}",
            " / ".join(f"{nab[cat]:.1f}" for cat in scored), f"{sum(nab.values()) / len(nab):.1f}",
            str(anomaly.false_alarms(nab_parts[step], anomaly.NO_WINDOWS)),
            " / ".join(f"{count / weeks:.2f}" for count, weeks in (alarms[step][k] for k in synthetic.KINDS)),
        ])
    seeds = ", ".join(map(str, SEEDS[:1] if args.quick else SEEDS))
    notes = [
        f"KPIs: {len(kids)} of the development set, a week of train first (bench/kpi.py's protocol and scoring: "
        "segments caught within their first 8 points, false-alarm runs; every alarm = segments caught and "
        "false-alarm runs, a KPI-week)",
        "NAB: the 41 development files, standard profile at the detector's own threshold, per category ("
        + ", ".join(scored) + "); all data at each step (no leave-one-category-out: each step is one detector)",
        f"synthetic: anomaly-free 30-day streams of bench/synthetic.py, seeds {seeds}"
        f", 1- and 5-minute steps pooled; false alarms per stream-week for {', '.join(synthetic.KINDS)}",
        f"the detector's sources (not the compiled build), 2 processes: {wall:.0f} s wall",
    ]
    header = ["step", "KPI caught (8 pts)", "KPI false alarms/wk", "KPI every alarm/wk", "KPI best F1",
              "KPI caught at 1 / 5 a week (ranking)", "NAB " + " / ".join(cat[:9] for cat in scored), "NAB mean",
              "artificialNoAnomaly false alarms", "synthetic false alarms/wk " + " / ".join(synthetic.KINDS)]
    c.CODE_LINE = c.describe_code()
    title = "The alarm budget's frontier: KPI incidents caught against alarms elsewhere"
    if args.quick:  # a smoke run: printed, not written over the full run's results
        table = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        table += ["| " + " | ".join(row) + " |" for row in rows]
        print("\n".join([f"# {title} (--quick)", "", *(f"- {n}" for n in notes), "", *table]))
    else:
        c.write_table("alarm-frontier", title, notes, header, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
