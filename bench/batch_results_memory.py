"""Batch results downloads: the web process's peak memory (VmHWM of the gunicorn worker) while results are
downloaded, three at once, as CSV and as JSON lines; and the upload scan's peak on distinct long ids.

Scenarios, each on a fresh SQLite service (gunicorn with 1 web process, `jobs worker --processes 2`):

- ``long ids``: the hostile tester's shape, 7 series whose CSV ``unique_id`` is ``--id-chars`` long, horizon
  100: results repeat the id on every row. The code under test refuses ids over 200 characters (400); with
  ``--baseline COMMIT`` the same upload is run on that commit, which accepted it.
- ``largest allowed``: ``--series`` series with 200-character ids (the limit), horizon 100, model 2: the
  largest results per series the service accepts, downloaded three at once as CSV, then as JSON lines.
- ``distinct ids``: an upload of ``--scan-ids`` distinct 200-character ids (one row each), the scan's cost;
  and the hostile tester's ``--long-scan-ids`` distinct 1,000,000-character ids (on the baseline too).

Target: the web process's peak under 200 MB for any results download (issue 44). Writes
bench/results/batch-results-memory.md.

    .venv/bin/python bench/batch_results_memory.py [--baseline 5eea8fa] [--series 2000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c  # noqa: E402

FIELDS = {"forecast_horizon": "100", "data_frequency": "Daily", "forecast_frequency": "Daily"}
TARGET_MIB = 200 * 1e6 / (1 << 20)


def vm_hwm_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Service:
    def __init__(self, server: c.Gunicorn, key: str) -> None:
        self.server, self.key, self.url = server, key, server.url
        self.pids = server.worker_pids()

    def web_hwm(self) -> float:
        return max(vm_hwm_mib(pid) for pid in self.pids)


@contextmanager
def service(tmp: Path, name: str, app_root: Path | None = None) -> Iterator[Service]:
    run_dir = tmp / name
    run_dir.mkdir()
    with c.database("sqlite", run_dir, app_root) as url:
        key = c.create_key(url, "read,write,delete", app_root)
        with c.gunicorn(url, run_dir, workers=1, app_root=app_root, name="gunicorn") as server:
            env = c.base_env(app_root, DATABASE_URL=url, FORECAST_WORKERS="1")
            with open(run_dir / "worker.log", "w") as log:
                worker = subprocess.Popen(
                    [str(c.VENV_BIN / "flask"), "--app", "wsgi", "jobs", "worker", "--processes", "2"],
                    cwd=env["BENCH_APP_ROOT"], env=env, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True)
                try:
                    yield Service(server, key)
                finally:
                    os.killpg(worker.pid, 15)
                    try:
                        worker.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        os.killpg(worker.pid, 9)
                        worker.wait()


def csv_upload(ids: list[str], points: int = 30) -> bytes:
    start = date(2026, 1, 1)
    stamps = [(start + timedelta(days=i)).isoformat() + "T00:00:00" for i in range(points)]
    parts = ["unique_id,timestamp,value\n"]
    for n, name in enumerate(ids):
        parts += [f"{name},{stamp},{20 + (i * 7 + n) % 11 + 0.1 * i}\n" for i, stamp in enumerate(stamps)]
    return "".join(parts).encode()


def submit(svc: Service, body: bytes, model: str = "forecast-model-1") -> tuple[int, str]:
    import httpx

    answer = httpx.post(svc.url + "/batches", params=FIELDS, content=body, timeout=600,
                        headers={"Authorization": f"Bearer {svc.key}", "Content-Type": "text/csv",
                                 "X-Model-Id": model})
    return answer.status_code, answer.json().get("id") or answer.json()["error"]["message"]


def wait_done(svc: Service, batch_id: str, most: float = 900) -> dict:
    import httpx

    deadline = time.monotonic() + most
    while time.monotonic() < deadline:
        body = httpx.get(f"{svc.url}/batches/{batch_id}", headers={"Authorization": f"Bearer {svc.key}"},
                         timeout=30).json()
        if body["status"] in ("done", "failed"):
            return body
        time.sleep(0.5)
    raise RuntimeError(f"batch {batch_id} not done within {most:g}s")


def download(svc: Service, batch_id: str, accept: str, at_once: int) -> tuple[int, float]:
    """``at_once`` concurrent downloads; bytes of one, and seconds for all."""
    import httpx

    sizes: list[int] = []

    def one() -> None:
        size = 0
        with httpx.stream("GET", f"{svc.url}/batches/{batch_id}/results", timeout=1800,
                          headers={"Authorization": f"Bearer {svc.key}", "Accept": accept}) as response:
            for piece in response.iter_bytes():
                size += len(piece)
        sizes.append(size)

    threads = [threading.Thread(target=one) for _ in range(at_once)]
    t = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return max(sizes), time.perf_counter() - t


def long_ids(svc: Service, id_chars: int, at_once: int) -> list[str]:
    start = svc.web_hwm()
    status, batch = submit(svc, csv_upload([f"{n}" + "L" * (id_chars - 1) for n in range(7)]))
    after_upload = svc.web_hwm()
    if status != 202:
        return [f"7 series, {id_chars:,}-character ids, horizon 100", f"refused: {status} ({batch[:90]})",
                f"{start:.0f} / {after_upload:.0f} / -", "met" if after_upload < TARGET_MIB else "not met"]
    wait_done(svc, batch)
    size, seconds = download(svc, batch, "text/csv", at_once)
    end = svc.web_hwm()
    return [f"7 series, {id_chars:,}-character ids, horizon 100",
            f"accepted; {at_once} CSV downloads of {size / 1e6:,.0f} MB at once ({seconds:.1f} s)",
            f"{start:.0f} / {after_upload:.0f} / {end:.0f}", "met" if end < TARGET_MIB else "not met"]


def largest(svc: Service, series: int, at_once: int) -> list[list[str]]:
    start = svc.web_hwm()
    status, batch = submit(svc, csv_upload([f"{n:06d}" + "L" * 194 for n in range(series)]), "forecast-model-2")
    if status != 202:
        raise RuntimeError(f"upload answered {status}: {batch}")
    done = wait_done(svc, batch)
    rows = []
    for accept, name in (("text/csv", "CSV"), ("application/x-ndjson", "JSON lines")):
        size, seconds = download(svc, batch, accept, at_once)
        end = svc.web_hwm()
        rows.append([f"{series:,} series, 200-character ids, horizon 100 ({done['progress']['done']:,} done)",
                     f"{at_once} {name} downloads of {size / 1e6:,.1f} MB at once ({seconds:.1f} s)",
                     f"{start:.0f} / - / {end:.0f}", "met" if end < TARGET_MIB else "not met"])
    return rows


def distinct_ids(svc: Service, count: int) -> list[str]:
    start = svc.web_hwm()
    body = csv_upload([f"{n:07d}" + "D" * 193 for n in range(count)], points=1)
    status, batch = submit(svc, body)
    end = svc.web_hwm()
    return [f"{count:,} distinct 200-character ids, one row each ({len(body) / 1e6:.1f} MB upload)",
            f"upload answered {status}", f"{start:.0f} / {end:.0f} / -", "met" if end < TARGET_MIB else "not met"]


def long_distinct_ids(svc: Service, count: int, chars: int) -> list[str]:
    """The hostile tester's upload-scan case: ``count`` distinct ids of ``chars`` characters, one row each,
    streamed (the web process gets it in pieces, as from a real client)."""
    import httpx

    def pieces() -> Iterator[bytes]:
        yield b"unique_id,timestamp,value\n"
        for n in range(count):
            yield f"{n:06d}".encode() + b"U" * (chars - 6) + b",2026-01-01T00:00:00,1\n"

    start = svc.web_hwm()
    answer = httpx.post(svc.url + "/batches", params=FIELDS, content=pieces(), timeout=1800,
                        headers={"Authorization": f"Bearer {svc.key}", "Content-Type": "text/csv"})
    end = svc.web_hwm()
    size = count * (chars + 23) / 1e6
    return [f"{count:,} distinct {chars:,}-character ids, one row each ({size:,.0f} MB upload, streamed)",
            f"upload answered {answer.status_code}", f"{start:.0f} / {end:.0f} / -",
            "met" if end < TARGET_MIB else "not met"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", help="a commit to run the long-ids scenario on as well")
    ap.add_argument("--id-chars", type=int, default=100_000)
    ap.add_argument("--series", type=int, default=2000)
    ap.add_argument("--scan-ids", type=int, default=100_000)
    ap.add_argument("--at-once", type=int, default=3)
    ap.add_argument("--long-scan-ids", type=int, default=300, help="distinct 1,000,000-character ids uploaded")
    args = ap.parse_args(argv)
    rows: list[list[str]] = []
    with c.temp_dir("bench-results-memory-") as tmp:
        if args.baseline:
            with c.git_worktree(args.baseline) as tree, service(tmp, "baseline", tree) as svc:
                rows.append([f"baseline {args.baseline}", *long_ids(svc, args.id_chars, 1)])
            with c.git_worktree(args.baseline) as tree, service(tmp, "baseline-scan", tree) as svc:
                rows.append([f"baseline {args.baseline}",
                             *long_distinct_ids(svc, args.long_scan_ids, 1_000_000)])
        with service(tmp, "current") as svc:
            rows.append(["this code", *long_ids(svc, args.id_chars, args.at_once)])
        with service(tmp, "largest") as svc:
            rows += [["this code", *row] for row in largest(svc, args.series, args.at_once)]
        with service(tmp, "scan") as svc:
            rows.append(["this code", *distinct_ids(svc, args.scan_ids)])
            rows.append(["this code", *long_distinct_ids(svc, args.long_scan_ids, 1_000_000)])
    c.write_table(
        "batch-results-memory", "Batch results downloads: the web process's peak memory",
        ["gunicorn with 1 web process (FORECAST_WORKERS=1), `jobs worker --processes 2`, SQLite; VmHWM of the "
         "gunicorn worker process at start / after the upload / after the downloads (MiB).",
         f"Target: under {TARGET_MIB:.0f} MiB (200 MB) for any results download.",
         "The baseline's long-ids run downloads once (the issue measured 2.69 GB for one download of 900 KB ids, "
         "5.5 GB for three)."],
        ["code", "batch", "what happened", "web VmHWM MiB: start / upload / downloads", "target"], rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
