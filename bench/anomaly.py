"""Anomaly detection: NAB quality (end to end and leave-one-category-out) and request latency (make bench).

    python bench/anomaly.py [--quick] [--only nab,loco,reference,speed] [--reference COMMIT[,COMMIT]]

nab        every file of the NAB development set (sibling ../shared/data/nab-dev: 41 labelled files in five
           categories) is sent whole, timestamps as they are (repeated and backward ones included), to
           POST /anomalies through a real gunicorn; its verdicts are causal (row i judged from rows 0..i only,
           exactly as a streaming NAB detector). Two NAB result files per file, scored by
           ../shared/tools/nab_score.py in NAB's three profiles: is_anomaly as 1/0, at the service's own
           threshold (the default settings: one false alarm a week, no confidence sent), and the calibrated
           anomaly_score itself, at the best threshold.
loco       leave-one-category-out, in-process (app.compute.detect.streaming, no server): every constant of GRID
           over two values (one that switches its part off, or the value landed before), each file scored at the
           service's own threshold (is_anomaly); for each category the point is chosen on the other four and
           scored on it. Where ../shared/data/kpi-dev is present, its KPIs are a sixth category, held out only:
           the point chosen on all five NAB categories, scored by bench/kpi.py (segments caught at the detector's
           own threshold, false alarms per KPI-week). Not a training category of the NAB folds: that would
           take the whole grid over the KPIs (each point about ten times the NAB files' rows) and a rule
           weighing a KPI share caught against NAB scores.
reference  the earlier detectors (REFERENCES: the one the alarms issue started from, whose is_anomaly was
           score >= 0.5, and the one landed before this change), each run in-process on the same 41 files in
           this run, from a git worktree of its commit, scored at its own threshold (is_anomaly).
speed      p50/p90 end to end of POST /anomalies and /anomalies/last on 4,000 five-minute points, and of the
           Azure-compatible entire/detect and last/detect on the same series.

Writes bench/results/anomaly.md and prints it.
"""

from __future__ import annotations

import argparse
import calendar
import csv
import importlib.util
import itertools
import json
import math
import multiprocessing
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c  # noqa: E402
import kpi  # noqa: E402
import requests  # noqa: E402

# The shared data sit beside the checkout: /work/shared for /work/main, and for a worktree one level further up.
SHARED = next((parent / "shared" for parent in Path(__file__).resolve().parents[1:]
               if (parent / "shared" / "data" / "nab-dev").is_dir()), Path(__file__).resolve().parents[2] / "shared")
NAB_ROOT = SHARED / "data" / "nab-dev"
NAB_SCORE = SHARED / "tools" / "nab_score.py"
# Nominal spacing of each NAB folder (its README): five-minute synthetic and CloudWatch data, hourly ad
# exchange, traffic sensors every five to ten minutes.
NAB_FREQUENCY = {
    "artificialNoAnomaly": "Minutes",
    "artificialWithAnomaly": "Minutes",
    "realAWSCloudwatch": "Minutes",
    "realAdExchange": "Hours",
    "realTraffic": "Minutes",
}
CATEGORIES = tuple(sorted(NAB_FREQUENCY))
NO_WINDOWS = "artificialNoAnomaly"  # every flag in it is a false alarm; NAB's normalisation is undefined there
PUBLISHED = [  # the NAB dev set README: published detectors' result files scored on these 41 files, best threshold
    ("CAD OSE", 75.9, 72.4, 79.2),
    ("Numenta HTM", 75.5, 70.7, 79.0),
    ("ARTime", 74.6, 66.5, 79.4),
    ("KNN CAD", 58.5, 48.6, 63.5),
    ("Twitter ADVec", 46.6, 36.1, 52.4),
    ("windowed Gaussian", 41.4, 26.5, 48.4),
]
# The earlier detectors measured in the same run: the one before the calibrated score (its is_anomaly was score
# >= 0.5), and the one landed before a habit had to be as rare as the default budget's range.
REFERENCES = {"19f2049": "the detector before the calibrated score (is_anomaly was score >= 0.5)",
              "c0381b4": "the detector before counts were judged on the square-root scale"}
PROFILES = ("standard", "reward_low_FP_rate", "reward_low_FN_rate")
# Result files hold is_anomaly as 1.0/0.0, so NAB's threshold 0.5 reads "is_anomaly": the detector's own
# threshold, whatever it is for the stream's step.
THRESHOLD = 0.5
# The constants StreamingDetector takes, each over a value that switches its part off (or the landed value before)
# and the one it ships with, so the grid also says whether each part helps held-out data: the unit of surprise's
# rank, the rows that end an incident, the short window (0: no shift and spread signals), the long window (0: no
# density and level signals), the level signal, the habit's reach (0: no habits), the run adopted as a new level,
# whether the budget is shared among the signals as many as they behave as (joint) or split among all of them,
# and whether a count is judged on the square-root scale.
GRID: dict[str, tuple[float, ...]] = {
    "top_rank": (12, 24),
    "quiet_rows": (12, 48),
    "short_rows": (0, 6),
    "long_rows": (0, 36),
    "level": (False, True),
    "habit": (0.0, 1 / 12),
    "adopt_rows": (12, 48),
    "joint": (False, True),
    "counts": (False, True),
}
SHIPPED = (24, 48, 6, 36, True, 1 / 12, 12, True, True)
GridPoint = tuple[float, ...]
SPEED_POINTS = 4000
TARGETS_MS = {"/anomalies": 100.0, "/anomalies/last": 50.0}

NabFile = tuple[str, list[str], list[float], list[float]]  # relative path, raw timestamps, epoch seconds, values
Parts = dict[str, tuple[float, int, int]]  # profile -> (raw score at THRESHOLD, windows, false alarms)


def nab_files() -> list[Path]:
    return sorted((NAB_ROOT / "data").glob("*/*.csv"))


def load_nab() -> list[NabFile]:
    """Every file as NAB's scorer reads it: raw timestamp text, and UTC epoch seconds as the service parses
    the naive timestamps (UTC), in file order."""
    files: list[NabFile] = []
    for path in nab_files():
        with path.open() as handle:
            rows = list(csv.reader(handle))[1:]
        stamps = [r[0] for r in rows]
        times = [float(calendar.timegm(datetime.strptime(s, "%Y-%m-%d %H:%M:%S").timetuple())) for s in stamps]
        files.append((f"{path.parent.name}/{path.name}", stamps, times, [float(r[1]) for r in rows]))
    return files


def load_scorer() -> ModuleType:
    """nab_score.py imported as a module (it is a script, not a package), so its arithmetic is reused, not copied."""
    spec = importlib.util.spec_from_file_location("nab_score", NAB_SCORE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def probation_rows(rows: int) -> int:
    return min(math.floor(0.15 * rows), 750)


def write_results(out_dir: Path, rel: str, stamps: list[str], scores: list[float]) -> None:
    out = out_dir / rel
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["timestamp", "anomaly_score"])
        writer.writerows(zip(stamps, (repr(float(s)) for s in scores), strict=True))


def score_dir(results: Path, categories: list[str] | None = None) -> dict:
    """nab_score.py as a subprocess, exactly as the README runs it: the published figures' own arithmetic."""
    command = [c.PYTHON, str(NAB_SCORE), str(NAB_ROOT), str(results)]
    if categories:
        command.append(",".join(categories))
    return json.loads(
        subprocess.run([*command, "--threshold", str(THRESHOLD)], capture_output=True, text=True, check=True,
                       timeout=600).stdout
    )


# ---------------------------------------------------------------------------------------------- per-file parts

_SCORER: ModuleType | None = None
_WINDOWS: dict[str, list[list[str]]] | None = None
_FILES: list[NabFile] = []
_STREAMING: ModuleType | None = None


def scorer() -> ModuleType:
    global _SCORER
    if _SCORER is None:
        _SCORER = load_scorer()
    return _SCORER


def file_parts(rel: str, stamps: list[str], scores: list[float]) -> Parts:
    """A file's share of a corpus score at THRESHOLD in each profile: summing the raw parts and the window counts
    over any set of files and normalising gives what nab_score.py prints for that set."""
    global _WINDOWS
    if _WINDOWS is None:
        _WINDOWS = json.loads((NAB_ROOT / "labels" / "combined_windows.json").read_text())
    windows = [(a.split(".")[0], b.split(".")[0]) for a, b in _WINDOWS[rel]]
    parts: Parts = {}
    for profile in PROFILES:
        tp_w, fp_w, fn_w = scorer().PROFILES[profile]
        points = scorer().sweep_points(rel, stamps, scores, windows, tp_w, fp_w)
        names = sorted({p[2] for p in points if p[2] is not None})
        raw = scorer()._score_at(points, names, fn_w, THRESHOLD)
        alarms = sum(1 for score, _, window in points if window is None and score >= THRESHOLD)
        parts[profile] = (raw, len(names), alarms)
    return parts


def normalised(parts: dict[str, Parts], categories: list[str], profile: str = "standard") -> float:
    tp_w, _, fn_w = scorer().PROFILES[profile]
    chosen = [p[profile] for rel, p in parts.items() if rel.split("/")[0] in categories]
    raw = sum(part[0] for part in chosen)
    windows = sum(part[1] for part in chosen)
    if windows == 0:
        return float("nan")
    null, perfect = -fn_w * windows, tp_w * windows
    return round(100 * (raw - null) / (perfect - null), 1)


def false_alarms(parts: dict[str, Parts], category: str) -> int:
    return sum(p["standard"][2] for rel, p in parts.items() if rel.split("/")[0] == category)


# ---------------------------------------------------------------------------------------------- nab (end to end)

def run_nab(url: str, key: str, results: Path, loco_defaults: dict[str, Parts] | None) -> tuple[
        list[list[object]], list[str], dict]:
    """Every file through the server at the default settings. Two result directories: ``flags`` holds
    is_anomaly as 1.0/0.0 (NAB's 0.5 reads "is_anomaly": the service's own threshold), ``scores`` the
    calibrated anomaly_score (scored at NAB's best threshold only)."""
    headers = {"Authorization": f"Bearer {key}"}
    flags_dir, scores_dir = results / "flags", results / "scores"
    answered, refused, out_of_order = 0, [], {}
    thresholds: dict[str, set[float]] = {}
    no_anomaly_alarms: dict[str, int] = {}
    with requests.Session() as session:
        for path in nab_files():
            folder = path.parent.name
            with path.open() as handle:
                rows = list(csv.reader(handle))[1:]
            series = {"timestamps": [r[0].replace(" ", "T") for r in rows], "values": [float(r[1]) for r in rows]}
            body = {"series": [series], "data_frequency": NAB_FREQUENCY[folder]}
            response = session.post(url + "/anomalies", json=body, headers=headers, timeout=120)
            if response.status_code == 422:
                refused.append(f"{folder}/{path.name} ({response.text[:120]!r})")
                continue
            response.raise_for_status()
            answered += 1
            answer = response.json()
            flags = [1.0 if a else 0.0 for a in answer["is_anomaly"]]
            if answer.get("threshold") is not None:
                thresholds.setdefault(NAB_FREQUENCY[folder], set()).add(float(answer["threshold"]))
            if answer.get("out_of_order"):
                out_of_order[f"{folder}/{path.name}"] = len(answer["out_of_order"])
            stamps = [r[0] for r in rows]
            write_results(flags_dir, f"{folder}/{path.name}", stamps, flags)
            write_results(scores_dir, f"{folder}/{path.name}", stamps, answer["anomaly_score"])
            if folder == NO_WINDOWS:
                no_anomaly_alarms[path.name] = int(sum(flags[probation_rows(len(rows)):]))
    report = score_dir(flags_dir)
    best = score_dir(scores_dir)
    report["answered"] = f"{answered} of {len(nab_files())}"
    for profile in PROFILES:
        report[profile]["best"] = best[profile]["best"]
        report[profile]["best_threshold"] = best[profile]["best_threshold"]
    table = [
        ["this service, its own threshold (is_anomaly)", *(report[p]["at_threshold"] for p in PROFILES)],
        [
            "this service, best threshold (" + ", ".join(f"{best[p]['best_threshold']:.6g}" for p in PROFILES)
            + ")",
            *(best[p]["best"] for p in PROFILES),
        ],
    ]
    notes = [
        f"files answered: {answered} of {len(nab_files())}"
        + (f"; refused (422): {'; '.join(refused)}" if refused else "")
        + f". Scored: {report['files']} files, {report['windows']} labelled windows; every file sent whole to "
        "POST /anomalies through gunicorn at the default settings: one false alarm a week (no confidence or "
        "false_alarms_per_week sent)",
        "its own threshold: is_anomaly written as 1/0 (NAB's 0.5 then reads \"is_anomaly\"); the threshold the "
        "service answered: "
        + ("; ".join(f"{frequency} {', '.join(f'{t:.6g}' for t in sorted(values))}"
                     for frequency, values in sorted(thresholds.items())) or "none")
        + ". Best threshold: the calibrated anomaly_score written as it is, NAB's best threshold per profile",
        "timestamps sent as they are in the files: "
        + (", ".join(f"{name} {rows} row{'s' if rows != 1 else ''}" for name, rows in sorted(out_of_order.items()))
           or "no file")
        + " listed in out_of_order (a timestamp not after the row before: repeated or stepping back), judged in "
        "file order",
        f"false alarms in {NO_WINDOWS} (rows after the probationary period with is_anomaly): "
        + ", ".join(f"{name} {count}" for name, count in sorted(no_anomaly_alarms.items()))
        + f"; total {sum(no_anomaly_alarms.values())}",
    ]
    if loco_defaults is not None:
        in_process = [normalised(loco_defaults, list(CATEGORIES), p) for p in PROFILES]
        served = [report[p]["at_threshold"] for p in PROFILES]
        notes.append(
            "cross-check: the shipped settings run in-process (LOCO section) give "
            + "/".join(f"{v:.1f}" for v in in_process)
            + (" at the service's own threshold, the same as through the server" if in_process == served else
               " at the service's own threshold, NOT the same as through the server "
               f"({'/'.join(f'{v:.1f}' for v in served)})")
        )
    return table, notes, report


# ---------------------------------------------------------------------------------------------- loco (in-process)

def _init_worker(app_root: str) -> None:
    """Each grid worker imports the detector from the snapshot the suite runs and reads the files once."""
    global _FILES, _STREAMING
    if app_root not in sys.path:
        sys.path.insert(0, app_root)
    import app.compute.detect.streaming as streaming

    _STREAMING = streaming
    _FILES = load_nab()


def _grid_task(task: tuple[int, GridPoint]) -> tuple[int, GridPoint, Parts, float]:
    index, point = task
    assert _STREAMING is not None
    rel, stamps, times, values = _FILES[index]
    detector = _STREAMING.StreamingDetector(data_frequency=NAB_FREQUENCY[rel.split("/")[0]],
                                            **dict(zip(GRID, point, strict=True)))
    started = time.perf_counter()
    verdicts = detector.update(detector.initial_state(), times, values)
    elapsed = time.perf_counter() - started
    # is_anomaly as 1/0: NAB's THRESHOLD 0.5 then reads "is_anomaly", the service's own threshold.
    flags = [1.0 if a else 0.0 for a in verdicts.is_anomaly]
    return index, point, file_parts(rel, stamps, flags), elapsed


def run_grid(app_root: Path) -> tuple[dict[GridPoint, dict[str, Parts]], float, float]:
    """Every file under every grid point: {point (GRID's order): {file: parts}}, wall time, detector seconds."""
    files = load_nab()
    points = list(itertools.product(*GRID.values()))
    tasks = [(i, point) for point in points for i in range(len(files))]
    results: dict[GridPoint, dict[str, Parts]] = {point: {} for point in points}
    started = time.perf_counter()
    detector_seconds = 0.0
    # fork: the workers inherit sys.path and start at once; two workers for two cores.
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork"), initializer=_init_worker,
                             initargs=(str(app_root),)) as pool:
        for index, point, parts, elapsed in pool.map(_grid_task, tasks, chunksize=4):
            results[point][files[index][0]] = parts
            detector_seconds += elapsed
    return results, time.perf_counter() - started, detector_seconds


def choose(grid: dict[GridPoint, dict[str, Parts]], train: list[str]) -> tuple[GridPoint, str]:
    """The grid point with the best standard score at the service's own threshold (is_anomaly) on ``train``;
    while artificialNoAnomaly is among them, only points with no false alarm there compete. Ties go to the
    shipped settings, then to grid order."""
    candidates = list(grid)
    how = ""
    if NO_WINDOWS in train:
        silent = [point for point in candidates if false_alarms(grid[point], NO_WINDOWS) == 0]
        if silent:
            candidates = silent
        else:
            fewest = min(false_alarms(grid[point], NO_WINDOWS) for point in candidates)
            candidates = [point for point in candidates if false_alarms(grid[point], NO_WINDOWS) == fewest]
            how = f" (no grid point is silent on {NO_WINDOWS}: fewest false alarms, {fewest})"
    best = max(candidates, key=lambda point: (normalised(grid[point], train), point == SHIPPED,
                                              -list(grid).index(point)))
    return best, how


def run_loco(app_root: Path) -> tuple[list[str], dict[str, Parts], list[str]]:
    grid, wall, detector_seconds = run_grid(app_root)
    rows: list[list[object]] = []
    held: dict[str, float] = {}
    chosen_notes: list[str] = []
    for category in CATEGORIES:
        train = [other for other in CATEGORIES if other != category]
        point, how = choose(grid, train)
        if how:
            chosen_notes.append(f"held-out {category}: {how.strip(' ()')}")
        train_score = normalised(grid[point], train)
        if category == NO_WINDOWS:
            alarms = false_alarms(grid[point], category)
            rows.append([category, _point(point), f"{train_score:.1f}",
                         f"no windows: {alarms} false alarm{'s' if alarms != 1 else ''}"])
        else:
            held[category] = normalised(grid[point], [category])
            rows.append([category, _point(point), f"{train_score:.1f}", f"{held[category]:.1f}"])
    mean = sum(held.values()) / len(held)
    rows.append([f"mean over the {len(held)} categories with windows", "", "", f"**{mean:.1f}**"])
    kpi_row, kpi_notes = kpi_fold(app_root, grid)
    rows += kpi_row

    shipped = grid[SHIPPED]
    all_files = [normalised(shipped, list(CATEGORIES), p) for p in PROFILES]
    per_category = {cat: normalised(shipped, [cat]) for cat in CATEGORIES if cat != NO_WINDOWS}
    alarms_shipped = false_alarms(shipped, NO_WINDOWS)
    alarms_elsewhere = sum(false_alarms(shipped, cat) for cat in CATEGORIES if cat != NO_WINDOWS)
    files = len(shipped)
    notes = [
        "grid: " + " x ".join(f"{name} {{{', '.join(_value(name, v) for v in values)}}}"
                              for name, values in GRID.items())
        + f" = {len(grid)} points x {files} files, in-process (app.compute.detect.streaming of the benchmarked "
        f"code, no server), 2 processes: {wall:.1f} s wall, "
        f"{detector_seconds / (len(grid) * files) * 1000:.0f} ms of detector time per file and point on average",
        "each file is scored at the service's own threshold (is_anomaly, written as 1/0; the default settings: "
        "one false alarm a week). For each held-out category the grid point with the best standard score on "
        f"the other four is chosen (only points with zero false alarms on {NO_WINDOWS} compete while it is "
        "among the four; ties go to the shipped settings); the held-out category is then scored with it. "
        f"{NO_WINDOWS} has no windows (NAB's normalisation is undefined there): its false alarms (rows after "
        "the probationary period with is_anomaly) are reported instead of a score",
        *chosen_notes,
        *kpi_notes,
    ]
    table = ["## NAB leave-one-category-out (standard profile, at the service's own threshold: is_anomaly)", ""]
    table += [f"- {n}" for n in notes] + [""]
    table += _table(["held-out category", f"chosen ({', '.join(GRID)})",
                     "score on the other categories at its own threshold", "held-out score at its own threshold"], rows)
    table += ["", f"Shipped settings ({_point(SHIPPED)}), at the service's own threshold (is_anomaly):", ""]
    table += _table(
        ["", *PROFILES],
        [[f"all {files} files", *all_files],
         *[[f"{cat} (standard)", per_category[cat], "", ""] for cat in per_category],
         [f"false alarms: {NO_WINDOWS} / outside windows elsewhere", f"{alarms_shipped} / {alarms_elsewhere}", "", ""]],
    )
    # What each part is worth: the shipped settings with one constant at a time set to the grid's other value.
    table += ["", "The shipped settings with one constant changed (all files; held-out folds of the four categories "
              f"with windows; false alarms on {NO_WINDOWS}):", ""]
    ablations = []
    for position, name in enumerate(GRID):
        for value in GRID[name]:
            point = (*SHIPPED[:position], value, *SHIPPED[position + 1:])
            mark = " (shipped)" if point == SHIPPED else ""
            ablations.append([f"{name} {_value(name, value)}{mark}", f"{normalised(grid[point], list(CATEGORIES)):.1f}",
                              *(f"{normalised(grid[point], [cat]):.1f}" for cat in per_category),
                              false_alarms(grid[point], NO_WINDOWS)])
    table += _table(["setting", "all files", *per_category, NO_WINDOWS], ablations)
    held_alarms = next(row[3] for row in rows if row[0] == NO_WINDOWS)
    summary = [f"leave-one-category-out, mean held-out score over the {len(held)} categories with windows: "
               f"**{mean:.1f}** (" + ", ".join(f"{cat} {score:.1f}" for cat, score in held.items())
               + f"); held-out {NO_WINDOWS}: {held_alarms.removeprefix('no windows: ')}; shipped settings on all "
               f"{files} files at the service's own threshold (is_anomaly): {all_files[0]:.1f} standard"
               + (f"; held-out KPIs (sixth category): {kpi_row[0][3]}" if kpi_row else "")]
    return table, shipped, summary


def kpi_fold(app_root: Path, grid: dict[GridPoint, dict[str, Parts]]) -> tuple[list[list[object]], list[str]]:
    """The KPI development set as a sixth, held-out category: the grid point chosen on all five NAB categories (as
    choose() picks for any fold), run on every KPI by bench/kpi.py and scored at the detector's own threshold."""
    if not kpi.available():
        return [], [f"KPIs (sixth category) skipped: {kpi.KPI_ROOT} or {kpi.KPI_SCORE} is absent"]
    point, how = choose(grid, list(CATEGORIES))
    figures, wall = kpi.detector_figures(app_root, dict(zip(GRID, point, strict=True)))
    held = (f"{figures['caught_share']:.1%} of {int(figures['segments'])} segments caught, "
            f"{figures['alarms_per_week']:.2f} false alarms/week")
    notes = [f"KPIs (sixth category, held out only): the point with the best standard score on all five NAB "
             f"categories{how}, run in-process on the {len(kpi.kpi_ids())} KPIs of the KPI development set (last 7 "
             "days of train as history, then test) and scored by kpi_score.py at the detector's own threshold: "
             f"segments caught within 8 points, false-alarm runs per KPI-week ({wall:.1f} s wall). The NAB folds "
             "do not train on the KPIs (bench/anomaly.py's docstring says why); bench/kpi.py gives the whole "
             "KPI picture at the defaults"]
    row = ["KPI development set (sixth category)", _point(point),
           f"{normalised(grid[point], list(CATEGORIES)):.1f} (all five)", held]
    if point != SHIPPED:
        shipped, _ = kpi.detector_figures(app_root, dict(zip(GRID, SHIPPED, strict=True)))
        notes.append(f"KPIs at the shipped settings, for comparison: {shipped['caught_share']:.1%} caught, "
                     f"{shipped['alarms_per_week']:.2f} false alarms/week")
    return [row], notes


# ---------------------------------------------------------------------------------------------- reference detector

def reference_scores(app_root: Path, out_dir: Path) -> None:
    """Run in a child process with the reference checkout first on sys.path (its `app` package, not ours): its
    StreamingDetector at its defaults on every file, raw timestamps, every row from row 0; the result files hold
    is_anomaly as 1.0/0.0 (there it was score >= 0.5)."""
    sys.path.insert(0, str(app_root))
    from app.compute.detect.streaming import StreamingDetector

    failures = []
    started = time.perf_counter()
    for rel, stamps, times, values in load_nab():
        try:
            detector = StreamingDetector(data_frequency=NAB_FREQUENCY[rel.split("/")[0]])
            verdicts = detector.update(detector.initial_state(), times, values)
        except Exception as exc:  # noqa: BLE001 - a file it cannot judge is reported, the others still count
            failures.append(f"{rel}: {type(exc).__name__}")
            continue
        write_results(out_dir, rel, stamps, [1.0 if a else 0.0 for a in verdicts.is_anomaly])
    print(json.dumps({"failures": failures, "seconds": time.perf_counter() - started}))


def run_reference(commit: str) -> tuple[list[str], list[str]]:
    with c.git_worktree(commit, prefix="bench-anomaly-ref-") as tree, c.temp_dir("bench-anomaly-ref-out-") as out:
        described = subprocess.run(["git", "log", "-1", "--format=%h %s", commit], cwd=c.ROOT, capture_output=True,
                                   text=True, timeout=30).stdout.strip()
        child = c.run_json([str(Path(__file__).resolve()), "--reference-scores", str(tree), str(out)], timeout=900,
                           env=c.base_env(tree))
        report = score_dir(out)
        parts: dict[str, Parts] = {}
        for rel, stamps, _, _ in load_nab():
            path = out / rel
            if path.is_file():
                with path.open() as handle:
                    flags = [float(r[1]) for r in list(csv.reader(handle))[1:]]
                parts[rel] = file_parts(rel, stamps, flags)
    per_category = {cat: normalised(parts, [cat]) for cat in CATEGORIES if cat != NO_WINDOWS}
    alarms_none = false_alarms(parts, NO_WINDOWS)
    alarms_elsewhere = sum(false_alarms(parts, cat) for cat in per_category)
    what = REFERENCES.get(commit, "an earlier detector")
    notes = [
        f"commit {described[:100]}: {what} (app.compute.detect.streaming.StreamingDetector at its defaults) run "
        f"in-process from a git worktree in this run, on the same {report['files']} files ({report['windows']} "
        f"windows), timestamps as in the files, every row from row 0; {child['seconds']:.1f} s"
        + (f"; failed on {', '.join(child['failures'])}" if child["failures"] else ""),
        "scored at its own threshold: is_anomaly written as 1/0 (NAB's 0.5 then reads \"is_anomaly\"); false "
        f"alarms: rows after the probationary period with is_anomaly, in {NO_WINDOWS} and outside the windows "
        "of the other categories",
    ]
    rows = [
        [f"{commit}, its own threshold (is_anomaly)", *(report[p]["at_threshold"] for p in PROFILES)],
        *[[f"{commit}, {cat} (standard, its own threshold)", per_category[cat], "", ""] for cat in per_category],
        [f"{commit}, false alarms: {NO_WINDOWS} / outside windows elsewhere", f"{alarms_none} / {alarms_elsewhere}",
         "", ""],
    ]
    lines = [f"## Reference: {what}, measured in the same run", ""] + [f"- {n}" for n in notes] + [""]
    summary = [f"{what} ({commit}) in the same run, at its own threshold: {report['standard']['at_threshold']} "
               f"standard on the {report['files']} files; false alarms outside windows "
               f"{alarms_none + alarms_elsewhere}"]
    return lines + _table(["detector", *PROFILES], rows), summary


# ---------------------------------------------------------------------------------------------- speed

def speed_series(points: int) -> tuple[list[str], list[float]]:
    rng = random.Random(11)
    start = datetime(2026, 1, 5, tzinfo=UTC)
    stamps = [(start + timedelta(minutes=5 * i)).strftime("%Y-%m-%dT%H:%M:%SZ") for i in range(points)]
    values = [100 + 30 * math.sin(2 * math.pi * i / 288) + rng.gauss(0, 3) for i in range(points)]
    for i in range(500, points, 701):
        values[i] += 40
    return stamps, values


def timed_interleaved(
    session: requests.Session, base: str, cases: list[tuple[str, dict | None, dict[str, str]]], runs: int,
    cpu: Callable[[], float] | None = None,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Round-robin over the routes, so each one meets the same machine load (a shared CI box varies a lot).
    With ``cpu`` (the server's CPU seconds so far), also the server CPU each request cost: unlike wall time, it
    hardly depends on what else the shared machine runs."""
    prepared = []
    for path, body, headers in cases:
        # Encoded once: the client's JSON encoding is the load generator's cost, not the service's.
        data = None if body is None else json.dumps(body).encode()
        method = session.get if body is None else session.post
        prepared.append((path, method, data, {**headers, "Content-Type": "application/json"}))
    for path, method, data, headers in prepared:
        for _ in range(3):  # warm: connection, worker caches
            method(base + path, data=data, headers=headers, timeout=60).raise_for_status()
    times: dict[str, list[float]] = {path: [] for path, *_ in prepared}
    cpu_costs: dict[str, list[float]] = {path: [] for path, *_ in prepared}
    for _ in range(runs):
        for path, method, data, headers in prepared:
            cpu_before = cpu() if cpu else 0.0
            started = time.perf_counter()
            response = method(base + path, data=data, headers=headers, timeout=60)
            response.content  # noqa: B018 - the body is part of the answer
            times[path].append(time.perf_counter() - started)
            if cpu:
                cpu_costs[path].append(cpu() - cpu_before)
            response.raise_for_status()
    return times, cpu_costs


def run_speed(server: c.Gunicorn, key: str, runs: int) -> tuple[list[list[object]], list[str]]:
    url = server.url
    stamps, values = speed_series(SPEED_POINTS)
    ours = {"series": [{"timestamps": stamps, "values": values}], "data_frequency": "Minutes"}
    azure = {
        "series": [{"timestamp": t, "value": v} for t, v in zip(stamps, values, strict=True)],
        "granularity": "minutely",
        "customInterval": 5,
    }
    rows: list[list[object]] = []
    medians: dict[str, float] = {}
    cases: list[tuple[str, dict | None, dict[str, str]]] = [
        ("/verify", None, {"Authorization": f"Bearer {key}"}),
        ("/anomalies", ours, {"Authorization": f"Bearer {key}"}),
        ("/anomalies/last", ours, {"Authorization": f"Bearer {key}"}),
        ("/anomalydetector/v1.1/timeseries/entire/detect", azure, {"Ocp-Apim-Subscription-Key": key}),
        ("/anomalydetector/v1.1/timeseries/last/detect", azure, {"Ocp-Apim-Subscription-Key": key}),
    ]
    load_before = os.getloadavg()[0]
    with requests.Session() as session:
        measured, cpu_costs = timed_interleaved(session, url, cases, runs,
                                                cpu=lambda: c.tree_cpu_seconds(server.process.pid))
    for path, times in measured.items():
        medians[path] = c.median(times)
        target = TARGETS_MS.get(path)
        verdict = ""
        if target is not None:
            verdict = f"p50 <= {target:.0f} ms: {'met' if medians[path] * 1000 <= target else 'MISSED'}"
        mean_cpu = sum(cpu_costs[path]) / len(cpu_costs[path])
        rows.append([path, SPEED_POINTS, runs, c.fmt_ms(medians[path], 1), c.fmt_ms(c.percentile(times, 90), 1),
                     c.fmt_ms(mean_cpu, 1), verdict])
    ratio = medians["/anomalydetector/v1.1/timeseries/entire/detect"] / medians["/anomalies"]
    rows[0][1] = "-"
    rows[0][6] = "floor: key check, rate limit, HTTP (no body)"
    rows[3][6] = f"{ratio:.2f}x /anomalies (within 1.20x: {'met' if ratio <= 1.2 else 'MISSED'})"
    notes = [
        f"{SPEED_POINTS} five-minute points (daily cycle, noise, spikes); one client, keep-alive, "
        f"{runs} timed rounds (one request per route each, round-robin) after 3 warm-up requests per route; "
        "gunicorn with 2 detection workers, SQLite keys",
        "end to end: JSON encode, HTTP, key check, rate limit, validation, worker pool, detector (every row from "
        "row 0, /last included: the state needs every row), JSON answer",
        "server CPU: user + system time of gunicorn's process tree (web process and detection workers) per "
        "request, the mean over the timed requests (/proc, 10 ms ticks); wall time on a shared machine also "
        "holds the time the server waited for a core",
        f"the detector alone, in-process on the same {SPEED_POINTS} points: {detector_alone(SPEED_POINTS)}",
        f"1-min load average: {load_before:.2f} before, {os.getloadavg()[0]:.2f} after (2 cores shared with "
        "other processes)",
    ]
    return rows, notes


def detector_speed(app_root: Path, points: int, runs: int) -> None:
    """Run in a child process with ``app_root`` first on sys.path: wall and CPU seconds of StreamingDetector.update
    over the whole series, ``runs`` times (what the worker spends, without HTTP, JSON or the pool)."""
    sys.path.insert(0, str(app_root))
    from app.compute.detect import native
    from app.compute.detect.streaming import StreamingDetector

    stamps, values = speed_series(points)
    times = [datetime.fromisoformat(s).timestamp() for s in stamps]
    walls, cpus = [], []
    for _ in range(runs):
        detector = StreamingDetector(data_frequency="Minutes")
        wall, cpu = time.perf_counter(), time.process_time()
        detector.update(detector.initial_state(), times, values)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    print(json.dumps({"walls": walls, "cpus": cpus, "compiled": native.active()}))


def detector_alone(points: int, rounds: int = 4, runs: int = 3) -> str:
    """Median wall and CPU time of the detector on the series, compiled (where built) and the same sources as plain
    Python, in child processes taking turns: the machine's speed drifts by tens of percent within a day, and the
    ratio of two variants measured in turns does not."""
    variants = {"ours": {}, "plain": {"FORECAST_PURE_DETECTOR": "1"}}
    times: dict[str, dict[str, list[float]]] = {label: {"walls": [], "cpus": []} for label in variants}
    compiled: list[bool] = []
    for _ in range(rounds):
        for label, extra in variants.items():
            child = c.run_json([str(Path(__file__).resolve()), "--detector-speed", str(c.APP_ROOT), str(points),
                                str(runs)], timeout=600, env=c.base_env(c.APP_ROOT, **extra))
            for name in ("walls", "cpus"):
                times[label][name] += child[name]
            if label == "ours":
                compiled.append(child["compiled"])
    ours, plain = (c.median(times[label]["cpus"]) for label in variants)
    what = "compiled (mypyc)" if all(compiled) else "plain Python (no compiled build)"
    return (f"{what}: median {c.fmt_ms(c.median(times['ours']['walls']), 1)} ms wall, {c.fmt_ms(ours, 1)} ms CPU "
            f"({rounds * runs} runs); the same sources as plain Python beside it, in turns: {c.fmt_ms(plain, 1)} ms "
            f"CPU (compiled {ours / plain:.2f}x)")


# ---------------------------------------------------------------------------------------------- main

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer timed requests")
    parser.add_argument("--only", default="nab,loco,reference,speed")
    parser.add_argument("--reference", default=",".join(REFERENCES), help="commits of earlier detectors")
    parser.add_argument("--reference-scores", nargs=2, metavar=("APP_ROOT", "OUT_DIR"), help=argparse.SUPPRESS)
    parser.add_argument("--detector-speed", nargs=3, metavar=("APP_ROOT", "POINTS", "RUNS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.detector_speed:
        detector_speed(Path(args.detector_speed[0]), int(args.detector_speed[1]), int(args.detector_speed[2]))
        return 0
    if args.reference_scores:
        reference_scores(Path(args.reference_scores[0]), Path(args.reference_scores[1]))
        return 0
    suites = set(args.only.split(","))
    if suites & {"nab", "loco", "reference"} and not (NAB_ROOT.is_dir() and NAB_SCORE.is_file()):
        print(f"skipping nab, loco, reference: {NAB_ROOT} or {NAB_SCORE} is absent", file=sys.stderr)
        suites -= {"nab", "loco", "reference"}
    sections: list[str] = []
    load_start = os.getloadavg()
    with c.code_snapshot() as code_line, c.temp_dir("bench-anomaly-") as tmp:
        c.CODE_LINE = code_line
        shipped: dict[str, Parts] | None = None
        # In-process parts first, while no server competes for the two cores.
        loco_lines: list[str] = []
        summary: list[str] = []
        if "loco" in suites:
            loco_lines, shipped, loco_summary = run_loco(c.APP_ROOT)
            summary += loco_summary
        reference_lines: list[str] = []
        if "reference" in suites:
            for commit in args.reference.split(","):
                lines, reference_summary = run_reference(commit)
                reference_lines += [*lines, ""]
                summary += reference_summary
        with c.database("sqlite", tmp) as url:
            key = c.create_key(url)
            with c.gunicorn(url, tmp, workers=2) as server:
                if "nab" in suites:
                    table, notes, report = run_nab(server.url, key, tmp / "nab-results", shipped)
                    at = {p: report[p]["at_threshold"] for p in PROFILES}
                    summary.insert(0, f"end to end through gunicorn, files answered: {report['answered']}; all "
                                   f"{report['files']} files at the service's own threshold (is_anomaly): "
                                   f"**{at['standard']}** standard, "
                                   f"{at['reward_low_FP_rate']} low-FP, {at['reward_low_FN_rate']} low-FN (best "
                                   f"threshold {report['standard']['best']} standard); published detectors, each at "
                                   "its best threshold: " + ", ".join(f"{n} {v[0]}" for n, *v in PUBLISHED))
                    table += [[f"{name} (published, best threshold)", *scores] for name, *scores in PUBLISHED]
                    sections.append(_section(f"NAB development set ({report['files']} files), normalised score, "
                                             "end to end", notes, ["detector", *PROFILES], table))
                if loco_lines:
                    sections.append("\n".join(loco_lines) + "\n")
                if reference_lines:
                    sections.append("\n".join(reference_lines) + "\n")
                if "speed" in suites:
                    rows, notes = run_speed(server, key, 10 if args.quick else 40)
                    summary.append(f"POST /anomalies on {SPEED_POINTS} points: p50 {rows[1][3]} ms ({rows[1][6]}), "
                                   f"server CPU {rows[1][5]} ms a request; /anomalies/last p50 {rows[2][3]} ms "
                                   f"({rows[2][6]})")
                    sections.append(
                        _section(
                            "Latency through gunicorn",
                            notes,
                            ["route", "points", "runs", "p50 ms", "p90 ms", "server CPU ms", "target"],
                            rows,
                        )
                    )
    text = (f"# Anomaly detection benchmark\n\n{c.machine_line()}; {c.CODE_LINE}; load average (1/5 min) when the "
            f"suite started: {load_start[0]:.2f}/{load_start[1]:.2f}\n\n"
            + "".join(f"- {line}\n" for line in summary) + "\n" + "\n".join(sections))
    c.RESULTS.mkdir(parents=True, exist_ok=True)
    (c.RESULTS / "anomaly.md").write_text(text)
    print(text)
    return 0


def _value(name: str, value: float) -> str:
    if name == "habit":
        return "0" if not value else f"1/{round(1 / value)}"
    return str(value)


def _point(point: GridPoint) -> str:
    return ", ".join(_value(name, value) for name, value in zip(GRID, point, strict=True))


def _table(header: list[str], rows: list[list[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(v) for v in row) + " |" for row in rows]


def _section(title: str, notes: list[str], header: list[str], rows: list[list[object]]) -> str:
    lines = [f"## {title}", ""] + [f"- {n}" for n in notes] + [""] + _table(header, rows)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
