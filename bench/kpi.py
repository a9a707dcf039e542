"""Anomaly detection on the KPI development set, as an operator meets it: incidents caught at the alarm budget.

    python bench/kpi.py [--quick] [--settings JSON] [--base COMMIT[,COMMIT]] [--budgets 3,10]

Every KPI of the sibling ../shared/data/kpi-dev (14 labelled web-service KPIs, its README) is streamed through
anomaly-model-1 (app.compute.detect.streaming.StreamingDetector, in-process, the compiled build where it is current)
at its defaults, data_frequency "Minutes" as POST /anomalies gets it for minute data: the last 7 days of the
KPI's ``train`` part first as history (judged, not scored), then its ``test`` part, each row judged from the rows
before it (one update call over history + test is the same as streaming them). Two processes over the KPIs.

Beside it, in the same run, a reference: a causal seasonal-naive residual z-score (``zscore_scores``): the value
minus the last value at least a day earlier, centred and scaled by the median and interquartile range of the
previous day of residuals (past rows only); it flags a |z| beyond every |z| of the week before (a week's record).

Both write PRED_DIR/<kpi>.csv (timestamp,is_anomaly,anomaly_score) for the test rows and are scored by
../shared/tools/kpi_score.py, run as a subprocess exactly as the README runs it (the pooled figures), and per KPI
with its own functions (judge, prf, grid) imported: segments caught within their first 8 points, false-alarm runs
per KPI-week, point-adjusted F1 (delay 7), best-threshold F1 and the share caught at 1 and 5 false alarms a week.

--quick: the four five-minute KPIs only. --settings: the detector's constructor keywords as a JSON object (or a
path to a JSON file), e.g. '{"top_rank": 12, "joint": false}', for a point of the leave-one-category-out grid
(bench/anomaly.py scores the KPIs as its sixth category with ``detector_figures``). --base: the detector of
each commit at its defaults (a git worktree, compiled where it has a build step) in the same run, scored the same
way, so a detector change is read beside the code before it on the same machine and load. --budgets: the detector
also at those false_alarms_per_week (at its own threshold only), so what a larger budget buys is read in the same
run. The report also says which signal (app.compute.detect.state's codes) caught each segment and started each
false-alarm run, and every alarm a KPI-week (caught segments and false runs together: what the budget spends).
Writes bench/results/kpi.md (with --settings or --quick: prints only, unless --out is given) and prints it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from types import ModuleType

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c  # noqa: E402

# The shared data sit beside the checkout: /work/shared for /work/main, and for a worktree one level further up.
SHARED = next((parent / "shared" for parent in Path(__file__).resolve().parents[1:]
               if (parent / "shared" / "data" / "kpi-dev").is_dir()), Path(__file__).resolve().parents[2] / "shared")
KPI_ROOT = SHARED / "data" / "kpi-dev"
KPI_SCORE = SHARED / "tools" / "kpi_score.py"
HISTORY_SECONDS = 7 * 86400  # the README: the last 7 days of train may go first, not scored
DAY_SECONDS = 86400
WEEK_SECONDS = 7 * DAY_SECONDS
DATA_FREQUENCY = "Minutes"  # one- and five-minute KPIs alike: what a client sends for minute data
METHODS = {"detector": "anomaly-model-1 at its defaults (is_anomaly; anomaly_score for the ranking columns)",
           "zscore": "reference: causal seasonal-naive residual z-score"}
RATES = (1, 5)  # false alarms a week at which the ranking is read (the scorer's caught_at_N_per_week)
# app.compute.detect.state's signal codes (Verdicts.signal), as the report names them; "other" for any code not here.
SIGNALS = {1: "point", 2: "shift", 3: "spread", 4: "density", 5: "level", 6: "frozen", 0: "other"}
POOL = 2  # two cores, shared with other engineers

Figures = dict[str, float]


def available() -> bool:
    return KPI_ROOT.is_dir() and KPI_SCORE.is_file()


def kpi_ids(quick: bool = False) -> list[str]:
    ids = sorted(p.name[: -len(".csv.gz")] for p in (KPI_ROOT / "test").glob("*.csv.gz"))
    return [k for k in ids if step_of(k) >= 300] if quick else ids


def step_of(kid: str) -> int:
    head = pd.read_csv(KPI_ROOT / "test" / f"{kid}.csv.gz", nrows=200)["timestamp"].to_numpy(np.int64)
    return int(pd.Series(np.diff(head)).mode()[0])


def load_kpi(kid: str) -> tuple[np.ndarray, np.ndarray, int]:
    """History (the last 7 days of train) then test: epoch seconds, values, and how many rows are history."""
    train = pd.read_csv(KPI_ROOT / "train" / f"{kid}.csv.gz")
    test = pd.read_csv(KPI_ROOT / "test" / f"{kid}.csv.gz")
    history = train[train["timestamp"] > train["timestamp"].iloc[-1] - HISTORY_SECONDS]
    times = np.concatenate([history["timestamp"].to_numpy(np.float64), test["timestamp"].to_numpy(np.float64)])
    values = np.concatenate([history["value"].to_numpy(np.float64), test["value"].to_numpy(np.float64)])
    return times, values, len(history)


def zscore_scores(times: np.ndarray, values: np.ndarray, step: float) -> tuple[np.ndarray, np.ndarray]:
    """|z| of each row, and whether it is flagged. The residual is the value minus the last value at least a day
    earlier (seasonal naive); it is centred by the median of the previous day of residuals and scaled by their
    interquartile range / 1.349 (a robust sigma), both from rows before this one only. A row is flagged when its
    |z| is beyond every |z| of the week of rows before it: a record over a week's rows is broken about once a
    week by chance, the detector's budget, without assuming z is Gaussian (its tails here are far heavier)."""
    before = np.searchsorted(times, times - DAY_SECONDS, side="right") - 1
    residual = np.where(before >= 0, values - values[np.maximum(before, 0)], np.nan)
    rows = max(int(round(DAY_SECONDS / step)), 12)
    past = pd.Series(residual).rolling(rows, min_periods=rows // 4)
    centre = past.median().shift(1).to_numpy()
    spread = ((past.quantile(0.75) - past.quantile(0.25)) / 1.349).shift(1).to_numpy()
    least = 1e-9 + 1e-6 * np.abs(values[np.maximum(before, 0)])  # a flat stretch must not divide by zero
    z = np.abs(residual - centre) / np.maximum(np.nan_to_num(spread, nan=0.0), least)
    z = np.where(np.isfinite(z), np.minimum(z, 1e12), 0.0)
    week = 7 * rows
    record = pd.Series(z).rolling(week, min_periods=week // 2).max().shift(1).to_numpy()
    return z, np.nan_to_num(z > record, nan=False).astype(bool) & np.isfinite(record)


# ---------------------------------------------------------------------------------------------- streaming

_STREAMING: ModuleType | None = None
_COMPILED = False


def _init_worker(app_root: str) -> None:
    """Each worker imports the detector of the code being benchmarked (the snapshot), compiled where current."""
    global _STREAMING, _COMPILED
    if app_root not in sys.path:
        sys.path.insert(0, app_root)
    import app.compute.detect.streaming as streaming
    from app.compute.detect import native

    _STREAMING, _COMPILED = streaming, native.active()


def _stream(task: tuple[str, str, dict, str]) -> tuple[str, str, float, bool, int]:
    """One KPI through one method; writes out_dir/<method>/<kpi>.csv for the test rows. Returns the seconds the
    method itself took (CPU of this process), whether the detector ran compiled, and the rows judged."""
    kid, method, settings, out_dir = task
    times, values, history = load_kpi(kid)
    started = time.process_time()
    columns: dict[str, np.ndarray] = {}
    if method == "detector":
        assert _STREAMING is not None
        detector = _STREAMING.StreamingDetector(data_frequency=DATA_FREQUENCY, **settings)
        verdicts = detector.update(detector.initial_state(), times.tolist(), values.tolist())
        flags = np.asarray(verdicts.is_anomaly, dtype=bool)
        scores = np.asarray(verdicts.score, dtype=np.float64)
        if hasattr(verdicts, "signal"):  # which signal flagged a row (a --base detector may predate it)
            columns["signal"] = np.asarray(verdicts.signal, dtype=np.int8)[history:]
    else:
        step = float(pd.Series(np.diff(times)).mode()[0])
        scores, flags = zscore_scores(times, values, step)
    seconds = time.process_time() - started
    target = Path(out_dir) / method / f"{kid}.csv"
    target.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"timestamp": times[history:].astype(np.int64), "is_anomaly": flags[history:].astype(np.int8),
                  "anomaly_score": scores[history:], **columns}).to_csv(target, index=False, float_format="%.17g")
    return kid, method, seconds, _COMPILED, len(times)


def stream_all(app_root: Path, kids: list[str], methods: list[str], settings: dict,
               out_dir: Path) -> tuple[dict[tuple[str, str], float], bool, float, int]:
    """Every KPI through every method, two processes, largest first. Returns each (kpi, method)'s CPU seconds,
    whether the detector ran compiled in every worker, the wall seconds and the rows judged per method."""
    sizes = {k: (KPI_ROOT / "test" / f"{k}.csv.gz").stat().st_size for k in kids}
    tasks = [(k, m, settings, str(out_dir)) for k in sorted(kids, key=lambda k: -sizes[k]) for m in methods]
    seconds: dict[tuple[str, str], float] = {}
    compiled, rows = True, 0
    started = time.perf_counter()
    # fork: the workers inherit sys.path and start at once.
    with ProcessPoolExecutor(POOL, mp_context=multiprocessing.get_context("fork"), initializer=_init_worker,
                             initargs=(str(app_root),)) as pool:
        for kid, method, spent, was_compiled, judged in pool.map(_stream, tasks):
            seconds[(kid, method)] = spent
            if method == "detector":
                compiled = compiled and was_compiled
                rows += judged
    return seconds, compiled, time.perf_counter() - started, rows


# ---------------------------------------------------------------------------------------------- scoring

_SCORER: ModuleType | None = None


def scorer() -> ModuleType:
    """kpi_score.py imported as a module (it is a script), so its arithmetic is reused, not copied."""
    global _SCORER
    if _SCORER is None:
        spec = importlib.util.spec_from_file_location("kpi_score", KPI_SCORE)
        assert spec is not None and spec.loader is not None
        _SCORER = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_SCORER)
    return _SCORER


def score_dir(pred_dir: Path) -> dict:
    """kpi_score.py as a subprocess, exactly as the README runs it: the pooled figures (its last line, JSON)."""
    result = subprocess.run([c.PYTHON, str(KPI_SCORE), str(KPI_ROOT), str(pred_dir)], capture_output=True,
                            text=True, check=True, timeout=1200)
    return json.loads(result.stdout.strip().splitlines()[-1])


def on_grid(kid: str, pred_dir: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """A KPI's label, flags and scores on its regular grid, and its weeks, as kpi_score.py builds them."""
    s = scorer()
    data = pd.read_csv(KPI_ROOT / "test" / f"{kid}.csv.gz")
    merged = data.merge(pd.read_csv(pred_dir / f"{kid}.csv"), on="timestamp", how="left")
    ts = data["timestamp"].to_numpy(np.int64)
    interval = int(pd.Series(np.diff(ts)).mode()[0])
    label, flag = s.grid(ts, interval, data["label"].to_numpy(np.int8),
                         merged["is_anomaly"].fillna(False).astype(bool).to_numpy(), fill=0)
    (score,) = s.grid(ts, interval, merged["anomaly_score"].fillna(-np.inf).to_numpy(float), fill=-np.inf)
    return label, flag.astype(bool), score, (ts[-1] - ts[0]) / WEEK_SECONDS


def at_threshold(label: np.ndarray, flag: np.ndarray, weeks: float) -> Figures:
    s = scorer()
    adjusted, segments, caught, runs = s.judge(flag, label)
    tp, fp, fn, *_ = s.prf(adjusted, label)
    return {"tp": tp, "fp": fp, "fn": fn, "segments": segments, "caught": caught, "runs": runs, "weeks": weeks}


def ranking(kpis: list[tuple[np.ndarray, np.ndarray, float]]) -> Figures:
    """Best single-threshold F1 and the share caught at RATES false alarms a week over ``kpis`` (label, score,
    weeks): the scorer's own loop (its main is not factored into a function), for one KPI or pooled."""
    s = scorer()
    finite = np.concatenate([score[np.isfinite(score)] for _, score, _ in kpis])
    weeks = sum(w for *_, w in kpis)
    best, curve = 0.0, []
    for t in np.unique(np.quantile(finite, 1 - np.logspace(-1, -6, 200))):
        agg = dict(tp=0, fp=0, fn=0, caught=0, segments=0, runs=0)
        for label, score, _ in kpis:
            adjusted, n, caught, runs = s.judge(score >= t, label)
            tp, fp, fn, *_ = s.prf(adjusted, label)
            for k, v in dict(tp=tp, fp=fp, fn=fn, caught=caught, segments=n, runs=runs).items():
                agg[k] += v
        p = agg["tp"] / (agg["tp"] + agg["fp"]) if agg["tp"] + agg["fp"] else 0.0
        r = agg["tp"] / (agg["tp"] + agg["fn"]) if agg["tp"] + agg["fn"] else 0.0
        best = max(best, 2 * p * r / (p + r) if p + r else 0.0)
        curve.append((agg["runs"] / weeks, agg["caught"] / max(agg["segments"], 1)))
    out = {"best_f1": best}
    for rate in RATES:
        out[f"caught_at_{rate}"] = max((share for alarms, share in curve if alarms <= rate), default=0.0)
    return out


def pooled(parts: list[Figures]) -> Figures:
    total = {k: sum(p[k] for p in parts) for k in ("tp", "fp", "fn", "segments", "caught", "runs", "weeks")}
    return total


def derived(f: Figures) -> Figures:
    p = f["tp"] / (f["tp"] + f["fp"]) if f["tp"] + f["fp"] else 0.0
    r = f["tp"] / (f["tp"] + f["fn"]) if f["tp"] + f["fn"] else 0.0
    return {**f, "pa_f1": 2 * p * r / (p + r) if p + r else 0.0, "caught_share": f["caught"] / max(f["segments"], 1),
            "alarms_per_week": f["runs"] / f["weeks"]}


def score_method(kids: list[str], pred_dir: Path, with_ranking: bool = True) -> tuple[dict[str, Figures], Figures]:
    """Per KPI (its own figures; ranking with its own thresholds) and pooled over ``kids``."""
    per: dict[str, Figures] = {}
    grids = []
    for kid in kids:
        label, flag, score, weeks = on_grid(kid, pred_dir)
        per[kid] = derived(at_threshold(label, flag, weeks))
        if with_ranking:
            per[kid].update(ranking([(label, score, weeks)]))
        grids.append((label, score, weeks))
    total = derived(pooled(list(per.values())))
    if with_ranking:
        total.update(ranking(grids))
    return per, total


def by_signal(kids: list[str], pred_dir: Path) -> dict[str, tuple[int, int]]:
    """Which signal raised the detector's alarms, pooled over ``kids``: {signal: (segments it caught, false-alarm
    runs it started)}. A caught segment goes to the signal of its first flagged point within the scorer's delay, a
    false-alarm run (the scorer's: flagged points outside every segment) to the signal of its first point."""
    s = scorer()
    counts = {name: [0, 0] for name in SIGNALS.values()}
    for kid in kids:
        data = pd.read_csv(KPI_ROOT / "test" / f"{kid}.csv.gz")
        merged = data.merge(pd.read_csv(pred_dir / f"{kid}.csv"), on="timestamp", how="left")
        if "signal" not in merged:
            return {}
        ts = data["timestamp"].to_numpy(np.int64)
        interval = int(pd.Series(np.diff(ts)).mode()[0])
        label, flag, signal = s.grid(ts, interval, data["label"].to_numpy(np.int8),
                                     merged["is_anomaly"].fillna(False).astype(bool).to_numpy(),
                                     merged["signal"].fillna(0).astype(np.int8).to_numpy(), fill=0)
        flag = flag.astype(bool)
        for start, end in zip(*s.segments(label), strict=True):
            hits = np.flatnonzero(flag[start:min(start + s.DELAY + 1, end)])
            if len(hits):
                counts[SIGNALS.get(int(signal[start + hits[0]]), "other")][0] += 1
        outside = flag & (label == 0)
        for start in np.flatnonzero(outside & ~np.r_[False, outside[:-1]]):
            counts[SIGNALS.get(int(signal[start]), "other")][1] += 1
    return {name: (caught, runs) for name, (caught, runs) in counts.items() if caught or runs}


def detector_figures(app_root: Path, settings: dict) -> tuple[Figures, float]:
    """The detector with ``settings`` on every KPI, scored at its own threshold (is_anomaly) only: pooled segments,
    caught, false-alarm runs and weeks (with caught_share and alarms_per_week), and the wall seconds. For the
    leave-one-category-out grid of bench/anomaly.py."""
    kids = kpi_ids()
    with c.temp_dir("bench-kpi-") as tmp:
        _, _, wall, _ = stream_all(app_root, kids, ["detector"], settings, tmp)
        _, total = score_method(kids, tmp / "detector", with_ranking=False)
    return total, wall


# ---------------------------------------------------------------------------------------------- report

COLUMNS = ["caught (8 pts)", "false alarms/wk", "PA-F1", "best-threshold F1", "caught at 1/wk", "caught at 5/wk"]


def _cells(f: Figures) -> list[str]:
    return [f"{f['caught_share']:.1%} ({int(f['caught'])}/{int(f['segments'])})", f"{f['alarms_per_week']:.2f}",
            f"{f['pa_f1']:.3f}", f"{f['best_f1']:.3f}", f"{f['caught_at_1']:.1%}", f"{f['caught_at_5']:.1%}"]


def _table(header: list[str], rows: list[list[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(v) for v in row) + " |" for row in rows]


def alarms_per_week(f: Figures) -> float:
    """Every alarm a KPI-week: the segments caught and the false-alarm runs (what a budget spends)."""
    return (f["caught"] + f["runs"]) / f["weeks"]


def report(kids: list[str], results: dict[str, tuple[dict[str, Figures], Figures, dict]], settings: dict,
           timing: list[str], quick: bool, load_start: tuple[float, ...], bases: dict[str, Figures],
           signals: dict[str, tuple[int, int]] | None = None, budgets: dict[float, Figures] | None = None) -> str:
    det_per, det, det_official = results["detector"]
    ref_per, ref, ref_official = results["zscore"]
    what = "at its defaults" if not settings else f"with {json.dumps(settings, sort_keys=True)}"
    summary = [
        f"anomaly-model-1 {what}, at its own threshold: **{det['caught_share']:.1%}** of {int(det['segments'])} "
        f"labelled segments caught within 8 points at **{det['alarms_per_week']:.2f}** false alarms per KPI-week "
        f"(PA-F1 {det['pa_f1']:.3f}); ranking by anomaly_score: best-threshold F1 {det['best_f1']:.3f}, "
        f"caught {det['caught_at_1']:.1%} at 1 false alarm a week, {det['caught_at_5']:.1%} at 5; every alarm "
        f"(segments caught and false-alarm runs): {alarms_per_week(det):.2f} per KPI-week, against "
        f"{det['segments'] / det['weeks']:.2f} labelled segments a KPI-week",
        *(f"anomaly-model-1 at false_alarms_per_week={budget:g}, same run: {f['caught_share']:.1%} caught at "
          f"{f['alarms_per_week']:.2f} false alarms per KPI-week (PA-F1 {f['pa_f1']:.3f}; every alarm "
          f"{alarms_per_week(f):.2f} a KPI-week)" for budget, f in (budgets or {}).items()),
        f"reference (seasonal-naive residual z-score), same run: {ref['caught_share']:.1%} caught at "
        f"{ref['alarms_per_week']:.2f} false alarms per KPI-week (PA-F1 {ref['pa_f1']:.3f}); ranking: best-threshold "
        f"F1 {ref['best_f1']:.3f}, caught {ref['caught_at_1']:.1%} at 1 a week, {ref['caught_at_5']:.1%} at 5",
        *(f"the detector of {commit} at its defaults, same run: {f['caught_share']:.1%} caught at "
          f"{f['alarms_per_week']:.2f} false alarms per KPI-week (PA-F1 {f['pa_f1']:.3f}); caught "
          f"{f['caught_at_1']:.1%} at 1 a week, {f['caught_at_5']:.1%} at 5" for commit, f in bases.items()),
    ]
    checks = []
    for name, mine, official in (("detector", det, det_official), ("reference", ref, ref_official)):
        pairs = [("caught_share", "segments_caught"), ("pa_f1", "pa_f1"), ("best_f1", "best_threshold_f1"),
                 *((f"caught_at_{r}", f"caught_at_{r}_per_week") for r in RATES)]
        same = all(round(mine[a], 4) == official.get(b) for a, b in pairs) and \
            round(mine["alarms_per_week"], 3) == official["false_alarms_per_week"]
        checks.append(f"{name}: {'the same' if same else 'NOT the same: ' + json.dumps(official)}")
    notes = [
        f"data: {len(kids)} KPIs of the KPI development set" + (" (--quick: the five-minute KPIs only)" if quick
                                                                 else "")
        + f", {int(det['weeks']):d} KPI-weeks of test rows; each KPI's last 7 days of train streamed first as "
        "history (judged, not scored), then its test part, each row judged from the rows before it",
        "detector: app.compute.detect.streaming.StreamingDetector("
        + ", ".join([f"data_frequency={DATA_FREQUENCY!r}", *(f"{k}={v!r}" for k, v in sorted(settings.items()))])
        + "), in-process, one update call over history + test (the same verdicts as streaming them row by row)",
        "reference: residual = value minus the last value at least a day earlier; z = (residual - median) / "
        "(IQR / 1.349) of the previous day of residuals (past rows only); flagged when |z| is beyond every |z| of "
        "the previous week of rows (a week's record, broken about once a week by chance: the detector's budget, "
        "without reading z as Gaussian); anomaly_score = |z|",
        "scored by ../shared/tools/kpi_score.py: segments caught within their first 8 grid points; false alarms = "
        "runs of flagged points outside every segment, per KPI-week; PA-F1 with delay 7; with scores, one threshold "
        "chosen on the labels (best-threshold F1: an upper bound) and the share caught at the threshold whose "
        "false-alarm rate is at most 1 and 5 a week. Pooled rows: the scorer's arithmetic over all KPIs "
        "(checked below against its own output); per-KPI rows: the same functions on one KPI (its ranking "
        "columns with a threshold of its own)",
        "cross-check, pooled figures computed here against kpi_score.py run as a subprocess: " + "; ".join(checks),
        *timing,
    ]
    lines = [f"# KPI development set: incidents caught at the alarm budget{' (quick)' if quick else ''}", "",
             f"{c.machine_line()}; {c.CODE_LINE}; load average (1/5 min) when the suite started: "
             f"{load_start[0]:.2f}/{load_start[1]:.2f}", ""]
    lines += [f"- {s}" for s in summary] + ["", "## Pooled over the KPIs", ""] + [f"- {n}" for n in notes] + [""]
    label = METHODS["detector"] if not settings else f"anomaly-model-1 {what} (is_anomaly; anomaly_score)"
    lines += _table(["", *COLUMNS], [[label, *_cells(det)], [METHODS["zscore"], *_cells(ref)],
                                     *([f"anomaly-model-1 of {commit} at its defaults", *_cells(f)]
                                       for commit, f in bases.items())])
    if signals:
        weeks = det["weeks"]
        lines += ["", "## Which signal raised the alarms (anomaly-model-1, at its own threshold)", "",
                  "- a caught segment counts for the signal of its first flagged point within the scorer's 8 points, "
                  "a false-alarm run for the signal of its first point (app.compute.detect.state's signals: the "
                  "row's own error, the window signals, a value that stopped moving)", ""]
        lines += _table(["signal", "segments caught", "false-alarm runs", "false alarms/wk"],
                        [[name, caught, runs, f"{runs / weeks:.2f}"] for name, (caught, runs) in signals.items()])
    if budgets:
        lines += ["", "## Other alarm budgets (anomaly-model-1, at its own threshold)", "",
                  "- the detector with false_alarms_per_week set, same run, same scoring; every alarm = segments "
                  "caught + false-alarm runs, per KPI-week", ""]
        lines += _table(["false_alarms_per_week", "caught (8 pts)", "false alarms/wk", "PA-F1", "every alarm/wk"],
                        [[budget, f"{f['caught_share']:.1%} ({int(f['caught'])}/{int(f['segments'])})",
                          f"{f['alarms_per_week']:.2f}", f"{f['pa_f1']:.3f}", f"{alarms_per_week(f):.2f}"]
                         for budget, f in [("default (1)" if not settings else "as set", det),
                                           *((f"{b:g}", f) for b, f in budgets.items())]])
    for title, per in (("anomaly-model-1", det_per), ("Reference: seasonal-naive residual z-score", ref_per)):
        lines += ["", f"## Per KPI: {title}", ""]
        lines += _table(["kpi", "step", "weeks", *COLUMNS],
                        [[kid, f"{step_of(kid) // 60} min", f"{per[kid]['weeks']:.1f}", *_cells(per[kid])]
                         for kid in kids])
    return "\n".join(lines) + "\n"


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=c.ROOT, capture_output=True, text=True, timeout=60).stdout.strip()


def detector_sources() -> str:
    """Whether the detector's sources were as committed when the snapshot was taken: the code line's "uncommitted
    changes" covers every service file, and the detector is what these figures are of."""
    changed = [line[3:].rsplit("/", 1)[-1] for line in git("status", "--porcelain", "--", "app/compute/detect")
               .splitlines() if line.strip()]
    return ("detector sources (app/compute/detect) as committed" if not changed else
            f"detector sources (app/compute/detect) with uncommitted changes to {', '.join(sorted(changed))}")


def parse_settings(text: str | None) -> dict:
    if not text:
        return {}
    source = Path(text).read_text() if not text.lstrip().startswith("{") and Path(text).is_file() else text
    settings = json.loads(source)
    if not isinstance(settings, dict) or "data_frequency" in settings:
        raise SystemExit("--settings: a JSON object of StreamingDetector keywords (data_frequency is fixed)")
    return settings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the four five-minute KPIs only")
    parser.add_argument("--settings", help="StreamingDetector keywords: a JSON object, or a file holding one")
    parser.add_argument("--out", help="where to write the report (default: bench/results/kpi.md for a full run "
                                      "at the defaults; otherwise printed only)")
    parser.add_argument("--base", default="", help="commits whose detector runs beside, at its defaults")
    parser.add_argument("--budgets", default="", help="false_alarms_per_week values the detector also runs at, "
                                                      "e.g. 3,10 (scored at its own threshold)")
    args = parser.parse_args()
    settings = parse_settings(args.settings)
    if not available():
        print(f"skipping kpi: {KPI_ROOT} or {KPI_SCORE} is absent", file=sys.stderr)
        return 0
    load_start = os.getloadavg()
    kids = kpi_ids(args.quick)
    timing_bases: list[str] = []
    # Resolved now: HEAD moves while the working tree runs when others commit in this checkout.
    base_commits = [git("rev-parse", "--short", name) or name for name in filter(None, args.base.split(","))]
    results: dict[str, tuple[dict[str, Figures], Figures, dict]] = {}
    with c.code_snapshot() as code_line, c.temp_dir("bench-kpi-") as tmp:
        c.CODE_LINE = f"{code_line}; {detector_sources()}"
        try:
            seconds, compiled, wall, rows = stream_all(c.APP_ROOT, kids, list(METHODS), settings, tmp)
        except TypeError as exc:  # a keyword the detector does not take: say so, not a worker's traceback
            if not settings:
                raise
            raise SystemExit(f"--settings: {exc}") from None
        scoring = time.perf_counter()
        for method in METHODS:
            per, total = score_method(kids, tmp / method)
            results[method] = (per, total, score_dir(tmp / method))
        scoring = time.perf_counter() - scoring
        signals = by_signal(kids, tmp / "detector")
        budgets: dict[float, Figures] = {}
        for budget in (float(b) for b in filter(None, args.budgets.split(","))):
            where = tmp / f"budget-{budget:g}"
            _, _, budget_wall, _ = stream_all(c.APP_ROOT, kids, ["detector"],
                                              {**settings, "false_alarms_per_week": budget}, where)
            budgets[budget] = score_method(kids, where / "detector", with_ranking=False)[1]
            timing_bases.append(f"false_alarms_per_week={budget:g}: streaming {budget_wall:.1f} s wall")
        bases: dict[str, Figures] = {}
        for commit in base_commits:
            with c.git_worktree(commit, prefix="bench-kpi-base-") as tree:
                _, base_compiled, base_wall, _ = stream_all(tree, kids, ["detector"], {}, tmp / f"base-{commit}")
            bases[commit] = score_method(kids, tmp / f"base-{commit}" / "detector")[1]
            timing_bases.append(f"{commit}: streaming {base_wall:.1f} s wall"
                                f"{'' if base_compiled else ' (as plain Python)'}")
    detector_cpu = sum(v for (_, m), v in seconds.items() if m == "detector")
    reference_cpu = sum(v for (_, m), v in seconds.items() if m == "zscore")
    how = "compiled (mypyc)" if compiled else "as plain Python (no compiled build of these sources)"
    timing = [f"time: streaming {wall:.1f} s wall ({POOL} processes; the detector {how}: {detector_cpu:.1f} s CPU "
              f"for {rows:,} rows, {detector_cpu / max(rows, 1) * 1e6:.0f} us a row; the reference "
              f"{reference_cpu:.1f} s CPU), scoring {scoring:.1f} s" + "".join(f"; {t}" for t in timing_bases)]
    text = report(kids, results, settings, timing, args.quick, load_start, bases, signals, budgets)
    out = Path(args.out) if args.out else (c.RESULTS / "kpi.md" if not (args.quick or settings) else None)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
