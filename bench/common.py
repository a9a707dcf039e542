"""Shared plumbing for the latency benchmarks: machine line, servers, databases, keys, stats, tables.

Everything here is bounded in time and cleans up after itself (temp dirs, throwaway databases,
gunicorn process groups), even when a suite fails half-way.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The service code the suites run: a snapshot of ROOT taken by bench/run.py (BENCH_APP_ROOT), so the
# server, the in-process helpers and every suite run the same code even while the tree is being edited.
APP_ROOT = Path(os.environ.get("BENCH_APP_ROOT") or ROOT)
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
VENV_BIN = Path(sys.executable).parent
PYTHON = sys.executable

BLAS_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
POSTGRES_ADMIN_URL = os.environ.get("BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")
HUGE = "10000000"


def _stop_on_terminate(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


# A suite stopped by SIGTERM (bench/run.py's timeout, kill) unwinds as a failed one does, so the finally blocks stop
# the servers and remove the worktrees and databases it started: SIGTERM's default action ends the process at once,
# and each gunicorn, in a session of its own, kept running.
signal.signal(signal.SIGTERM, _stop_on_terminate)


def machine_line() -> str:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (f"machine: nproc={os.cpu_count()}, Python {platform.python_version()}, "
            f"{platform.system()} {platform.release()}; date: {now}; "
            f"load average (1/5 min) at write time: {os.getloadavg()[0]:.2f}/{os.getloadavg()[1]:.2f}")


def base_env(app_root: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment of a service process; ``app_root`` runs another checkout (e.g. a baseline commit)."""
    root = str(app_root or APP_ROOT)
    env = {**os.environ, **BLAS_ENV, "PYTHONPATH": root, "BENCH_APP_ROOT": root, "LOG_LEVEL": "WARNING"}
    # Never inherit a database or Redis from the caller's shell: every suite says what it uses.
    for name in ("DATABASE_URL", "REDIS_URL", "WEB_CONCURRENCY", "GUNICORN_THREADS", "BIND", "PORT"):
        env.pop(name, None)
    env.update(extra)
    return env


# .native: the compiled detector, used where it was built from the same sources (app/compute/detect/native.py).
SNAPSHOT_ITEMS = ("app", ".native", "migrations", "wsgi.py", "gunicorn.conf.py", "pyproject.toml")


def copy_service(root: Path, dest: Path) -> Path:
    """The service files (SNAPSHOT_ITEMS) of the checkout at ``root`` copied to ``dest``, without bytecode."""
    for item in SNAPSHOT_ITEMS:
        src = root / item
        if src.is_dir():
            shutil.copytree(src, dest / item, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif src.exists():
            shutil.copy2(src, dest / item)
    return dest


@contextmanager
def code_snapshot() -> Iterator[str]:
    """Copies the service code to a temp dir and points APP_ROOT (and child processes) at it."""
    global APP_ROOT
    with tempfile.TemporaryDirectory(prefix="bench-code-") as tmp:
        dest = copy_service(ROOT, Path(tmp))
        previous = APP_ROOT, os.environ.get("BENCH_APP_ROOT")
        APP_ROOT = dest
        os.environ["BENCH_APP_ROOT"] = str(dest)
        try:
            yield describe_code()
        finally:
            APP_ROOT = previous[0]
            if previous[1] is None:
                os.environ.pop("BENCH_APP_ROOT", None)
            else:
                os.environ["BENCH_APP_ROOT"] = previous[1]


def describe_code() -> str:
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--", *SNAPSHOT_ITEMS)
    taken = datetime.now(UTC).strftime("%H:%M:%S UTC")
    return f"code: git {head}{' + uncommitted changes' if dirty else ''}, snapshot taken {taken}"


CODE_LINE = ""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---------------------------------------------------------------------------------------------- stats

def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100), like numpy's default."""
    if not values:
        return float("nan")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


def fmt_ms(seconds: float, digits: int = 2) -> str:
    if seconds != seconds:  # NaN
        return "n/a"
    return f"{seconds * 1000:.{digits}f}"


# ---------------------------------------------------------------------------------------------- results

def write_table(suite: str, title: str, notes: Sequence[str], header: Sequence[str],
                rows: Sequence[Sequence[object]], extra: str = "") -> str:
    lines = [f"# {title}", "", f"| {title} — {machine_line()}{'; ' + CODE_LINE if CODE_LINE else ''} |",
             "|---|", ""]
    lines += [f"- {n}" for n in notes]
    lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    if extra:
        lines += ["", extra]
    text = "\n".join(lines) + "\n"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{suite}.md").write_text(text)
    print(text, flush=True)
    return text


# ---------------------------------------------------------------------------------------------- databases

@contextmanager
def temp_dir(prefix: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        yield Path(tmp)


def flask_cli(*args: str, env: dict[str, str], timeout: float = 120) -> str:
    result = subprocess.run([str(VENV_BIN / "flask"), "--app", "wsgi", *args], cwd=env["BENCH_APP_ROOT"], env=env,
                            capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"flask {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result.stdout


@contextmanager
def database(kind: str, tmp: Path, app_root: Path | None = None) -> Iterator[str]:
    """A migrated, empty database: ``sqlite`` (a file in tmp) or ``postgres`` (created, then dropped)."""
    if kind == "sqlite":
        url = f"sqlite:///{tmp / 'k.sqlite3'}"
        flask_cli("db", "upgrade", env=base_env(app_root, DATABASE_URL=url))
        yield url
        return
    if kind != "postgres":
        raise ValueError(kind)
    import psycopg

    name = "forecast_bench_" + uuid.uuid4().hex[:10]
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        url = POSTGRES_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
        flask_cli("db", "upgrade", env=base_env(app_root, DATABASE_URL=url))
        yield url
    finally:
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def create_key(database_url: str, permissions: str = "read", app_root: Path | None = None,
               account: str | None = None) -> str:
    """A key with limits no benchmark reaches, in the default account or in ``account`` (keys of different
    accounts see none of each other's batches or monitors, and share the workers fairly)."""
    out = flask_cli("keys", "create", "--permissions", permissions, "--name", "bench",
                    "--per-minute", HUGE, "--per-hour", HUGE, "--per-day", HUGE, "--json",
                    *(("--account", account) if account else ()),
                    env=base_env(app_root, DATABASE_URL=database_url))
    return json.loads(out.strip().splitlines()[-1])["key"]


def flush_redis(url: str = REDIS_URL) -> None:
    import redis

    redis.Redis.from_url(url, socket_connect_timeout=2).flushdb()


def run_suite(command: Sequence[str], *, timeout: float, grace: float = 60.0) -> subprocess.CompletedProcess[str]:
    """``command`` in ROOT with base_env(), its output captured as text; past ``timeout`` seconds, or when this
    process is stopped, it is sent SIGTERM and given ``grace`` seconds to stop what it started before SIGKILL
    (subprocess.run's timeout kills at once)."""
    with subprocess.Popen(list(command), cwd=ROOT, env=base_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except BaseException as stopped:
            if not isinstance(stopped, KeyboardInterrupt):  # Ctrl-C reached the suite itself (same process group)
                process.terminate()
            try:
                process.communicate(timeout=grace)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
            raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


# ---------------------------------------------------------------------------------------------- gunicorn

class Gunicorn:
    """gunicorn wsgi:app on a free loopback port, in its own process group."""

    def __init__(self, env: dict[str, str], log_path: Path, args: Sequence[str] = (), app: str = "wsgi:app",
                 port: int | None = None) -> None:
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self.url = f"http://{self.host}:{self.port}"
        self.log_path = log_path
        self._log = open(log_path, "a")  # noqa: SIM115
        self.process = subprocess.Popen(
            [str(VENV_BIN / "gunicorn"), "--bind", f"{self.host}:{self.port}", *args, app],
            cwd=env["BENCH_APP_ROOT"], env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gunicorn exited ({self.process.returncode}):\n{self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"gunicorn not ready within {timeout:g}s:\n{self.log()}")

    def worker_pids(self) -> list[int]:
        """gunicorn's worker processes (children of the master); the forecast pool hangs under them."""
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[1]) == self.process.pid:
                pids.append(int(entry.name))
        return pids

    def worker_cpu_seconds(self) -> float:
        """User + system CPU time used so far by gunicorn's worker processes (not their children)."""
        return sum(process_cpu_seconds(pid) for pid in self.worker_pids())

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text()[-4000:]

    def stop(self, timeout: float = 30.0) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.process.wait(timeout=10)
        self._log.close()


@contextmanager
def gunicorn(database_url: str, tmp: Path, *, redis_url: str | None = None, workers: int = 2,
             name: str = "gunicorn", app_root: Path | None = None, **extra_env: str) -> Iterator[Gunicorn]:
    env = base_env(app_root, DATABASE_URL=database_url, FORECAST_WORKERS=str(workers), **extra_env)
    if redis_url:
        env["REDIS_URL"] = redis_url
    server = Gunicorn(env, tmp / f"{name}.log")
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def start_jobs_worker(env: dict[str, str], log_path: Path, processes: int | None = None) -> subprocess.Popen[bytes]:
    """`flask --app wsgi jobs worker` as the Procfile runs it (one process per core unless ``processes``), in a
    session of its own: stop it with stop_process."""
    with open(log_path, "a") as log:
        return subprocess.Popen(
            [str(VENV_BIN / "flask"), "--app", "wsgi", "jobs", "worker",
             *(("--processes", str(processes)) if processes else ())],
            cwd=env["BENCH_APP_ROOT"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def process_cpu_seconds(pid: int) -> float:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_json(args: Sequence[str], *, timeout: float, env: dict[str, str] | None = None) -> dict:
    """Runs a helper process that prints one JSON object on its last stdout line."""
    result = subprocess.run([PYTHON, *args], cwd=ROOT, env=env or base_env(), capture_output=True, text=True,
                            timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({result.returncode}):\n{result.stdout[-2000:]}\n"
                           f"{result.stderr[-4000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------- reference code

def compile_detector(tree: Path) -> None:
    """Builds a checkout's compiled detector (where its commit has one) unless built: a reference runs as the
    working tree does, so a figure beside it compares the code, not compiled code with plain Python."""
    if (tree / "app" / "compute" / "detect" / "native_build.py").is_file() and not (tree / ".native").exists():
        subprocess.run([PYTHON, "-m", "app.compute.detect.native_build"], cwd=tree, check=True, capture_output=True,
                       timeout=600)


@contextmanager
def git_worktree(commit: str, prefix: str = "bench-ref-") -> Iterator[Path]:
    """A detached checkout of ``commit`` (git worktree) in a fresh temp dir, its detector compiled
    (compile_detector), removed afterwards even when the suite fails: a reference measured in the same run, without
    touching the main checkout. A fresh dir per call, so two suites (or two engineers) never share one."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(tree), commit], cwd=ROOT, check=True,
                       capture_output=True, timeout=120)
        try:
            compile_detector(tree)
            yield tree
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True,
                           timeout=120)


def tree_pids(root_pid: int) -> list[int]:
    """A process and its live descendants."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        children.setdefault(int(stat[stat.rindex(")") + 2:].split()[1]), []).append(int(entry.name))
    found, pending = [], [root_pid]
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending += children.get(pid, [])
    return found


def tree_sched_seconds(root_pid: int) -> tuple[float, float]:
    """(seconds on a CPU, seconds runnable but kept waiting for one) of a process and its live descendants,
    from /proc/<pid>/schedstat: the second is what other load on a shared machine costs them."""
    on_cpu = waiting = 0.0
    for pid in tree_pids(root_pid):
        try:
            ran, waited = Path(f"/proc/{pid}/schedstat").read_text().split()[:2]
        except (OSError, ValueError):
            continue
        on_cpu, waiting = on_cpu + int(ran) / 1e9, waiting + int(waited) / 1e9
    return on_cpu, waiting


def tree_cpu_seconds(root_pid: int) -> float:
    """User + system CPU time of a process and all its live descendants (gunicorn's master, its workers and their
    worker pools): what serving costs the machine, wherever the work runs (web process or worker pool)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        children.setdefault(int(stat[stat.rindex(")") + 2:].split()[1]), []).append(int(entry.name))
    total, pending = 0.0, [root_pid]
    while pending:
        pid = pending.pop()
        total += process_cpu_seconds(pid)
        pending += children.get(pid, [])
    return total


def stop_process(process: subprocess.Popen[bytes], sig: int = signal.SIGINT) -> None:
    """Stops a process started in its own session (a jobs worker and its children), killing it after 30 s."""
    if process.poll() is None:
        os.killpg(process.pid, sig)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
