"""Shared helpers for tests: real services or a clear skip (a failure when REQUIRE_SERVICES=1)."""

from __future__ import annotations

import json
import math
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
from flask import Flask
from flask.testing import FlaskClient

from app import create_app
from app.keys import store
from app.monitors.alerts.queue import ACTIVE
from app.monitors.alerts.webhooks import EVENT_ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, verify
from app.services import Services
from app.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
REQUIRE_SERVICES = os.environ.get("REQUIRE_SERVICES") == "1"
POSTGRES_URL = os.environ.get("TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
# pytest-xdist runs several workers at once (gw0, gw1, ...); each gets its own Redis database, counting down
# from the configured one, because the tests flush the database they use.
XDIST_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))


def _database_of_worker(url: str, worker: int) -> str:
    base, _, number = url.rpartition("/")
    if not number.isdigit() or int(number) < worker:
        raise RuntimeError(f"TEST_REDIS_URL must end in a database number of at least {worker} (one per worker)")
    return f"{base}/{int(number) - worker}"


REDIS_URL = _database_of_worker(os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15"), XDIST_WORKER)


def missing_service(reason: str) -> None:
    if REQUIRE_SERVICES:
        pytest.fail(f"required service missing (REQUIRE_SERVICES=1): {reason}")
    pytest.skip(reason)


def postgres_available() -> bool:
    try:
        import psycopg

        with psycopg.connect(POSTGRES_URL, connect_timeout=3):
            return True
    except Exception:
        return False


def redis_available(url: str = REDIS_URL) -> bool:
    try:
        import redis

        return bool(redis.Redis.from_url(url, socket_connect_timeout=2).ping())
    except Exception:
        return False


def flush_redis(url: str = REDIS_URL) -> None:
    import redis

    redis.Redis.from_url(url).flushdb()


@contextmanager
def postgres_database() -> Iterator[str]:
    """A fresh PostgreSQL database for one test session, dropped afterwards."""
    import psycopg

    if not postgres_available():
        missing_service(f"PostgreSQL is not reachable at {POSTGRES_URL}")
    name = "forecast_test_" + uuid.uuid4().hex[:10]
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = POSTGRES_URL.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def migrate(settings: Settings) -> None:
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(ROOT / "migrations"))
    config.attributes["database_url"] = settings.database_url_for_sqlalchemy
    command.upgrade(config, "head")


def settings_for(database_url: str, **overrides: Any) -> Settings:
    base = Settings(
        database_url=database_url,
        redis_url=None,
        forecast_workers=1,
        forecast_timeout_seconds=30.0,
        usage_flush_seconds=0.2,
        testing=True,
        log_level="INFO",
    )
    return replace(base, **overrides)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _ReusableServer(ThreadingHTTPServer):
    allow_reuse_address = True  # a receiver restarted by a test comes back on its old port


class _QuietHandler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


class _LocalHTTP:
    """A threaded HTTP server on 127.0.0.1 that a test starts, stops and may start again on the same port."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self._server: ThreadingHTTPServer | None = None

    def _serve(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._server = _ReusableServer(("127.0.0.1", self.port), handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class ScrapeTarget(_LocalHTTP):
    """An endpoint Prometheus scrapes: every GET answers ``body()`` as it is at that moment (text format).
    Subclasses say what the metrics are."""

    def body(self) -> str:
        raise NotImplementedError

    def start(self) -> Any:
        target = self

        class Handler(_QuietHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                data = target.body().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._serve(Handler)
        return self


def cli(*args: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(VENV_BIN / "flask"), "--app", "wsgi", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"flask {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def cli_in_process(*args: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    """`flask --app wsgi ARGS` with `env` over this process's environment, run in this process: the same click
    commands as `cli`, without paying an interpreter start and the app's imports for every command. Its stderr
    holds what the command printed there and the log lines it wrote, as the real process's would."""
    import io
    import logging
    from contextlib import redirect_stderr
    from unittest import mock

    from app import create_app

    with mock.patch.dict(os.environ, env):
        settings = Settings.from_env()
    logged = io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    with redirect_stderr(logged):  # create_app points the log handler at sys.stderr as it is now
        app = create_app(settings)
    try:
        result = app.test_cli_runner().invoke(args=list(args))
    finally:
        app.extensions["forecast_service"].close()
        root.handlers[:] = handlers
        root.setLevel(level)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    completed = subprocess.CompletedProcess(["flask", "--app", "wsgi", *args], result.exit_code, result.stdout,
                                            result.stderr + logged.getvalue())
    if check and completed.returncode != 0:
        raise AssertionError(f"flask {' '.join(args)} failed ({completed.returncode}):\n{completed.stdout}\n"
                             f"{completed.stderr}")
    return completed


class Server:
    """A real gunicorn process serving wsgi:app, as an admin would start it."""

    def __init__(self, env: dict[str, str], *, args: tuple[str, ...] = (), log_path: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._log = open(log_path, "w")  # noqa: SIM115
        self.process = subprocess.Popen(
            [str(VENV_BIN / "gunicorn"), "--bind", f"127.0.0.1:{self.port}", *args, "wsgi:app"],
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_ready(self, timeout: float = 90.0, path: str = "/readyz") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"gunicorn exited ({self.process.returncode}):\n{self.log()}")
            try:
                if requests.get(self.url + path, timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise AssertionError(f"gunicorn not ready within {timeout}s:\n{self.log()}")

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._log.close()
        return self.process.returncode


def wait_for(condition: Callable[[], Any], timeout: float = 30.0, message: str = "condition",
             interval: float = 0.1) -> Any:
    """The first truthy value of ``condition()``, polled until ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


class RedisServer:
    """A private redis-server on a free loopback port, no persistence; stop() and start() keep the port."""

    def __init__(self, log_path: Path) -> None:
        import shutil

        binary = shutil.which("redis-server")
        if binary is None:
            missing_service("redis-server is not installed (apt-get install -y redis-server)")
        self.binary = str(binary)
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self, timeout: float = 10.0) -> None:
        with open(self.log_path, "a") as log:
            self.process = subprocess.Popen(
                [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not redis_available(self.url):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                missing_service(f"redis-server did not start on port {self.port}:\n{self.log_path.read_text()}")
            time.sleep(0.05)

    def stop(self, timeout: float = 10.0) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


class PostgresServer:
    """A private PostgreSQL cluster on a free loopback port, for a test that stops and restarts its database:
    the shared server on 5432 stays up for every other test (and other test runs) using it meanwhile."""

    def __init__(self) -> None:
        import glob
        import shutil
        import tempfile

        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
        initdb = found[-1] if found else shutil.which("initdb")
        if initdb is None:
            missing_service("PostgreSQL's server binaries (initdb, pg_ctl) are not installed")
        self.bin = Path(str(initdb)).parent
        # PostgreSQL refuses to run as root; then it runs as the postgres user, which needs a folder of its own
        # outside pytest's 0700 temp dirs.
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self._as:
            import pwd

            try:
                pwd.getpwnam("postgres")
            except KeyError:
                missing_service("a private PostgreSQL cluster cannot run as root, and there is no postgres user")
        self.directory = Path(tempfile.mkdtemp(prefix="forecast-test-pg-"))
        if self._as:
            shutil.chown(self.directory, user="postgres")
        self.data = self.directory / "data"
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync")
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(f"port = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                       f"unix_socket_directories = '{self.directory}'\n")
        self.start()

    def _run(self, program: str, *args: str) -> None:
        done = subprocess.run([*self._as, str(self.bin / program), *args], capture_output=True, text=True,
                              timeout=60)
        if done.returncode != 0:
            raise AssertionError(f"{program} {' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")

    def start(self) -> None:
        """Starts the cluster and returns once it accepts connections."""
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.directory / "server.log"), "-w", "start")

    def stop(self) -> None:
        """A fast shutdown, as `pg_ctlcluster stop -m fast` does: sessions are ended, the data is kept."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        import shutil

        if (self.data / "postmaster.pid").exists():
            self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


def proc_stat(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command name (which may hold spaces and parentheses): the state first,
    then the parent's pid. OSError once the process is gone."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def child_pids(pid: int) -> list[int]:
    """Processes whose parent is pid (as `ps --ppid pid`), read from /proc."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = proc_stat(int(stat.parent.name))
        except (OSError, IndexError):
            continue  # the process went away while we looked
        if int(fields[1]) == pid:
            children.append(int(stat.parent.name))
    return sorted(children)


def _process_state(pid: int) -> str:
    """The one-letter state of /proc/PID/stat ("T": stopped), or "" for a process that is gone."""
    try:
        return proc_stat(pid)[0]
    except (OSError, IndexError):
        return ""


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


# ------------------------------------------------------------------------------------- in-process apps


def build_app(settings: Settings, *, start_workers: bool = False) -> Flask:
    migrate(settings)
    app = create_app(settings, start_workers=False)
    if start_workers:
        app.extensions["forecast_service"].pool.start(wait=True)
    return app


def services_of(app: Flask) -> Services:
    return app.extensions["forecast_service"]


@contextmanager
def immediate_app(directory: Path, **overrides: Any) -> Iterator[Flask]:
    """An app on a fresh SQLite store in ``directory`` (settings_for's, with ``overrides``) whose jobs run in the
    calling thread, closed on the way out."""
    application = build_app(settings_for(f"sqlite:///{directory / 'keys.sqlite3'}", **overrides))
    services_of(application).jobs.immediate = True
    try:
        yield application
    finally:
        services_of(application).close()


def new_key(app: Flask, permissions: tuple[str, ...] = ("read",), **kwargs: Any) -> tuple[str, str]:
    """Creates a key through the same CRUD the CLI uses; returns (plain key, key id)."""
    with services_of(app).database.transaction() as connection:
        created = store.create_key(connection, permissions=permissions, **kwargs)
    return created.plain_key, created.key.id


# Limits no test of a module's shared key reaches.
ROOMY_LIMITS = {"per_minute": 10_000, "per_hour": 100_000, "per_day": 1_000_000}


@contextmanager
def serving_app(tmp_path_factory: pytest.TempPathFactory, name: str, **overrides: Any) -> Iterator[Flask]:
    """A module's app on a SQLite file of its own, its forecast workers running; closed afterwards."""
    path = tmp_path_factory.mktemp(name) / "keys.sqlite3"
    app = build_app(settings_for(f"sqlite:///{path}", **overrides), start_workers=True)
    try:
        yield app
    finally:
        services_of(app).close()


# ---------------------------------------------------------------------------------------------- nginx


def _self_signed(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "tls.crt", directory / "tls.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return cert, key


def render_nginx(tmp_path: Path, upstream_port: int) -> tuple[Path, int, int, Path]:
    cert, key = _self_signed(tmp_path)
    http_port, https_port = free_port(), free_port()
    site = (ROOT / "nginx" / "forecast.conf.template").read_text()
    for name, value in {
        "SERVER_NAME": "localhost",
        "HTTP_PORT": str(http_port),
        "HTTPS_PORT": str(https_port),
        "UPSTREAM": f"127.0.0.1:{upstream_port}",
        "TLS_CERT": str(cert),
        "TLS_KEY": str(key),
        "MAX_BODY": "16m",
        "MAX_UPLOAD": "1g",
    }.items():
        site = site.replace("${" + name + "}", value)
    config = tmp_path / "nginx.conf"
    config.write_text(
        # pytest's temp dirs are 0700; nginx's workers must write request bodies there, so they run as us.
        "user root;\n"
        f"daemon off;\npid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/nginx-error.log;\nworker_processes 1;\n"
        "events { worker_connections 256; }\n"
        f"http {{\n access_log off;\n client_body_temp_path {tmp_path}/body;\n proxy_temp_path {tmp_path}/proxy;\n"
        f" fastcgi_temp_path {tmp_path}/fcgi;\n uwsgi_temp_path {tmp_path}/uwsgi;\n scgi_temp_path {tmp_path}/scgi;\n"
        f"{site}\n}}\n"
    )
    return config, http_port, https_port, cert


def nginx_binary() -> str:
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if nginx is None:
        missing_service("nginx is not installed (apt-get install -y nginx-light)")
    return str(nginx)


@contextmanager
def running_nginx(directory: Path, upstream_port: int) -> Iterator[tuple[str, int, Path]]:
    """nginx from the shipped template in front of 127.0.0.1:upstream_port; yields (https base, http port, cert)."""
    config, http_port, https_port, cert = render_nginx(directory, upstream_port)
    proxy = subprocess.Popen([nginx_binary(), "-c", str(config), "-e", str(directory / "nginx-error.log")],
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", https_port), timeout=1).close()
                break
            except OSError:
                assert proxy.poll() is None, (directory / "nginx-error.log").read_text()
                assert time.monotonic() < deadline, (directory / "nginx-error.log").read_text()
                time.sleep(0.1)
        yield f"https://localhost:{https_port}", http_port, cert
    finally:
        proxy.send_signal(signal.SIGQUIT)
        try:
            proxy.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proxy.kill()
            proxy.wait()


# ---------------------------------------------------------------------------------------------- monitors


class Receiver(_LocalHTTP):
    """A real HTTP receiver on 127.0.0.1 that records every delivery and checks its signature."""

    def __init__(self, port: int | None = None) -> None:
        super().__init__(port)
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.secrets: dict[str, str] = {}  # monitor id -> secret, for signature checks
        self.deliveries: list[dict[str, Any]] = []
        self.status = 200
        self._lock = threading.Lock()

    def start(self) -> Receiver:
        receiver = self

        class Handler(_QuietHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                event = json.loads(body)
                secret = receiver.secrets.get(event["monitor_id"], "")
                timestamp = int(self.headers[TIMESTAMP_HEADER])
                with receiver._lock:
                    receiver.deliveries.append(
                        {
                            "event": event,
                            "event_id_header": self.headers[EVENT_ID_HEADER],
                            "signature_ok": verify(secret, timestamp, body, self.headers[SIGNATURE_HEADER]),
                            "timestamp": timestamp,
                            "status": receiver.status,
                        }
                    )
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._serve(Handler)
        return self

    def acknowledged(self) -> list[dict[str, Any]]:
        with self._lock:
            return [d["event"] for d in self.deliveries if 200 <= d["status"] < 300]

    def wait_for(self, count: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            events = self.acknowledged()
            if len(events) >= count:
                return events
            time.sleep(0.05)
        raise AssertionError(f"expected {count} acknowledged events, got {len(self.acknowledged())}")


def settled_deliveries(client: FlaskClient, headers: dict[str, str], monitor_id: str,
                       timeout: float = 30.0) -> list[dict[str, Any]]:
    """The delivery log once no event is still pending or sending. The receiver answers before the sender
    records the outcome, so a log read straight after the last acknowledgement can still show it in flight."""
    def log() -> list[dict[str, Any]]:
        return client.get(f"/monitors/{monitor_id}/deliveries", headers=headers).json["deliveries"]

    wait_for(lambda: all(d["status"] not in ACTIVE for d in log()), timeout, "the delivery log to settle")
    return log()  # settled events do not change again


def minute_series(count: int, start: int = 0) -> tuple[list[str], list[float]]:
    stamps = [f"2026-01-{1 + (i // 1440):02d}T{(i // 60) % 24:02d}:{i % 60:02d}:00Z" for i in range(start, start
                                                                                                     + count)]
    values = [10 + 3 * math.sin(i / 15) + 0.2 * math.cos(i * 1.7) for i in range(start, start + count)]
    return stamps, values


def drop_all_tables(postgres_url: str) -> None:
    """Empties the session's PostgreSQL database whatever tables the migrations have added since."""
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA public CASCADE")
        conn.execute("CREATE SCHEMA public")


class PaasServer(Server):
    """gunicorn as a PaaS starts it (Procfile: `gunicorn wsgi:app`): no --bind, only PORT in the environment, so
    gunicorn.conf.py listens on every interface and nothing stands in front of it."""

    def __init__(self, env: dict[str, str], *, args: tuple[str, ...] = (), log_path: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._log = open(log_path, "w")  # noqa: SIM115
        environ = {name: value for name, value in {**os.environ, **env}.items() if name != "BIND"}
        self.process = subprocess.Popen(
            [str(VENV_BIN / "gunicorn"), *args, "wsgi:app"],
            cwd=ROOT,
            env={**environ, "PORT": str(self.port)},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


# ---------------------------------------------------------------------------------------------- Prometheus

PROMETHEUS_BINARY = os.environ.get("PROMETHEUS_BINARY", "/usr/bin/prometheus")
ALERTMANAGER_BINARY = os.environ.get("ALERTMANAGER_BINARY", "/usr/bin/prometheus-alertmanager")


class _Daemon:
    """A real server process on a free loopback port, with its own config and data directories."""

    name = "daemon"

    def __init__(self, binary: str, directory: Path) -> None:
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)) and shutil.which(binary) is None:
            missing_service(f"{binary} is not installed (apt-get install -y prometheus prometheus-alertmanager)")
        self.binary = binary
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = directory / f"{self.name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def arguments(self) -> list[str]:
        raise NotImplementedError

    def start(self, timeout: float = 30.0) -> None:
        with open(self.log_path, "a") as log:
            self.process = subprocess.Popen([self.binary, *self.arguments()], stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            try:
                if requests.get(self.url + "/-/ready", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                log_text = self.log_path.read_text()[-3000:]
                self.stop()
                raise AssertionError(f"{self.name} did not become ready on port {self.port}:\n{log_text}")
            time.sleep(0.1)

    def stop(self, timeout: float = 20.0) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.process = None


class PrometheusServer(_Daemon):
    name = "prometheus"

    def __init__(self, directory: Path, scrape_configs: list[dict[str, Any]], interval: str = "1s") -> None:
        super().__init__(PROMETHEUS_BINARY, directory)
        config = {"global": {"scrape_interval": interval, "evaluation_interval": interval},
                  "scrape_configs": scrape_configs}
        # JSON is YAML: no YAML writer needed.
        (directory / "prometheus.yml").write_text(json.dumps(config))

    def arguments(self) -> list[str]:
        return [f"--config.file={self.directory / 'prometheus.yml'}", f"--storage.tsdb.path={self.directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        answer = requests.get(self.url + "/api/v1/query", params={"query": promql}, timeout=5).json()
        assert answer["status"] == "success", answer
        return answer["data"]["result"]


class AlertmanagerServer(_Daemon):
    name = "alertmanager"

    def __init__(self, directory: Path) -> None:
        super().__init__(ALERTMANAGER_BINARY, directory)
        config = {"route": {"receiver": "nowhere", "group_wait": "1s", "group_interval": "1s"},
                  "receivers": [{"name": "nowhere"}]}
        (directory / "alertmanager.yml").write_text(json.dumps(config))

    def arguments(self) -> list[str]:
        # No cluster listener: a test's Alertmanager must not gossip with anything else on the machine.
        return [f"--config.file={self.directory / 'alertmanager.yml'}", f"--storage.path={self.directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}", "--cluster.listen-address=", "--log.level=warn"]

    def alerts(self, **labels: str) -> list[dict[str, Any]]:
        """The alerts Alertmanager holds as active or suppressed (resolved ones are not listed)."""
        answer = requests.get(self.url + "/api/v2/alerts", timeout=5)
        assert answer.status_code == 200, answer.text
        return [a for a in answer.json() if all(a["labels"].get(k) == v for k, v in labels.items())]


class JobWorker:
    """A real `flask --app wsgi jobs worker` (the Huey consumer and its worker processes), in a session of its
    own so that kill() reaches every process it started, as a machine that loses power would."""

    def __init__(self, env: dict[str, str], *, log_path: Path, processes: int = 1) -> None:
        self.log_path = log_path
        self._log = open(log_path, "a")  # noqa: SIM115
        self.process = subprocess.Popen(
            [str(VENV_BIN / "flask"), "--app", "wsgi", "jobs", "worker", "--processes", str(processes)],
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text()

    def freeze(self, settle: float = 0.2) -> None:
        """SIGSTOP to the consumer and its workers, then waits until each is stopped and ``settle`` seconds more: a
        stop takes effect as a thread next leaves the kernel, and a statement it sent just before still runs to its
        end in the database."""
        os.killpg(self.process.pid, signal.SIGSTOP)
        members = [self.process.pid, *child_pids(self.process.pid)]
        wait_for(lambda: all(_process_state(pid) in ("T", "") for pid in members), 10, "the job worker stopped",
                 interval=0.001)
        time.sleep(settle)

    def thaw(self) -> None:
        os.killpg(self.process.pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL to the consumer and its workers at once: no process gets to finish or clean up."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self._log.close()

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, as a service manager stops it (Huey interrupts the tasks it is running)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # any worker process left behind
        except ProcessLookupError:
            pass
        self._log.close()
        return self.process.returncode



@contextmanager
def served_with_jobs(env: dict[str, str], directory: Path, *, processes: int = 1) -> Iterator[tuple[Server, JobWorker]]:
    """The database in ``env`` migrated, then a real gunicorn and a jobs worker of ``processes`` on it (their logs
    server.log and worker.log in ``directory``), both stopped afterwards."""
    cli_in_process("db", "upgrade", env=env)
    server = Server(env, log_path=directory / "server.log")
    worker = JobWorker(env, log_path=directory / "worker.log", processes=processes)
    try:
        server.wait_ready()
        yield server, worker
    finally:
        worker.stop()
        server.stop()

class Tarpit:
    """A TCP server on 127.0.0.1 that accepts every connection, reads what it is sent and never answers.

    It counts the connections open at once, so the test can see how many deliveries one dead receiver
    holds. Closed connections are handled before new ones in each round, so a sender that closes one and
    opens the next is never counted twice."""

    def __init__(self) -> None:
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(512)
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.accepted = 0
        self.most_open = 0
        self._open: set[socket.socket] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="tarpit", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            while not self._stop.is_set():
                ready = [key.fileobj for key, _ in selector.select(timeout=0.1)]
                for conn in ready:
                    if conn is self._listener or not isinstance(conn, socket.socket):
                        continue
                    try:
                        data = conn.recv(65536)
                    except OSError:
                        data = b""
                    if not data:  # the sender gave up on this delivery
                        selector.unregister(conn)
                        self._open.discard(conn)
                        conn.close()
                if self._listener in ready:
                    while True:
                        try:
                            conn, _ = self._listener.accept()
                        except (BlockingIOError, InterruptedError):
                            break
                        conn.setblocking(False)
                        selector.register(conn, selectors.EVENT_READ)
                        self._open.add(conn)
                        self.accepted += 1
                        self.most_open = max(self.most_open, len(self._open))
        for conn in self._open:
            conn.close()
        self._listener.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def batch_status(server: Server, key: str, batch_id: str) -> dict[str, Any]:
    """GET /batches/{id} through a real server, asserted 200."""
    answer = requests.get(f"{server.url}/batches/{batch_id}", headers=bearer(key), timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()


def batch_finished(server: Server, key: str, batch_id: str, *, timeout: float = 300.0,
                   interval: float = 0.5) -> dict[str, Any]:
    """The batch's status once it is done or failed, polled until ``timeout``."""
    return wait_for(lambda: (lambda s: s if s["status"] in ("done", "failed") else None)(
        batch_status(server, key, batch_id)), timeout, f"batch {batch_id} to finish", interval=interval)


def remote_write_body(series: list[tuple[dict[str, str], list[tuple[int, float]]]]) -> bytes:
    """A Prometheus remote-write 1.0 body (a snappy-compressed WriteRequest) of (labels, [(ms, value)]) series."""
    import cramjam

    from app.monitors.intake.prompb.remote_pb2 import WriteRequest

    request = WriteRequest()
    for labels, samples in series:
        entry = request.timeseries.add()
        for name, value in sorted(labels.items()):
            label = entry.labels.add()
            label.name, label.value = name, value
        for timestamp, value in samples:
            sample = entry.samples.add()
            sample.timestamp, sample.value = timestamp, value
    return bytes(cramjam.snappy.compress_raw(request.SerializeToString()))
