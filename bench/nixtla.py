"""What the Nixtla-compatible routes cost, driven by Nixtla's own client, here and at a reference commit, in one run.

    python bench/nixtla.py [--reference REV] [--reps N] [--quick]

One gunicorn per checkout (FORECAST_WORKERS=1, SQLite keys), each case sent to one then the other, so both see
the same load:

- ``NixtlaClient.forecast`` on 3 hourly series of 336 points, h=24: plain, and with ``add_history=True`` (the
  in-sample call, POST /v2/cross_validation with ``full_history``); the ratio is the cost of add_history.
- ``NixtlaClient.cross_validation`` on one hourly series of 2,000 points, h=24: 10 and 50 windows, with 1 level and
  with 20 levels (levels must not multiply the fits).
- The refusals that must come before the work: a zstd body of 230,000 series of 10 points (POST /v2/forecast), and
  a cross-validation over the fits cap; the time to the answer and its status.

Without --quick the table is written to bench/results/nixtla.md. The reference (default: the commit before the
Nixtla routes' caps) runs each case once, with a timeout: its slow cases are what the caps fixed.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from contextlib import ExitStack  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c  # noqa: E402

# This script's name is the client package's: with bench/ on the path, "import nixtla" would find the script.
_BENCH = str(Path(__file__).resolve().parent)
sys.path[:] = [entry for entry in sys.path if entry not in ("", ".", _BENCH) and Path(entry).resolve() != Path(_BENCH)]

REFERENCE = "6377270"  # the routes before add_history's windows, the caps and one fit for every level
LEVELS_20 = [float(level) for level in range(60, 99, 2)]
REFERENCE_TIMEOUT = 240.0


def hourly(series: int, length: int) -> Any:
    import pandas as pd

    frames = [pd.DataFrame({"unique_id": f"h{n}", "ds": pd.date_range("2024-01-01", periods=length, freq="h"),
                            "y": [round(50 + 10 * n + 8 * math.sin(2 * math.pi * i / 24)
                                        + 3 * math.sin(2 * math.pi * i / 168) + (i * 7 % 5), 2)
                                  for i in range(length)]}) for n in range(series)]
    return pd.concat(frames, ignore_index=True)


def timed(call: Callable[[], Any], timeout: float | None = None) -> tuple[float, str]:
    """Seconds to the answer and what it was ("ok", or the status the client raised)."""
    from nixtla._http import ApiError

    started = time.perf_counter()
    try:
        call()
        outcome = "ok"
    except ApiError as exc:
        outcome = f"{exc.status_code}"
    except Exception as exc:  # noqa: BLE001 - a timeout or a reset is an outcome to report
        outcome = type(exc).__name__
    return time.perf_counter() - started, outcome


def huge_body_call(url: str, key: str, timeout: float) -> Callable[[], Any]:
    import requests
    import zstandard

    count = 230_000
    # within MAX_BODY_BYTES once decompressed (about 8 MB), so the routes' own checks are what answers
    body = json.dumps({"series": {"y": [1] * (10 * count), "sizes": [10] * count,
                                  "start_datetime": ["2024-01-01"] * count}, "freq": "h", "h": 4},
                      separators=(",", ":"))
    wire = zstandard.ZstdCompressor(level=19).compress(body.encode())

    def call() -> Any:
        answer = requests.post(f"{url}/v2/forecast", data=wire, timeout=timeout, headers={
            "Authorization": f"Bearer {key}", "Content-Type": "application/json", "Content-Encoding": "zstd"})
        if answer.status_code != 200:
            from nixtla._http import ApiError

            raise ApiError(status_code=answer.status_code, body=answer.text)
        return answer

    return call


def cases(url: str, key: str, timeout: float) -> list[tuple[str, Callable[[], Any]]]:
    from nixtla import NixtlaClient

    client = NixtlaClient(api_key=key, base_url=url, max_retries=1, timeout=timeout)
    three = hourly(3, 336)
    long = hourly(1, 2000)
    over = hourly(21, 100)
    return [
        ("forecast, 3 hourly series of 336 points, h=24", lambda: client.forecast(three, h=24, freq="h")),
        ("same, add_history=True", lambda: client.forecast(three, h=24, freq="h", add_history=True)),
        ("cross_validation, 1 series of 2,000 points, 10 windows, 1 level",
         lambda: client.cross_validation(long, h=24, freq="h", n_windows=10, level=[80])),
        ("same, 20 levels", lambda: client.cross_validation(long, h=24, freq="h", n_windows=10, level=LEVELS_20)),
        ("cross_validation, 1 series of 2,000 points, 50 windows, 1 level",
         lambda: client.cross_validation(long, h=24, freq="h", n_windows=50, level=[80])),
        ("same, 20 levels", lambda: client.cross_validation(long, h=24, freq="h", n_windows=50, level=LEVELS_20)),
        ("cross_validation over the fits cap (21 series x 50 windows, 20 levels)",
         lambda: client.cross_validation(over, h=1, freq="h", n_windows=50, level=LEVELS_20)),
        ("zstd body of 230,000 series of 10 points", huge_body_call(url, key, timeout)),
    ]


def measure(servers: list[tuple[str, str, int, float, set[int]]]) -> list[list[tuple[float, str]]]:
    """Each case on every server in turn (url, key, reps, timeout, cases skipped), so all see the same load."""
    plans = [cases(url, key, timeout) for url, key, _, timeout, _ in servers]
    out: list[list[tuple[float, str]]] = [[] for _ in servers]
    for index in range(len(plans[0])):
        for number, (_, _, reps, _, skip) in enumerate(servers):
            if index in skip:
                out[number].append((float("nan"), "not run"))
                continue
            runs = [timed(plans[number][index][1]) for _ in range(reps)]
            out[number].append((c.median([seconds for seconds, _ in runs]), runs[-1][1]))
    return out


def main() -> None:
    import logging

    logging.getLogger("nixtla").setLevel(logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", default=REFERENCE, help="the commit to measure beside this checkout")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one rep, no reference, no results file")
    args = parser.parse_args()
    reps = 1 if args.quick else args.reps
    c.CODE_LINE = c.describe_code()
    with ExitStack() as stack:
        tmp = stack.enter_context(c.temp_dir("bench-nixtla-"))
        url_db = stack.enter_context(c.database("sqlite", tmp))
        server = stack.enter_context(c.gunicorn(url_db, tmp, workers=1, name="here"))
        servers = [(server.url, c.create_key(url_db), reps, 600.0, set())]
        if not args.quick:
            tree = stack.enter_context(c.git_worktree(args.reference))
            ref_tmp = stack.enter_context(c.temp_dir("bench-nixtla-ref-"))
            ref_db = stack.enter_context(c.database("sqlite", ref_tmp, app_root=tree))
            ref_server = stack.enter_context(c.gunicorn(ref_db, ref_tmp, workers=1, name="reference", app_root=tree))
            # 50 windows x 20 levels (and the capped call, 20 times more) ran for minutes there: the 10-window pair
            # shows the same multiplication
            servers.append((ref_server.url, c.create_key(ref_db, app_root=tree), 1, REFERENCE_TIMEOUT, {5, 6}))
        measured = measure(servers)
    here = measured[0]
    reference = measured[1] if len(measured) > 1 else None
    names = [name for name, _ in cases("http://127.0.0.1:1", "x", 1.0)]
    rows = []
    for index, name in enumerate(names):
        seconds, outcome = here[index]
        row: list[object] = [name, f"{seconds:.2f}", outcome]
        if reference is not None:
            ref_seconds, ref_outcome = reference[index]
            row += ["n/a" if ref_seconds != ref_seconds else f"{ref_seconds:.2f}", ref_outcome]
        rows.append(row)
    ratio = here[1][0] / here[0][0]
    levels_ratio = here[5][0] / here[4][0]
    notes = [
        f"Median of {reps} calls here; the reference ({args.reference}) once, each call timing out after "
        f"{REFERENCE_TIMEOUT:g} s.",
        f"add_history / plain forecast here: {ratio:.2f}x (the target: within 3x).",
        f"50 windows, 20 levels / 1 level here: {levels_ratio:.2f}x (one fit per window answers every level).",
        "Status: ok, or the HTTP status the call got (400 for a cap, 429 for a rate limit).",
    ]
    header = ["call", "here (s)", "here"] + ([f"{args.reference} (s)", args.reference] if reference else [])
    if args.quick:
        print("\n".join(notes))
        for row in rows:
            print(" | ".join(str(v) for v in row))
        return
    c.write_table("nixtla", "Nixtla-compatible routes: the cost of a call", notes, header, rows)


if __name__ == "__main__":
    main()
