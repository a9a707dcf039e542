"""A CSV batch sent as a form upload (multipart/form-data, as ``curl -F file=@stores.csv`` sends it) through a real
gunicorn: the web process's peak memory (VmHWM of gunicorn's worker process) after the form upload, beside the
same file sent as the body itself (text/csv) and a reference workload of small requests, all in the same run.
The form is decoded as it streams, so its peak should be the raw upload's, not grow with the file.

    python bench/batch_form_upload.py [--megabytes 1024] [--points 300]

No job worker runs: only the web side is measured (each batch is deleted afterwards). The form upload goes
first, so the body upload's peak cannot hide it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c  # noqa: E402
from batch_upload import file_chunks, request, vm_hwm_mib, write_csv  # noqa: E402

BOUNDARY = "benchformboundary7MA4YWxkTrZu0gW"
HEAD = (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"stores.csv\"\r\n"
        "Content-Type: text/csv\r\n\r\n").encode()
TAIL = f"\r\n--{BOUNDARY}--\r\n".encode()


def form_chunks(path: Path) -> Iterator[bytes]:
    yield HEAD
    yield from file_chunks(path)
    yield TAIL


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=1024)
    parser.add_argument("--points", type=int, default=300, help="rows per series")
    args = parser.parse_args()
    query = "/batches?forecast_horizon=3&data_frequency=Hours&forecast_frequency=Hours"
    with c.temp_dir("bench-batch-form-upload-") as tmp:
        csv_path = tmp / "upload.csv"
        size, series = write_csv(csv_path, args.megabytes, args.points)
        with c.database("sqlite", tmp) as database_url:
            key = c.create_key(database_url, permissions="read,write,delete")
            with c.gunicorn(database_url, tmp, workers=1, WEB_CONCURRENCY="1") as server:
                [worker] = server.worker_pids()
                for _ in range(200):
                    request(server.url + "/verify", key)
                reference = vm_hwm_mib(worker)
                rows = []
                for name, chunks, headers in (
                    ("form upload (multipart/form-data)", form_chunks(csv_path),
                     {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}",
                      "Content-Length": str(len(HEAD) + size + len(TAIL))}),
                    ("CSV as the body (text/csv)", file_chunks(csv_path),
                     {"Content-Type": "text/csv", "Content-Length": str(size)}),
                ):
                    started = time.perf_counter()
                    answer = request(server.url + query, key, "POST", chunks, headers)
                    seconds = time.perf_counter() - started
                    assert answer["progress"]["total"] == series, answer
                    rows.append([f"peak after the {name}", f"{vm_hwm_mib(worker):,.0f} MiB"])
                    rows.append([f"{name}: wall time (answered 202)",
                                 f"{seconds:,.1f} s ({size / 2**20 / seconds:,.0f} MiB/s)"])
                    request(server.url + f"/batches/{answer['id']}", key, "DELETE")
    c.write_table(
        "batch_form_upload",
        "Batch CSV as a form upload: the web process's peak memory",
        [f"one gunicorn worker process, SQLite; the file: {size / 2**20:,.0f} MiB, {series:,} series of "
         f"{args.points} rows; no job worker running",
         "peak = VmHWM of gunicorn's worker process (the forecast pool's processes are not counted), read after "
         "each upload in turn: the form upload first, then the same file as the body",
         "reference: the same process after 200 GET /verify, before either upload",
         f"command: python bench/batch_form_upload.py --megabytes {args.megabytes} --points {args.points}"],
        ["measure", "value"],
        [["peak after 200 GET /verify (reference)", f"{reference:,.0f} MiB"], *rows],
    )


if __name__ == "__main__":
    main()
