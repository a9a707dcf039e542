"""Prometheus remote write and GET /monitors/metrics under the hostile tester's loads: the web process's memory and
time, on this code and on a reference commit (a git worktree) in the same run.

Scenarios, each on a fresh SQLite service (gunicorn with 1 web process, FORECAST_WORKERS=1):

- ``unmatched label sets``: a write-only key of an account with no monitors sends ``--label-requests`` bodies of
  150 series x 100 labels of about 4,000 characters (about 3 MB snappy, 60 MB decoded), each label set new. The
  web process's RSS before and after, its peak (VmHWM), and each request's time.
- ``a million samples``: one body of 1,000,000 samples of one series a monitor takes (MAX_POINTS is 100,000). The
  reference judged them all; it is given ``--give-up`` seconds, then stopped.
- ``/monitors/metrics loop``: an account of ``--metrics-series`` series (10,000 per monitor, remote-written once,
  the database then copied for the reference), then two clients requesting its exposition back to back for
  ``--loop-seconds``. The first rendering's time, the web process's CPU share over the loop, and its peak.

Writes bench/results/hostile-remote-write.md.

    .venv/bin/python bench/hostile_remote_write.py [--baseline 6377270] [--metrics-series 100000]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c  # noqa: E402

from tests.support import remote_write_body as write_body  # noqa: E402

T0_MS = 1_767_225_600_000
# The checkout the fixes this suite measures started from: its app/monitors and app/web are those of their parent
# commit (4875b83).
BASELINE = "6377270"


def vm_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


class Service:
    def __init__(self, server: c.Gunicorn, url: str, keys: dict[str, str]) -> None:
        self.server, self.url, self.keys = server, server.url, keys
        self.database_url = url
        (self.pid,) = server.worker_pids()

    def mib(self, field: str) -> float:
        return vm_kib(self.pid, field) / 1024


@contextmanager
def service(tmp: Path, name: str, app_root: Path | None, database_file: Path | None = None) -> Iterator[Service]:
    run_dir = tmp / name
    run_dir.mkdir()
    with c.database("sqlite", run_dir, app_root) as url:
        if database_file is not None:
            copy_sqlite(database_file, Path(url.removeprefix("sqlite:///")))
        keys = {"empty": c.create_key(url, "write", app_root, account="acct-empty"),
                "owner": c.create_key(url, "read,write,admin", app_root, account="acct-owner")}
        with c.gunicorn(url, run_dir, workers=1, app_root=app_root, name="gunicorn", WEB_CONCURRENCY="1") as server:
            yield Service(server, url, keys)


def copy_sqlite(source: Path, dest: Path) -> None:
    """A SQLite database with its write-ahead log, if one was left."""
    for suffix in ("", "-wal", "-shm"):
        target = dest.with_name(dest.name + suffix)
        target.unlink(missing_ok=True)
        if source.with_name(source.name + suffix).exists():
            shutil.copyfile(source.with_name(source.name + suffix), target)


def post(svc: Service, key: str, body: bytes, timeout: float = 600) -> tuple[int, float]:
    import httpx

    started = time.perf_counter()
    answer = httpx.post(f"{svc.url}/api/v1/write", content=body, timeout=timeout, headers={
        "Authorization": f"Bearer {svc.keys[key]}", "Content-Type": "application/x-protobuf",
        "Content-Encoding": "snappy", "X-Prometheus-Remote-Write-Version": "0.1.0"})
    return answer.status_code, time.perf_counter() - started


def monitor(svc: Service, selector: str) -> None:
    import httpx

    answer = httpx.post(f"{svc.url}/monitors", timeout=60, headers={"Authorization": f"Bearer {svc.keys['owner']}"},
                        json={"name": selector, "data_frequency": "Minutes", "remote_write_selector": selector})
    if answer.status_code != 201:
        raise RuntimeError(f"creating a monitor answered {answer.status_code}: {answer.text[:300]}")


def unmatched_label_sets(svc: Service, requests: int) -> list[str]:
    start = svc.mib("VmRSS")
    seconds, statuses = [], set()
    for request in range(requests):
        body = write_body([({"__name__": f"junk_{request}_{s}",
                             **{f"l{i}": f"{request}-{s}-{i}-" + "x" * 4000 for i in range(99)}},
                            [(T0_MS, 1.0)]) for s in range(150)])
        status, took = post(svc, "empty", body)
        statuses.add(status)
        seconds.append(took)
    return [f"{requests} bodies of 150 series x 100 labels of ~4,000 chars ({len(body) / 1e6:.1f} MB each), "
            f"answered {', '.join(map(str, sorted(statuses)))}",
            f"{start:.0f} / {svc.mib('VmRSS'):.0f} / {svc.mib('VmHWM'):.0f}",
            f"{c.median(seconds):.2f} s a request"]


def million_samples(svc: Service, give_up: float) -> list[str]:
    monitor(svc, 'million{job="api"}')
    body = write_body([({"__name__": "million", "job": "api"},
                        [(T0_MS + i * 1000, float(i % 97)) for i in range(1_000_000)])])
    start = svc.mib("VmRSS")
    try:
        status, took = post(svc, "owner", body, timeout=give_up)
        outcome = f"answered {status} in {took:.2f} s"
    except Exception as exc:  # noqa: BLE001 - httpx's timeout: the reference is still judging
        outcome = f"no answer within {give_up:.0f} s ({type(exc).__name__}); the service was stopped"
    return [f"1,000,000 samples of one series ({len(body) / 1e6:.1f} MB)", outcome,
            f"{start:.0f} / {svc.mib('VmRSS'):.0f} / {svc.mib('VmHWM'):.0f}"]


def populate(svc: Service, series: int) -> None:
    per_monitor = 10_000
    for m in range((series + per_monitor - 1) // per_monitor):
        monitor(svc, f'fleet_{m}{{job="api"}}')
        count = min(per_monitor, series - m * per_monitor)
        body = write_body([({"__name__": f"fleet_{m}", "job": "api", "instance": f"host-{s:05d}.example.com:9100"},
                            [(T0_MS, 1.0 + s % 13)]) for s in range(count)])
        status, _ = post(svc, "owner", body)
        if status != 204:
            raise RuntimeError(f"populating answered {status}")


def metrics_loop(svc: Service, loop_seconds: float, clients: int = 2) -> list[str]:
    import httpx

    headers = {"Authorization": f"Bearer {svc.keys['owner']}"}
    start = svc.mib("VmRSS")
    began = time.perf_counter()
    first = httpx.get(f"{svc.url}/monitors/metrics", headers=headers, timeout=600)
    first_seconds = time.perf_counter() - began
    size = len(first.content)
    answered: list[float] = []
    stop = time.monotonic() + loop_seconds

    def client() -> None:
        with httpx.Client(timeout=600) as session:
            while time.monotonic() < stop:
                t = time.perf_counter()
                if session.get(f"{svc.url}/monitors/metrics", headers=headers).status_code == 200:
                    answered.append(time.perf_counter() - t)

    cpu = c.process_cpu_seconds(svc.pid)
    looped = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - looped
    share = (c.process_cpu_seconds(svc.pid) - cpu) / wall
    return [f"{size / 1e6:.0f} MB exposition: first rendering {first_seconds:.1f} s",
            f"{len(answered)} answered in {wall:.0f} s by {clients} clients (median {c.median(answered):.2f} s); "
            f"web process CPU {share:.0%} of the loop",
            f"{start:.0f} / {svc.mib('VmRSS'):.0f} / {svc.mib('VmHWM'):.0f}"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default=BASELINE, help="the reference commit (run in a git worktree)")
    ap.add_argument("--label-requests", type=int, default=12)
    ap.add_argument("--give-up", type=float, default=30.0, help="seconds the reference gets for a million samples")
    ap.add_argument("--metrics-series", type=int, default=100_000)
    ap.add_argument("--loop-seconds", type=float, default=60.0)
    args = ap.parse_args(argv)
    labels: list[list[str]] = []
    samples: list[list[str]] = []
    metrics: list[list[str]] = []
    with c.temp_dir("bench-hostile-rw-") as tmp, c.git_worktree(args.baseline) as tree:
        codes = (("this code", None), (f"reference {args.baseline}", tree))
        for name, root in codes:
            with service(tmp, f"labels-{len(labels)}", root) as svc:
                labels.append([name, *unmatched_label_sets(svc, args.label_requests)])
            with service(tmp, f"samples-{len(samples)}", root) as svc:
                samples.append([name, *million_samples(svc, args.give_up)])
        populated = tmp / "populated.sqlite3"
        with service(tmp, "populate", None) as svc:
            populate(svc, args.metrics_series)
            svc.server.stop()
            copy_sqlite(Path(svc.database_url.removeprefix("sqlite:///")), populated)
        for name, root in codes:
            with service(tmp, f"metrics-{len(metrics)}", root, populated) as svc:
                metrics.append([name, *metrics_loop(svc, args.loop_seconds)])
    mib = "web RSS MiB: start / end / peak (VmHWM)"
    extra = "\n".join([
        "## A million samples in one body", "",
        f"| code | body | outcome | {mib} |", "|---|---|---|---|",
        *("| " + " | ".join(row) + " |" for row in samples), "",
        f"## GET /monitors/metrics in a loop ({args.metrics_series:,} series)", "",
        f"| code | exposition | loop | {mib} |", "|---|---|---|---|",
        *("| " + " | ".join(row) + " |" for row in metrics)])
    c.write_table(
        "hostile-remote-write", "Remote write and /monitors/metrics under hostile loads: the web process",
        ["gunicorn with 1 web process (FORECAST_WORKERS=1), SQLite; each scenario on a fresh service, this code and "
         f"the reference commit {args.baseline} (a git worktree) in the same run.",
         "Unmatched label sets: the reference kept every label set's route (up to 100,000 an account); this code "
         "keeps only matched ones, at most 16 MiB an account and 64 MiB in all.",
         "A million samples: MAX_POINTS (100,000) caps a request's samples (413) on this code.",
         "/monitors/metrics: the reference rendered again a second after each rendering; this code serves one for "
         "ten times as long as it took, and the last one while it renders again."],
        ["code", "unmatched label sets", mib, "request time"], labels, extra=extra)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
