"""Batches: throughput of the job workers beside statsforecast, scale-out, the web process's memory under a 1 GB
upload, and the time to a batch's first progress.

    python bench/batches.py [--series 10000] [--reference-sample 200] [--reference-budget 300] [--upload-mb 1000]
                            [--quick]

- Throughput: ``--series`` series built from every development set (M4 Hourly/Weekly, M1 and Tourism
  Yearly/Quarterly/Monthly) as rolling origins (each training series, then the same series without its last
  horizon, without its last two horizons...), one batch per set (a batch has one frequency), submitted as CSV
  with forecast_client's submit_batch through a real gunicorn and ``flask --app wsgi jobs worker``. Series per
  second per core = series / (seconds from the first submission to the last batch done) / worker processes.
- Reference, same run, same cores: statsforecast AutoETS, AutoTheta and AutoARIMA on a fixed stratified sample
  of the same series (``--reference-sample``), in as many processes as the service has workers, each model
  stopped after ``--reference-budget`` seconds (AutoARIMA takes up to a minute a series on M4 Hourly); the
  combination (the mean of the three, what matches our accuracy) costs the sum of the three. Our models are
  also timed in-process on that same sample, so the two stand on identical series.
- Equality: a sample of the batch's series sent alone to POST /forecast gives exactly the batch's numbers.
- Scale-out: model-2 batches with 1 and with 2 worker processes.
- Memory: VmHWM of the gunicorn worker process while a generated CSV of ``--upload-mb`` MB (written to a temp
  file, deleted after) is uploaded and its results downloaded; the job worker's VmHWM is recorded beside it.
- First progress: seconds from the submission of a batch of ``--series`` series until GET /batches/{id}
  shows progress.done > 0.

Writes bench/results/batches.md.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import multiprocessing  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from multiprocessing import Pool  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c  # noqa: E402
import datasets  # noqa: E402
from accuracy import _stamps  # noqa: E402
from datasets import SETS, DataSet  # noqa: E402

MODELS = ("forecast-model-1", "forecast-model-2")
ANCHORS = ("AutoETS", "AutoTheta", "AutoARIMA")
GiB = 1 << 30


@dataclass(frozen=True)
class Item:
    id: str
    ds: DataSet
    history: np.ndarray


def build_series(total: int) -> dict[str, list[Item]]:
    """``total`` series from the development sets' training rows as rolling origins, in proportion to each
    set's size: origin k drops the last k horizons (a series keeps at least 2 horizons + 3 points)."""
    per_set = {name: datasets.load(name) for name in SETS}
    size = sum(len(v) for v in per_set.values())
    out: dict[str, list[Item]] = {}
    for name, series in per_set.items():
        ds = SETS[name]
        want = round(total * len(series) / size)
        items: list[Item] = []
        origin = 0
        while len(items) < want and origin < 50:
            for s in series:
                cut = len(s.history) - origin * ds.horizon
                if cut >= 2 * ds.horizon + 3 and len(items) < want:
                    items.append(Item(f"{s.id}-o{origin}", ds, s.history[:cut]))
            origin += 1
        out[name] = items
    return out


def frame_of(items: list[Item]):  # noqa: ANN201 - a pandas DataFrame
    import pandas as pd

    parts = []
    for item in items:
        stamps = _stamps(item.ds, len(item.history))
        parts.append(pd.DataFrame({"unique_id": item.id, "timestamp": pd.to_datetime(stamps),
                                   "value": item.history}))
    return pd.concat(parts, ignore_index=True)


# ---------------------------------------------------------------------------------------------- the service

@dataclass
class Service:
    server: c.Gunicorn
    workers: list[subprocess.Popen]
    key: str
    url: str
    database_url: str
    start_workers: Callable[[], None]

    def worker_cpu_seconds(self) -> float:
        return sum(c.tree_cpu_seconds(worker.pid) for worker in self.workers)

    def worker_sched_seconds(self) -> tuple[float, float]:
        """(on a CPU, waiting for a CPU) summed over the job workers' processes."""
        both = [c.tree_sched_seconds(worker.pid) for worker in self.workers]
        return sum(b[0] for b in both), sum(b[1] for b in both)


@contextmanager
def service(tmp: Path, processes: int, name: str, *, consumers: int = 1, workers_now: bool = True,
            ) -> Iterator[Service]:
    """gunicorn and ``consumers`` job workers of ``processes`` processes each on a fresh SQLite database (and
    its queue), each consumer in a session of its own as a service manager would start it. With ``workers_now``
    false the workers start at ``Service.start_workers()``: the queue keeps what was submitted before."""
    run_dir = tmp / name
    run_dir.mkdir()
    with c.database("sqlite", run_dir) as url:
        key = c.create_key(url, "read,write,delete")
        env = c.base_env(DATABASE_URL=url, FORECAST_WORKERS="1")
        with c.gunicorn(url, run_dir, workers=1) as server:
            log = open(run_dir / "worker.log", "w")  # noqa: SIM115
            workers: list[subprocess.Popen] = []

            def start_workers() -> None:
                workers.extend(subprocess.Popen(
                    [str(c.VENV_BIN / "flask"), "--app", "wsgi", "jobs", "worker", "--processes", str(processes),
                     *(["--no-periodic"] if n else [])], cwd=env["BENCH_APP_ROOT"], env=env, stdout=log,
                    stderr=subprocess.STDOUT, start_new_session=True) for n in range(consumers))

            if workers_now:
                start_workers()
            try:
                yield Service(server, workers, key, server.url, url, start_workers)
            finally:
                for worker in workers:
                    if worker.poll() is None:
                        os.killpg(worker.pid, 15)
                for worker in workers:
                    try:
                        worker.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        os.killpg(worker.pid, 9)
                        worker.wait()
                log.close()


def client_for(svc: Service):  # noqa: ANN201
    from forecast_client import Client

    return Client(svc.url, svc.key, timeout=600.0)


def run_batches(svc: Service, frames: dict[str, tuple[DataSet, object]], model: str, *,
                queued_first: bool = False) -> tuple[float, list, float]:
    """Submits one batch per set: (seconds until every batch is done, the batches, CPU seconds the job worker's
    processes used meanwhile). The clock starts at the first submission, or with ``queued_first`` once every
    batch is queued and the (not yet started) workers start: the workers' throughput alone, without the client
    encoding its frames on the same two cores."""
    with client_for(svc) as client:
        # The end is each batch's own finished_at (the service's clock, which is this machine's), so the polling
        # can be as slow as a real client's: polling 7 batches 4 times a second cost the web process (on the
        # workers' two cores) several per cent of a core.
        if not queued_first:
            cpu0 = svc.worker_cpu_seconds()
            t0 = time.time()
        submitted = [client.submit_batch(frame, ds.horizon, frequency=ds.data_frequency, model=model)
                     for ds, frame in frames.values()]
        if queued_first:
            t0 = time.time()
            svc.start_workers()
            cpu0 = 0.0
        pending = {b.id for b in submitted}
        ends: list[float] = []
        while pending:
            time.sleep(1.0)
            for batch_id in list(pending):
                batch = client.batch(batch_id)
                if batch.finished:
                    if batch.status != "done" or batch.finished_at is None:
                        raise RuntimeError(f"batch {batch_id} {batch.status}: {batch.error}")
                    ends.append(batch.finished_at.timestamp())
                    pending.discard(batch_id)
        return max(ends) - t0, submitted, svc.worker_cpu_seconds() - cpu0


def same_as_single(svc: Service, batches: list, frames: dict[str, tuple[DataSet, object]], model: str,
                   per_batch: int) -> tuple[int, int]:
    """(series compared, series equal): the batch's forecast against POST /forecast for that series alone."""
    import httpx

    compared = equal = 0
    with client_for(svc) as client:
        for batch, (ds, frame) in zip(batches, frames.values(), strict=True):
            results = client.batch_results(batch.id)
            ids = list(dict.fromkeys(frame["unique_id"]))
            for sid in ids[:: max(1, len(ids) // per_batch)][:per_batch]:
                rows = frame[frame["unique_id"] == sid]
                body = {"series": [{"timestamps": rows["timestamp"].dt.strftime("%Y-%m-%dT%H:%M:%S").tolist(),
                                    "values": rows["value"].tolist()}],
                        "forecast_horizon": ds.horizon, "data_frequency": ds.data_frequency,
                        "forecast_frequency": ds.data_frequency, "confidence": 0.95}
                single = httpx.post(svc.url + "/forecast", json=body, timeout=120,
                                    headers={"Authorization": f"Bearer {svc.key}", "X-Model-Id": model}).json()
                got = results[results["unique_id"] == sid]
                compared += 1
                equal += (got["median"].tolist() == single["median"] and got["lower"].tolist() == single["lower_bound"]
                          and got["upper"].tolist() == single["upper_bound"])
    return compared, equal


# ---------------------------------------------------------------------------------------------- reference

def _anchor_time(task: tuple[str, DataSet, np.ndarray]) -> float:
    from statsforecast import models as sf

    name, ds, y = task
    season = ds.season if len(y) >= 2 * ds.season + 1 else 1
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            getattr(sf, name)(season_length=season).forecast(y=y.astype(float), h=ds.horizon, level=[95])
        except Exception:  # noqa: BLE001, S110 - a model that cannot be fitted still cost its time
            pass
    return time.perf_counter() - t


def _ours_time(task: tuple[str, DataSet, np.ndarray]) -> float:
    from app.compute.forecast.models import run_forecast
    from app.series.frequencies import seasonal_periods

    model, ds, y = task
    t = time.perf_counter()
    run_forecast(model, y.tolist(), ds.horizon, 0.95, seasonal_periods(ds.data_frequency, 1, len(y)))
    return time.perf_counter() - t


def _warmed(fn, task: tuple[str, DataSet, np.ndarray], ready) -> None:
    """A pool process's start: one run of the model it is about to time, then wait for the others."""
    fn(task)
    ready.wait()


@dataclass(frozen=True)
class Rate:
    per_core: float    # series per second per core (wall clock)
    per_cpu: float     # series per CPU second of the processes doing the work: what a shared machine moves least
    finished: int


def reference(sample: list[Item], processes: int, budget: float) -> dict[str, Rate]:
    """Each statsforecast model and each of our models in-process on ``sample``, in ``processes`` processes,
    each given at most ``budget`` seconds: the series finished by then per second per process, and per CPU
    second of the pool. A statsforecast model stopped by the budget is credited with the series it finished,
    which are its quickest, plus the ones in flight as if they had just finished: an upper bound of its speed,
    so the comparison can only flatter the reference (ours, if ever cut, get no such credit)."""
    out: dict[str, Rate] = {}
    # The shortest seasonal series: the seasonal code paths get compiled, without a long AutoARIMA fit.
    warm = min((item for item in sample if len(item.history) >= 2 * item.ds.season + 1),
               key=lambda item: len(item.history), default=sample[0])
    for name in (*ANCHORS, *MODELS):
        fn = _ours_time if name in MODELS else _anchor_time
        # Shortest series first: a model cut by the budget has then finished roughly its quickest series, as the
        # credit above assumes. (The sample in set order starts with M4 Hourly, where AutoARIMA takes 25 to
        # 190 s a series: cut after 60 s it was credited 1 of 40, a rate far below its real one.)
        tasks = [(name, item.ds, item.history) for item in sorted(sample, key=lambda item: len(item.history))]
        # Each model warmed up with itself in every process of its pool before the clock starts: its imports
        # and its own numba compilation stay out of the timing. (Warming every anchor up with AutoETS left
        # AutoARIMA's compilation in its first timed series: 0.025 series/s, 1 of 40 within 60 s.) A barrier,
        # not a map of one task per process, since a map may hand two warm-ups to one process.
        ready = multiprocessing.Barrier(processes + 1)
        with Pool(processes, initializer=_warmed, initargs=(fn, (name, warm.ds, warm.history), ready)) as pool:
            ready.wait()
            finished = 0
            cpu0 = c.tree_cpu_seconds(os.getpid())
            t = time.perf_counter()
            results = pool.imap_unordered(fn, tasks, chunksize=1)
            while finished < len(tasks):
                left = budget - (time.perf_counter() - t)
                if left <= 0:
                    break
                try:
                    results.next(timeout=left)
                except multiprocessing.TimeoutError:
                    break
                finished += 1
            wall = time.perf_counter() - t
            cpu = c.tree_cpu_seconds(os.getpid()) - cpu0
            pool.terminate()
        credited = finished + (processes if finished < len(tasks) and name not in MODELS else 0)
        out[name] = Rate(credited / wall / processes, credited / max(cpu, 1e-9), finished)
        print("reference", name, out[name], round(wall, 1), round(cpu, 1), flush=True)
    # The combination fits all three on each series: its time per series is the sum of theirs.
    out["Comb (mean of 3)"] = Rate(1 / sum(1 / out[n].per_core for n in ANCHORS),
                                   1 / sum(1 / out[n].per_cpu for n in ANCHORS),
                                   min(out[n].finished for n in ANCHORS))
    return out


# ---------------------------------------------------------------------------------------------- memory

def vm_hwm_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def tree_hwm_mib(root: int) -> float:
    """The largest VmHWM among a process and its descendants (the job worker's processes)."""
    best = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            if int(entry.name) == root or _descends(int(entry.name), root):
                best = max(best, vm_hwm_mib(int(entry.name)))
        except (OSError, ValueError):
            continue
        del stat
    return best


def _descends(pid: int, root: int) -> bool:
    while pid > 1:
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = int(stat[stat.rindex(")") + 2:].split()[1])
        if pid == root:
            return True
    return False


def write_upload(path: Path, target_bytes: int, points: int) -> int:
    """A long CSV of hourly series of ``points`` points each (a daily cycle, a trend and noise) up to
    ``target_bytes``; returns the number of series."""
    rng = np.random.default_rng(0)
    stamps = np.datetime_as_string(np.datetime64("2020-01-01T00:00:00") + np.arange(points) * np.timedelta64(1, "h"),
                                   unit="s")
    t = np.arange(points)
    written, count = 0, 0
    with path.open("w") as fh:
        fh.write("unique_id,timestamp,value\n")
        while True:
            values = 100 + 0.001 * t + 10 * np.sin(2 * np.pi * t / 24 + count) + rng.normal(0, 1, points)
            sid = f"gen-{count:06d}"
            block = "".join(f"{sid},{s},{v:.3f}\n" for s, v in zip(stamps, values, strict=True))
            if written + len(block) > target_bytes:
                break
            fh.write(block)
            written += len(block)
            count += 1
    return count


def settled_worker_hwm(svc: Service, most: float = 120.0) -> float:
    """The job worker's largest VmHWM once its processes have started and warmed up (the figure has stopped
    growing for 5 s): what a worker holds before any batch."""
    last, since, start = -1.0, time.perf_counter(), time.perf_counter()
    while time.perf_counter() - start < most:
        now = max(tree_hwm_mib(w.pid) for w in svc.workers)
        if now > last:
            last, since = now, time.perf_counter()
        elif time.perf_counter() - since >= 5:
            break
        time.sleep(0.5)
    return last


def memory_run(svc: Service, tmp: Path, upload_mb: int, points: int) -> dict[str, float]:
    import httpx
    from forecast_client import Client

    web_pids = svc.server.worker_pids()

    def web_hwm() -> float:
        return max(vm_hwm_mib(pid) for pid in web_pids)

    before = web_hwm()
    worker_before = settled_worker_hwm(svc)
    path = tmp / "upload.csv"
    try:
        series = write_upload(path, upload_mb * 1_000_000, points)
        size = path.stat().st_size

        def pieces() -> Iterator[bytes]:
            with path.open("rb") as fh:
                while piece := fh.read(1 << 20):
                    yield piece

        t = time.perf_counter()
        answer = httpx.post(svc.url + "/batches", content=pieces(), timeout=1800,
                            params={"forecast_horizon": 24, "data_frequency": "Hours", "forecast_frequency": "Hours"},
                            headers={"Authorization": f"Bearer {svc.key}", "Content-Type": "text/csv",
                                     "X-Model-Id": "forecast-model-2", "Content-Length": str(size)})
        upload_s = time.perf_counter() - t
        if answer.status_code != 202:
            raise RuntimeError(f"upload answered {answer.status_code}: {answer.text[:300]}")
        after_upload = web_hwm()
    finally:
        path.unlink(missing_ok=True)
    batch_id = answer.json()["id"]
    with Client(svc.url, svc.key, timeout=600.0) as client:
        t = time.perf_counter()
        batch = client.wait_batch(batch_id, progress=False)
        compute_s = time.perf_counter() - t
    if batch.status != "done":
        raise RuntimeError(f"memory batch {batch.status}: {batch.error}")
    downloaded = 0
    t = time.perf_counter()
    with httpx.stream("GET", f"{svc.url}/batches/{batch_id}/results", timeout=1800,
                      headers={"Authorization": f"Bearer {svc.key}", "Accept": "text/csv"}) as response:
        for piece in response.iter_bytes():
            downloaded += len(piece)
    download_s = time.perf_counter() - t
    return {"upload_bytes": size, "series": series, "web_hwm_start": before, "web_hwm_after_upload": after_upload,
            "web_hwm_end": web_hwm(), "worker_hwm_start": worker_before,
            "worker_hwm": max(tree_hwm_mib(w.pid) for w in svc.workers), "upload_s": upload_s,
            "compute_s": compute_s, "download_bytes": downloaded, "download_s": download_s,
            "done": batch.done, "failed": batch.failed}


def first_progress(svc: Service, frame, ds: DataSet, model: str) -> tuple[float, float, float]:  # noqa: ANN001
    """Seconds from submission to: the 202, the batch running (its upload split into chunks and the first chunk
    claimed), progress.done > 0 (the first chunk stored)."""
    with client_for(svc) as client:
        t = time.perf_counter()
        batch = client.submit_batch(frame, ds.horizon, frequency=ds.data_frequency, model=model)
        accepted = time.perf_counter() - t
        running = float("nan")
        while batch.done == 0 and not batch.finished:
            time.sleep(0.05)
            batch = client.batch(batch.id)
            if batch.status != "queued" and running != running:
                running = time.perf_counter() - t
        first = time.perf_counter() - t
        client.cancel_batch(batch.id)  # the next measurement must not queue behind the rest of this batch
        return accepted, running, first


# ---------------------------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--series", type=int, default=10_000)
    ap.add_argument("--reference-sample", type=int, default=200)
    ap.add_argument("--reference-budget", type=float, default=300.0, help="seconds at most per reference model")
    ap.add_argument("--upload-mb", type=int, default=1000)
    ap.add_argument("--upload-points", type=int, default=30_000)
    ap.add_argument("--equality-per-set", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="500 series, a sample of 16, a 100 MB upload")
    ap.add_argument("--name", default="batches", help="the table goes to bench/results/<name>.md")
    ap.add_argument("--scale-model", default=MODELS[1], choices=MODELS, help="the model of the scale-out runs")
    ap.add_argument("--scale-series", type=int, default=None, help="series of the scale-out runs (default --series)")
    ap.add_argument("--skip", default="",
                    help="comma-separated parts to skip: reference,throughput,scale,first,memory")
    args = ap.parse_args(argv)
    if args.quick:
        args.series, args.reference_sample, args.reference_budget, args.upload_mb = 500, 40, 60.0, 100
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    cores = os.cpu_count() or 1
    load_start = os.getloadavg()
    by_set = build_series(args.series)
    total = sum(len(v) for v in by_set.values())
    frames = {name: (SETS[name], frame_of(items)) for name, items in by_set.items()}
    rng = np.random.default_rng(0)
    everything = [item for items in by_set.values() for item in items]
    sample = [everything[i] for i in np.sort(rng.choice(len(everything), size=min(args.reference_sample,
                                                                                 len(everything)), replace=False))]
    notes: list[str] = []
    rows: list[list[object]] = []
    print(f"{total} series; load {load_start[0]:.2f}", flush=True)

    with c.temp_dir("bench-batches-") as tmp:
        ours: dict[str, Rate] = {}
        ref: dict[str, Rate] = {}
        if "reference" not in skip:
            ref = reference(sample, cores, args.reference_budget)
        if "throughput" not in skip:
            with service(tmp, cores, "throughput") as svc:
                for model in MODELS:
                    web_cpu0 = c.tree_cpu_seconds(svc.server.process.pid)
                    wall, submitted, cpu = run_batches(svc, frames, model)
                    cpu += c.tree_cpu_seconds(svc.server.process.pid) - web_cpu0
                    ours[model] = Rate(total / wall / cores, total / cpu, total)
                    compared, equal = same_as_single(svc, submitted, frames, model, args.equality_per_set)
                    print(model, wall, cpu, compared, equal, flush=True)
                    rows.append([f"{model}: batch of {total:,} series via gunicorn + jobs worker ({cores} "
                                 f"processes): {wall:.0f} s, {cpu:.0f} CPU s (workers and web, "
                                 f"{cpu / (wall * cores):.0%} of {cores} cores)",
                                 f"{ours[model].per_core:.2f}", f"{ours[model].per_cpu:.2f}", "", ""])
                    rows.append([f"{model}: batch forecast == POST /forecast, sampled series", f"{equal}/{compared}",
                                 "", "", "met" if equal == compared else "MISSED"])
        for name, rate in ref.items():
            label = (f"{name}, in-process, same sample" if name in MODELS else f"statsforecast {name}")
            rows.append([f"{label} ({rate.finished} of the sample's {len(sample)} series within "
                         f"{args.reference_budget:g} s)", f"{rate.per_core:.3f}", f"{rate.per_cpu:.3f}", "", ""])
        if ours and ref:
            for model, anchor, target in ((MODELS[0], "Comb (mean of 3)", "model-1 batch faster than the "
                                           "statsforecast combination"),
                                          (MODELS[1], "AutoETS", "model-2 batch faster than statsforecast AutoETS")):
                by_wall = ours[model].per_core / ref[anchor].per_core
                by_cpu = ours[model].per_cpu / ref[anchor].per_cpu
                rows.append([target, f"{by_wall:.1f}x", f"{by_cpu:.1f}x", "> 1x",
                             "met" if min(by_wall, by_cpu) > 1 else "MISSED"])

        if "scale" not in skip:
            # Every batch is queued before the workers start, and the clock runs from their start: what is measured
            # is the workers, not the client encoding 9,000 series' CSV on the same two cores (which a real client
            # does on its own machine). Linux groups a session's processes for the scheduler (autogroup): on a busy
            # machine the processes of one `jobs worker --processes 2` share one session's CPU, as much as a single
            # process gets. Two consumers started on their own (as two service units would be) are measured beside.
            # Each worker process's wall time is on a CPU, runnable but kept waiting for one (the machine's
            # other load: not ours to fix), or idle (no work to take: the queue's and the database's part).
            # The wall a run would take without the wait is wall - wait / workers.
            walls, cpus, net = {}, {}, {}
            scale_sets = by_set if args.scale_series is None else build_series(args.scale_series)
            scale_frames = {name: (SETS[name], frame_of(items)) for name, items in scale_sets.items()}
            scale_total = sum(len(items) for items in scale_sets.values())
            scale_label = args.scale_model.replace("forecast-", "")
            for label, processes, consumers in (("1 process", 1, 1), ("--processes 2", 2, 1),
                                                ("2 consumers of 1 process", 1, 2)):
                with service(tmp, processes, f"scale-{processes}-{consumers}", consumers=consumers,
                             workers_now=False) as svc:
                    walls[label], _, cpus[label] = run_batches(svc, scale_frames, args.scale_model,
                                                               queued_first=True)
                    on1, wait1 = svc.worker_sched_seconds()
                    on0 = wait0 = 0.0
                    print("scale", label, walls[label], cpus[label], on1 - on0, wait1 - wait0, flush=True)
                workers = processes * consumers
                on, wait = on1 - on0, wait1 - wait0
                idle = max(0.0, walls[label] * workers - on - wait)
                net[label] = walls[label] - wait / workers
                rows.append([f"{scale_label}, {scale_total:,} series, job workers: {label}: {walls[label]:.1f} s, "
                             f"{cpus[label]:.0f} CPU s; per worker process: {on / workers:.1f} s on a CPU, "
                             f"{wait / workers:.1f} s waiting for a CPU, {idle / workers:.1f} s idle",
                             f"{scale_total / walls[label]:.2f} series/s", "", "", ""])
            for label in ("--processes 2", "2 consumers of 1 process"):
                ratio = walls["1 process"] / walls[label]
                rows.append([f"scale-out: throughput of {label} / of 1 process", f"{ratio:.2f}x", "", ">= 1.8x",
                             "met" if ratio >= 1.8 else "MISSED"])
                ratio = net["1 process"] / net[label]
                rows.append([f"scale-out net of the waits for a CPU (wall - wait / workers): {label} / 1 process",
                             f"{ratio:.2f}x", "", ">= 1.8x", "met" if ratio >= 1.8 else "MISSED"])

        if "first" not in skip:
            # One batch has one frequency: the monthly series (M1 and Tourism), repeated under new ids up to
            # --series. What the first progress waits for is the upload, the split and one chunk, which the
            # count and the series' kind decide, not whether two series are alike.
            monthly = [item for name, items in by_set.items() if SETS[name].data_frequency == "Monthly"
                       for item in items]
            ds = monthly[0].ds
            repeated = [Item(f"{monthly[i % len(monthly)].id}-c{i // len(monthly)}", ds,
                             monthly[i % len(monthly)].history) for i in range(total)]
            frame = frame_of(repeated)
            with service(tmp, cores, "first") as svc:
                # A running service: its workers have started and warmed up, as they have long before a user
                # submits (one series of each model through the whole path first).
                with client_for(svc) as client:
                    for model in MODELS:
                        client.wait_batch(client.submit_batch(frame_of(repeated[:1]), ds.horizon,
                                                              frequency=ds.data_frequency, model=model).id)
                for model in MODELS:
                    accepted, running, first = first_progress(svc, frame, ds, model)
                    print("first", model, accepted, running, first, flush=True)
                    rows.append([f"{model}: first progress.done > 0 after submitting {total:,} monthly series "
                                 f"as CSV (202 after {accepted:.2f} s, split and running after {running:.2f} s)",
                                 f"{first:.2f} s", "", "<= 2 s",
                                 "met" if first <= 2 else "MISSED"])

        if "memory" not in skip:
            with service(tmp, cores, "memory") as svc:
                mem = memory_run(svc, tmp, args.upload_mb, args.upload_points)
            print("memory", mem, flush=True)
            rows.append([f"web process VmHWM: at start / after a {mem['upload_bytes'] / 1e9:.2f} GB upload "
                         f"({mem['series']:,} series of {args.upload_points:,} points, {mem['upload_s']:.0f} s) / "
                         f"after downloading its results ({mem['download_bytes'] / 1e6:.1f} MB CSV)",
                         f"{mem['web_hwm_start']:.0f} / {mem['web_hwm_after_upload']:.0f} / "
                         f"{mem['web_hwm_end']:.0f} MiB", "", "< 120 MiB",
                         "met" if mem["web_hwm_end"] < 120 else "MISSED"])
            rows.append([f"job worker's largest process VmHWM: started and idle / after splitting and computing "
                         f"that batch (computed in {mem['compute_s']:.0f} s)",
                         f"{mem['worker_hwm_start']:.0f} / {mem['worker_hwm']:.0f} MiB", "", "", ""])

    load_end = os.getloadavg()
    notes += [
        f"{total:,} series from every development set as rolling origins, one batch per set, CSV upload with "
        "forecast_client; SQLite database and its job queue; gunicorn 1 web worker; `jobs worker --processes N` "
        f"(this run at niceness {os.nice(0)}).",
        f"Reference: statsforecast on a fixed stratified sample of {len(sample)} of the same series, in {cores} "
        "processes; the combination's cost is the sum of its three models'.",
        f"Load average (1 min) at start / end: {load_start[0]:.2f} / {load_end[0]:.2f}: the machine is shared, "
        "throughput figures move with it.",
    ]
    c.write_table(args.name, "Batches: throughput, scale-out, memory, first progress", notes,
                  ["measure", "series/s/core (or value)", "series per CPU s", "target", "status"], rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
