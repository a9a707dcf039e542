"""Bounded load test on loopback: nginx (TLS, self-signed) in front of gunicorn (default config).

    .venv/bin/python bench/load.py [--seconds 60] [--clients 50]

Starts its own throwaway SQLite database, gunicorn (gunicorn.conf.py as shipped: one worker process, 32 threads,
forecast workers = cores) and nginx from nginx/forecast.conf.template, all on 127.0.0.1. The clients are threads
with one requests.Session each, in this process (separate from the server's processes). Each client loops for
--seconds, picking GET /verify or POST /forecast (an hourly series of 500 points, horizon 24, X-Model-Id 1-4) at
random, with a key drawn from: a high-limit key, several keys with ordinary limits (the Free tier,
10/minute) so that 429s happen, and rarely an unknown key (401). After a 429 or a 500 with Retry-After a
client backs off 0.5 s.

Alongside, one more client (bench/loadgen.py --mode early-answers, its own process) keeps one connection
straight to gunicorn, as an app on a PaaS is called, and POSTs bodies of 70 B to 24 KiB on a key limited to 5 a
minute: nearly every answer is a 429 given before the body was read. Any of its requests not answered within
2.5 s on that connection (stalled, or dropped at the keep-alive timeout) fails the run.

After the run gunicorn is stopped gracefully (SIGTERM) and the usage counts are read back with
`flask --app wsgi keys list --json`: their sum must equal the responses the clients got with real keys
(every status but 401 counts). Statuses other than 200/429 for real keys fail the run, except 500 with
Retry-After (forecast queue saturated), counted separately. Writes bench/results/load.md and prints it.
Exit status 0 when every check holds.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
VENV_BIN = Path(sys.executable).parent
MODELS = ("forecast-model-1", "forecast-model-2", "forecast-model-3", "forecast-model-4")
ORDINARY_KEYS = 4
UNKNOWN_KEY = "ak_" + "0" * 64
HIGH_LIMIT = "10000000"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_env(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in {"DATABASE_URL", "REDIS_URL", "WEB_CONCURRENCY", "GUNICORN_THREADS", "BIND", "PORT"}}
    env.update({
        "DATABASE_URL": f"sqlite:///{workdir / 'keys.sqlite3'}",
        "TRUSTED_PROXIES": "1",
        "REQUIRE_HTTPS": "1",
        "LOG_LEVEL": "WARNING",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT),
    })
    return env


def flask_cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([str(VENV_BIN / "flask"), "--app", "wsgi", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"flask {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def create_key(env: dict[str, str], *limits: str) -> str:
    return json.loads(flask_cli(env, "keys", "create", "--permissions", "read", *limits, "--json"))["key"]


def self_signed(workdir: Path) -> tuple[Path, Path]:
    cert, key = workdir / "tls.crt", workdir / "tls.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    return cert, key


def nginx_version(nginx: str) -> tuple[int, ...]:
    shown = subprocess.run([nginx, "-v"], capture_output=True, text=True).stderr
    found = re.search(r"nginx/(\d+)\.(\d+)\.(\d+)", shown)
    return tuple(int(part) for part in found.groups()) if found else (0, 0, 0)


def nginx_config(nginx: str, workdir: Path, upstream_port: int, cert: Path, key: Path) -> tuple[Path, int]:
    https_port, http_port = free_port(), free_port()
    site = (ROOT / "nginx" / "forecast.conf.template").read_text()
    for name, value in {"SERVER_NAME": "localhost", "HTTP_PORT": str(http_port), "HTTPS_PORT": str(https_port),
                        "UPSTREAM": f"127.0.0.1:{upstream_port}", "TLS_CERT": str(cert), "TLS_KEY": str(key),
                        "MAX_BODY": "16m"}.items():
        site = site.replace("${" + name + "}", value)
    if nginx_version(nginx) < (1, 25, 1):  # `http2 on;` is 1.25.1+; older nginx has the listen parameter only
        site = site.replace("    http2 on;\n", "")
        site = site.replace(f"listen {https_port} ssl;", f"listen {https_port} ssl http2;")
    config = workdir / "nginx.conf"
    config.write_text(
        f"daemon off;\npid {workdir}/nginx.pid;\nerror_log {workdir}/nginx-error.log;\nworker_processes 1;\n"
        "events { worker_connections 1024; }\n"
        f"http {{\n access_log off;\n client_body_temp_path {workdir}/body;\n proxy_temp_path {workdir}/proxy;\n"
        f" fastcgi_temp_path {workdir}/fcgi;\n uwsgi_temp_path {workdir}/uwsgi;\n scgi_temp_path {workdir}/scgi;\n"
        f"{site}\n}}\n"
    )
    return config, https_port


def hourly_body(points: int, seed: int) -> bytes:
    rng = random.Random(seed)
    start = datetime(2026, 1, 1)
    level, trend = rng.uniform(50, 500), rng.uniform(-0.05, 0.05)
    values = [round(level + trend * i + level * 0.2 * math.sin(2 * math.pi * i / 24) + rng.gauss(0, level * 0.03), 3)
              for i in range(points)]
    return json.dumps({
        "series": [{"timestamps": [(start + timedelta(hours=i)).strftime("%Y-%m-%dT%H:%M:%S") for i in range(points)],
                    "values": values}],
        "forecast_horizon": 24,
        "data_frequency": "Hours",
        "forecast_frequency": "Hours",
    }).encode()


@dataclass
class Tally:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    statuses: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    keyed_counted: int = 0  # responses to real keys with a status other than 401 (these count)
    unexpected: list[str] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)


def classify(endpoint: str, response: requests.Response, real_key: bool) -> tuple[str, bool]:
    status = response.status_code
    label = str(status)
    if status == 500 and "Retry-After" in response.headers:
        label = "500+Retry-After"
    if not real_key:
        return label, status in (401, 429)
    expected = status in (200, 429) or label == "500+Retry-After"
    return label, expected


def client(index: int, base: str, cert: str, keys: list[str], high_key: str, bodies: list[bytes], deadline: float,
           tally: Tally) -> None:
    rng = random.Random(1000 + index)
    session = requests.Session()
    while time.monotonic() < deadline:
        roll = rng.random()
        real_key = roll >= 0.01
        key = UNKNOWN_KEY if not real_key else (high_key if roll < 0.6 else rng.choice(keys))
        headers = {"Authorization": f"Bearer {key}"}
        if rng.random() < 0.5:
            endpoint, method, body = "GET /verify", "GET", None
            url = base + "/verify"
        else:
            endpoint, method, body = "POST /forecast", "POST", rng.choice(bodies)
            url = base + "/forecast"
            headers["Content-Type"] = "application/json"
            headers["X-Model-Id"] = rng.choice(MODELS)
        started = time.perf_counter()
        try:
            response = session.request(method, url, headers=headers, data=body, timeout=120, verify=cert)
            response.content  # noqa: B018 - read the whole answer before stopping the clock
        except requests.RequestException as exc:
            with tally.lock:
                tally.errors[f"{endpoint}: {type(exc).__name__}"] += 1
                tally.unexpected.append(f"{endpoint}: {exc!r:.300}")
            continue
        elapsed = time.perf_counter() - started
        label, expected = classify(endpoint, response, real_key)
        group = endpoint if real_key else f"{endpoint} (unknown key)"
        with tally.lock:
            tally.latencies[group].append(elapsed)
            tally.statuses[group][label] += 1
            if real_key and response.status_code != 401:
                tally.keyed_counted += 1
            if not expected:
                tally.unexpected.append(f"{group}: {response.status_code} {response.text[:200]}")
        if response.status_code == 429 or label == "500+Retry-After":
            time.sleep(0.5)  # a brief backoff; clients that never back off only measure their own hammering
    session.close()


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    rank = max(0, math.ceil(q / 100 * len(sorted_values)) - 1)
    return sorted_values[rank]


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (requests.RequestException, OSError):
            pass
        time.sleep(0.2)
    raise SystemExit(f"{what} not ready within {timeout:.0f}s")


def vm_kib(pid: int, name: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def gunicorn_workers(master: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == master:
                found.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--points", type=int, default=500)
    parser.add_argument("--gunicorn-threads", type=int, default=None,
                        help="override GUNICORN_THREADS (default: gunicorn.conf.py as shipped, 32)")
    parser.add_argument("--out", type=Path, default=RESULTS / "load.md")
    args = parser.parse_args()

    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        raise SystemExit("nginx is not installed")
    workdir = Path(tempfile.mkdtemp(prefix="forecast-load-"))
    workdir.chmod(0o755)  # nginx workers (user nobody when started as root) buffer request bodies in here
    env = server_env(workdir)
    if args.gunicorn_threads:
        env["GUNICORN_THREADS"] = str(args.gunicorn_threads)
    flask_cli(env, "db", "upgrade")
    ordinary = [create_key(env, "--tier", "free") for _ in range(ORDINARY_KEYS)]  # Free tier: 10/minute
    high = create_key(env, "--per-minute", HIGH_LIMIT, "--per-hour", HIGH_LIMIT, "--per-day", HIGH_LIMIT)
    early_key = create_key(env, "--per-minute", "5")
    cert, tls_key = self_signed(workdir)

    app_port = free_port()
    gunicorn_log = open(workdir / "gunicorn.log", "w")  # noqa: SIM115
    gunicorn = subprocess.Popen([str(VENV_BIN / "gunicorn"), "--bind", f"127.0.0.1:{app_port}", "wsgi:app"],
                                cwd=ROOT, env=env, stdout=gunicorn_log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    config, https_port = nginx_config(nginx, workdir, app_port, cert, tls_key)
    proxy = subprocess.Popen([nginx, "-c", str(config), "-e", str(workdir / "nginx-error.log")],
                             start_new_session=True)
    base = f"https://localhost:{https_port}"
    tally = Tally()
    ok = False
    try:
        wait_until(lambda: requests.get(f"http://127.0.0.1:{app_port}/readyz", timeout=2).status_code == 200,
                   120, "gunicorn")
        wait_until(lambda: requests.get(base + "/readyz", verify=str(cert), timeout=2).status_code == 200, 20, "nginx")
        bodies = [hourly_body(args.points, seed) for seed in range(8)]
        load_before = os.getloadavg()[0]
        started = time.monotonic()
        deadline = started + args.seconds
        threads = [threading.Thread(target=client, args=(i, base, str(cert), ordinary, high, bodies, deadline, tally),
                                    daemon=True) for i in range(args.clients)]
        # Straight to gunicorn, as the one proxy hop TRUSTED_PROXIES=1 allows, so REQUIRE_HTTPS lets it through.
        early_client = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "loadgen.py"), "--url", f"http://127.0.0.1:{app_port}",
             "--path", "/forecast", "--mode", "early-answers", "--duration", str(args.seconds),
             "--key-env", "LOAD_EARLY_KEY", "--header", "X-Forwarded-Proto: https"],
            env={**os.environ, "LOAD_EARLY_KEY": early_key}, stdout=subprocess.PIPE, text=True,
        )
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=args.seconds + 180)
        early_output, _ = early_client.communicate(timeout=180)
        early = json.loads(early_output) if early_client.returncode == 0 and early_output else None
        duration = time.monotonic() - started
        load_during = (load_before, os.getloadavg()[0])
        stragglers = sum(thread.is_alive() for thread in threads)

        workers = gunicorn_workers(gunicorn.pid)
        worker_peaks = {pid: vm_kib(pid, "VmHWM") for pid in workers}
        forecast_peaks = {child: vm_kib(child, "VmHWM") for pid in workers for child in gunicorn_workers(pid)}

        if os.environ.get("LOAD_PAUSE_BEFORE_STOP"):  # debugging aid: inspect the idle server before SIGTERM
            print(f"gunicorn master {gunicorn.pid}, workers {workers}; pausing", flush=True)
            time.sleep(float(os.environ["LOAD_PAUSE_BEFORE_STOP"]))
        stopping = time.monotonic()
        gunicorn.send_signal(signal.SIGTERM)  # graceful: pending usage counts are flushed on the way out
        try:
            stop_code = gunicorn.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(gunicorn.pid, signal.SIGKILL)
            stop_code = gunicorn.wait()
        stop_seconds = time.monotonic() - stopping
        listed = json.loads(flask_cli(env, "keys", "list", "--json"))
        usage = sum(entry["usage_count"] for entry in listed)
        early_counted = sum(n for status, n in early["statuses"].items() if status != "401") if early else 0
        usage_ok = usage == tally.keyed_counted + early_counted
        early_ok = early is not None and not early["stalled"] and early["requests"] > 0
        ok = (usage_ok and early_ok and not tally.unexpected and not tally.errors and stragglers == 0
              and stop_code == 0)

        report = render(args, duration, tally, usage, worker_peaks, forecast_peaks, stop_code, stragglers, ok,
                        load_during, stop_seconds, early, early_counted)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report)
        print(report)
        if tally.unexpected:
            print("unexpected responses (first 10):", *tally.unexpected[:10], sep="\n  ")
        print(f"logs and config kept in {workdir}")
    finally:
        if gunicorn.poll() is None:
            gunicorn.send_signal(signal.SIGTERM)
            try:
                gunicorn.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(gunicorn.pid, signal.SIGKILL)
        if proxy.poll() is None:
            proxy.send_signal(signal.SIGQUIT)
            try:
                proxy.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proxy.kill()
        gunicorn_log.close()
    return 0 if ok else 1


def render(args: argparse.Namespace, duration: float, tally: Tally, usage: int, worker_peaks: dict[int, int | None],
           forecast_peaks: dict[int, int | None], stop_code: int, stragglers: int, ok: bool,
           load: tuple[float, float], stop_seconds: float, early: dict | None, early_counted: int) -> str:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Load test: nginx (TLS) -> gunicorn (default config)",
        "",
        f"machine: nproc={os.cpu_count()}, Python {platform.python_version()}, {platform.system()} "
        f"{platform.release()}; date: {now}",
        f"run: {args.clients} clients (threads, requests.Session, keep-alive, TLS) for {args.seconds:g} s "
        f"(measured {duration:.1f} s incl. draining); mix 50% GET /verify, 50% POST /forecast "
        f"(hourly, {args.points} points, horizon 24, X-Model-Id 1-4 uniform)",
        f"keys: 1 high-limit key (~59% of picks), {ORDINARY_KEYS} Free-tier keys at 10/minute (~40% of picks; a "
        "client sleeps 0.5 s after a 429 or a 500 with Retry-After), unknown key (~1%)",
        f"server: gunicorn.conf.py as shipped (1 worker process, {args.gunicorn_threads or 32} threads"
        f"{' (GUNICORN_THREADS override)' if args.gunicorn_threads else ''}, forecast workers = cores), SQLite, "
        "in-memory limits; nginx worker_processes 1; everything on this machine with the clients",
        f"1-minute load average before / after the run: {load[0]:.2f} / {load[1]:.2f} (anything above the clients' "
        "own load means other work shared the cores)",
        "",
        "| endpoint | requests | statuses | throughput (req/s) | p50 (ms) | p95 (ms) | p99 (ms) | max (ms) |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for group in sorted(tally.latencies):
        latencies = sorted(tally.latencies[group])
        statuses = ", ".join(f"{status}: {count}" for status, count in sorted(tally.statuses[group].items()))
        lines.append(
            f"| {group} | {len(latencies)} | {statuses} | {len(latencies) / duration:.1f} | "
            f"{percentile(latencies, 50) * 1000:.0f} | {percentile(latencies, 95) * 1000:.0f} | "
            f"{percentile(latencies, 99) * 1000:.0f} | {latencies[-1] * 1000:.0f} |"
        )
    if early is not None:
        latencies = sorted(early["latencies"])
        statuses = ", ".join(f"{status}: {count}" for status, count in sorted(early["statuses"].items()))
        lines.append(
            f"| POST /forecast, one keep-alive connection straight to gunicorn, key at 5/minute | "
            f"{early['requests']} | {statuses} | {len(latencies) / duration:.1f} | "
            f"{percentile(latencies, 50) * 1000:.0f} | {percentile(latencies, 95) * 1000:.0f} | "
            f"{percentile(latencies, 99) * 1000:.0f} | {(latencies[-1] if latencies else float('nan')) * 1000:.0f} |"
        )
    saturated = sum(c["500+Retry-After"] for c in tally.statuses.values())
    expected_usage = tally.keyed_counted + early_counted
    lines += [
        "",
        f"- usage_count summed over keys after a graceful stop: {usage}; non-401 responses to real keys: "
        f"{expected_usage} -> {'equal' if usage == expected_usage else 'MISMATCH'}",
        "- keep-alive client meeting early answers (bodies 70 B - 24 KiB, mostly 429 before the body was read): "
        + ("did not run" if early is None else
           f"{len(early['stalled'])} of {early['requests']} requests stalled over 2.5 s or dropped"
           + (f" (first: {early['stalled'][0]})" if early["stalled"] else "")),
        f"- 500 with Retry-After (forecast queue saturated): {saturated}",
        f"- unexpected statuses: {len(tally.unexpected)}; client errors: "
        f"{dict(tally.errors) if tally.errors else 0}; clients still running at the end: {stragglers}",
        f"- gunicorn stopped with SIGTERM, exit status {stop_code}, in {stop_seconds:.1f} s (idle server; "
        "graceful_timeout is 60 s)",
        "- peak RSS (VmHWM) of the gunicorn worker: "
        + (", ".join(f"{(v or 0) / 1024:.0f} MiB" for v in worker_peaks.values()) or "-")
        + "; forecast workers and helpers: "
        + (", ".join(f"{(v or 0) / 1024:.0f} MiB" for v in forecast_peaks.values()) or "-"),
        f"- result: {'PASS' if ok else 'FAIL'}",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
