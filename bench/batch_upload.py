"""A CSV batch upload through a real gunicorn: the web process's peak memory (VmHWM of gunicorn's worker
process) after a large upload, beside the same figure after a reference workload of small requests in the
same run, and the upload's wall time. The web process streams the upload into the database in 8 MiB pieces,
so its peak should not grow with the file.

    python bench/batch_upload.py [--megabytes 1024] [--points 300]

No job worker runs: only the web side is measured (the batch is deleted afterwards).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c  # noqa: E402


def vm_hwm_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def write_csv(path: Path, megabytes: int, points: int) -> tuple[int, int]:
    """A long-format CSV of about ``megabytes``; returns (bytes, series)."""
    target = megabytes * 1024 * 1024
    written = series = 0
    with open(path, "w") as out:
        out.write("unique_id,timestamp,value\n")
        while written < target:
            rows = [f"series-{series:06d},2025-{1 + i // 28 % 12:02d}-{1 + i % 28:02d}T{i // 336 % 24:02d}:00:00,"
                    f"{(series * 7 + i * 13) % 1000 / 10}\n" for i in range(points)]
            block = "".join(rows)
            out.write(block)
            written += len(block)
            series += 1
    return path.stat().st_size, series


def request(url: str, key: str, method: str = "GET", data: object = None,
            headers: dict[str, str] | None = None) -> dict:
    req = urllib.request.Request(url, method=method, data=data,  # type: ignore[arg-type]
                                 headers={"Authorization": f"Bearer {key}", **(headers or {})})
    with urllib.request.urlopen(req, timeout=3600) as answer:
        body = answer.read()
        return json.loads(body) if body else {}


def file_chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as source:
        while block := source.read(1 << 20):
            yield block


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=1024)
    parser.add_argument("--points", type=int, default=300, help="rows per series")
    args = parser.parse_args()
    with c.temp_dir("bench-batch-upload-") as tmp:
        csv_path = tmp / "upload.csv"
        size, series = write_csv(csv_path, args.megabytes, args.points)
        with c.database("sqlite", tmp) as database_url:
            key = c.create_key(database_url, permissions="read,write,delete")
            with c.gunicorn(database_url, tmp, workers=1, WEB_CONCURRENCY="1") as server:
                [worker] = server.worker_pids()
                for _ in range(200):
                    request(server.url + "/verify", key)
                reference = vm_hwm_mib(worker)
                started = time.perf_counter()
                answer = request(server.url + "/batches?forecast_horizon=3&data_frequency=Hours&forecast_frequency"
                                 "=Hours", key, "POST", file_chunks(csv_path),
                                 {"Content-Type": "text/csv", "Content-Length": str(size)})
                seconds = time.perf_counter() - started
                peak = vm_hwm_mib(worker)
                assert answer["progress"]["total"] == series, answer
                request(server.url + f"/batches/{answer['id']}", key, "DELETE")
    c.write_table(
        "batch_upload",
        "Batch CSV upload: the web process's peak memory",
        [f"one gunicorn worker process, SQLite; the upload: {size / 2**20:,.0f} MiB, {series:,} series of "
         f"{args.points} rows; no job worker running",
         "peak = VmHWM of gunicorn's worker process (the forecast pool's processes are not counted)",
         "reference: the same process after 200 GET /verify, before the upload",
         f"command: python bench/batch_upload.py --megabytes {args.megabytes} --points {args.points}"],
        ["measure", "value"],
        [["peak after 200 GET /verify (reference)", f"{reference:,.0f} MiB"],
         ["peak after the upload", f"{peak:,.0f} MiB"],
         ["upload wall time (answered 202)", f"{seconds:,.1f} s ({size / 2**20 / seconds:,.0f} MiB/s)"]],
    )


if __name__ == "__main__":
    main()
