"""What the web process and the admin CLI cost before any forecast runs: `keys list` wall time and the
gunicorn web process's peak memory, for this code and for a reference commit measured in the same run.

    python bench/footprint.py [--reference REV] [--runs 7]

The reference (by default the last commit before the web process stopped importing the numeric stack) is
checked out into a temporary git worktree and run with the same virtualenv, database kind and workload.
Peak memory is VmHWM of gunicorn's worker process (the one that serves HTTP), not of the forecast workers
it spawns, after a fixed workload: 200 GET /verify, 20 POST /forecast of 1,000 points, 2 of 100,000.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c  # noqa: E402

DEFAULT_REFERENCE = "3e9fd9e"


def _env(root: Path, database_url: str) -> dict[str, str]:
    env = c.base_env(DATABASE_URL=database_url, FORECAST_WORKERS="1")
    env["PYTHONPATH"] = str(root)
    env["BENCH_APP_ROOT"] = str(root)
    return env


def _flask(root: Path, env: dict[str, str], *args: str) -> str:
    result = subprocess.run([str(c.VENV_BIN / "flask"), "--app", "wsgi", *args], cwd=root, env=env,
                            capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"flask {' '.join(args)} failed in {root}:\n{result.stderr[-2000:]}")
    return result.stdout


def keys_list_seconds(root: Path, env: dict[str, str], runs: int) -> tuple[list[float], list[float]]:
    """Wall and CPU (user + system) seconds of each run; CPU moves far less with the machine's load."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        _flask(root, env, "keys", "list")
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return walls, cpus


def _series(n: int) -> dict:
    start = datetime(2020, 1, 1, tzinfo=UTC)
    return {
        "series": [{
            "timestamps": [(start + timedelta(hours=i)).strftime("%Y-%m-%dT%H:%M:%S") for i in range(n)],
            "values": [float(100 + (i % 24) * 3 + (i % 7)) for i in range(n)],
        }],
        "forecast_horizon": 24, "data_frequency": "Hours", "forecast_frequency": "Hours",
    }


def _call(url: str, key: str, body: dict | None = None) -> int:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method="POST" if data else "GET",
                                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            response.read()
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmHWM for {pid}")


def web_peak_mib(root: Path, env: dict[str, str], key: str, tmp: Path, name: str) -> tuple[float, float, float]:
    """Peaks in MiB: right after start-up, after the /verify and 1,000-point requests, after the two
    100,000-point requests too."""
    server = c.Gunicorn(env, tmp / f"{name}.log")
    try:
        server.wait_ready()
        [worker] = server.worker_pids()
        idle = _peak_kib(worker) / 1024
        small, large = _series(1000), _series(100_000)
        statuses = [_call(server.url + "/verify", key) for _ in range(200)]
        statuses += [_call(server.url + "/forecast", key, small) for _ in range(20)]
        ordinary = _peak_kib(worker) / 1024
        statuses += [_call(server.url + "/forecast", key, large) for _ in range(2)]
        if any(s != 200 for s in statuses):
            raise RuntimeError(f"{name}: unexpected statuses {sorted(set(statuses))}\n{server.log()}")
        return idle, ordinary, _peak_kib(worker) / 1024
    finally:
        server.stop()


def measure(root: Path, label: str, runs: int, tmp: Path) -> dict:
    url = f"sqlite:///{tmp / (label + '.sqlite3')}"
    env = _env(root, url)
    _flask(root, env, "db", "upgrade")
    out = _flask(root, env, "keys", "create", "--permissions", "read", "--name", "bench",
                 "--per-minute", c.HUGE, "--per-hour", c.HUGE, "--per-day", c.HUGE, "--json")
    key = json.loads(out.strip().splitlines()[-1])["key"]
    walls, cpus = keys_list_seconds(root, env, runs)
    idle, ordinary, peak = web_peak_mib(root, env, key, tmp, label)
    return {"label": label, "keys_list_s": c.median(walls), "keys_list_max_s": max(walls),
            "keys_list_cpu_s": c.median(cpus), "web_idle_mib": idle, "web_ordinary_mib": ordinary,
            "web_peak_mib": peak}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reference", default=DEFAULT_REFERENCE, help="git revision to compare against")
    ap.add_argument("--runs", type=int, default=7, help="keys list runs per tree (the median is quoted)")
    ap.add_argument("--output", default=str(c.RESULTS / "footprint.md"))
    args = ap.parse_args(argv)
    rows = []
    with c.temp_dir("bench-footprint-") as tmp:
        reference_root = tmp / "reference"
        subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(reference_root), args.reference],
                       cwd=c.ROOT, check=True, capture_output=True, timeout=60)
        try:
            for root, label in ((c.APP_ROOT, "this code"), (reference_root, f"reference {args.reference}")):
                result = measure(root, label.split()[0], args.runs, tmp)
                result["label"] = label
                rows.append(result)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(reference_root)], cwd=c.ROOT,
                           capture_output=True, timeout=60)
    table = [[r["label"], f"{r['keys_list_s']:.2f} s (max {r['keys_list_max_s']:.2f})", f"{r['keys_list_cpu_s']:.2f} s",
              f"{r['web_idle_mib']:.0f} MiB", f"{r['web_ordinary_mib']:.0f} MiB", f"{r['web_peak_mib']:.0f} MiB"]
             for r in rows]
    text = c.write_table(
        "footprint", "Admin CLI and web-process footprint",
        [f"`keys list` wall and CPU (user + system) time: medians of {args.runs} runs (target <= 1.0 s wall on an "
         "idle machine; the CPU figure is what the wall time comes down to there). Web process: VmHWM of "
         "gunicorn's HTTP worker after start-up (forecast workers spawned, numpy loaded), after 200 GET /verify "
         "+ 20 POST /forecast of 1,000 points, and after 2 POST /forecast of 100,000 points (target <= 90 MiB)."],
        ["code", "keys list wall", "keys list CPU", "web process after start", "after 1,000-point forecasts",
         "after 100,000-point forecasts"], table)
    if Path(args.output) != c.RESULTS / "footprint.md":
        Path(args.output).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
