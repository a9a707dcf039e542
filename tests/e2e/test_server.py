"""End to end through a real gunicorn process (and nginx over TLS), as an admin runs the service."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest
import requests

from tests.support import (
    ROOT,
    Server,
    bearer,
    cli_in_process,
    postgres_database,
    running_nginx,
)

pytestmark = pytest.mark.slow
KEY = re.compile(r"ak_[0-9a-f]{64}")
CONCURRENT_FORECASTS = 10


@pytest.fixture
def server_env(database_url: str, tmp_path: Path) -> dict[str, str]:
    """For a test whose outcome depends on what the database stores: run on SQLite and on PostgreSQL."""
    env = {"DATABASE_URL": database_url, "FORECAST_WORKERS": "1", "USAGE_FLUSH_SECONDS": "1", "LOG_LEVEL": "INFO"}
    cli_in_process("db", "upgrade", env=env)
    return env


@pytest.fixture
def sqlite_server_env(tmp_path: Path) -> dict[str, str]:
    """For a test of the server around the database (start-up checks, TLS, logs): SQLite only."""
    env = {"DATABASE_URL": f"sqlite:///{tmp_path / 'keys.sqlite3'}", "FORECAST_WORKERS": "1",
           "USAGE_FLUSH_SECONDS": "1", "LOG_LEVEL": "INFO"}
    cli_in_process("db", "upgrade", env=env)
    return env


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def shared(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[Server, dict[str, str]]]:
    """One server per database for the tests that only call it (it is started once, not once per test)."""
    directory = tmp_path_factory.mktemp(f"shared-{request.param}")
    with ExitStack() as stack:
        if request.param == "sqlite":
            url = f"sqlite:///{directory / 'keys.sqlite3'}"
        else:
            url = stack.enter_context(postgres_database())  # its own database: others drop their tables
        env = {"DATABASE_URL": url, "FORECAST_WORKERS": "1", "USAGE_FLUSH_SECONDS": "1", "LOG_LEVEL": "INFO"}
        cli_in_process("db", "upgrade", env=env)
        running = Server(env, log_path=directory / "gunicorn.log")
        stack.callback(running.stop)
        running.wait_ready()
        yield running, env


@pytest.fixture
def server(shared: tuple[Server, dict[str, str]]) -> Server:
    return shared[0]


@pytest.fixture
def shared_env(shared: tuple[Server, dict[str, str]]) -> dict[str, str]:
    return shared[1]


def create_key(env: dict[str, str], *args: str) -> dict:
    return json.loads(cli_in_process("keys", "create", "--permissions", "read", *args, "--json", env=env).stdout)


def usage_of(env: dict[str, str], key_id: str) -> int:
    return json.loads(cli_in_process("keys", "show", key_id, "--json", env=env).stdout)["usage_count"]


def test_verify_through_gunicorn(server: Server, shared_env: dict[str, str]) -> None:
    key = create_key(shared_env)
    response = requests.get(server.url + "/verify", headers=bearer(key["key"]), timeout=10)
    assert response.status_code == 200
    assert response.json()["apiKey"]["permissions"] == ["read"]
    assert requests.get(server.url + "/verify", timeout=10).status_code == 401


def test_usage_exact_after_concurrent_requests_and_a_graceful_restart(server_env: dict[str, str], tmp_path: Path
                                                                      ) -> None:
    server = Server(server_env, log_path=tmp_path / "gunicorn.log")  # its own: this test stops it
    try:
        server.wait_ready()
        key = create_key(server_env, "--per-minute", "1000")
        with requests.Session() as session:

            def call(_: int) -> int:
                return session.get(server.url + "/verify", headers=bearer(key["key"]), timeout=30).status_code

            with ThreadPoolExecutor(16) as pool:
                statuses = list(pool.map(call, range(200)))
        assert statuses == [200] * 200
        assert server.stop() == 0  # SIGTERM: graceful; pending counts are flushed on the way out
    finally:
        server.stop()
    assert usage_of(server_env, key["id"]) == 200

    restarted = Server(server_env, log_path=tmp_path / "gunicorn2.log")
    try:
        restarted.wait_ready()
        for _ in range(7):
            assert requests.get(restarted.url + "/verify", headers=bearer(key["key"]), timeout=10).status_code == 200
        deadline = time.monotonic() + 10
        while usage_of(server_env, key["id"]) != 207 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert usage_of(server_env, key["id"]) == 207  # flushed while running, within seconds
    finally:
        restarted.stop()


def test_cli_revocation_reaches_a_running_server_within_5_seconds(server: Server, shared_env: dict[str, str]) -> None:
    key = create_key(shared_env)
    assert requests.get(server.url + "/verify", headers=bearer(key["key"]), timeout=10).status_code == 200
    cli_in_process("keys", "revoke", key["id"], env=shared_env)
    revoked_at = time.monotonic()
    while True:
        status = requests.get(server.url + "/verify", headers=bearer(key["key"]), timeout=10).status_code
        if status == 401:
            break
        assert time.monotonic() - revoked_at < 5.5, "revoked key still accepted after 5 s"
        time.sleep(0.1)


@pytest.mark.parametrize("shared", ["sqlite"], indirect=True)  # what is logged does not depend on the database
def test_no_plain_key_in_any_log_line(server: Server, shared_env: dict[str, str]) -> None:
    created = cli_in_process("keys", "create", "--permissions", "read", "--json", env=shared_env)
    key = json.loads(created.stdout)["key"]
    assert KEY.findall(created.stderr) == []
    requests.get(server.url + "/verify", headers=bearer(key), timeout=10)
    requests.post(server.url + "/forecast", headers=bearer(key), data="{bad", timeout=10)
    requests.get(server.url + "/verify", headers={"Authorization": key}, timeout=10)  # no Bearer word
    requests.get(server.url + "/verify", headers=bearer(key[:-1] + "x"), timeout=10)
    time.sleep(0.5)
    log = server.log()
    assert '"path": "/verify"' in log  # the access log is there to be searched
    assert KEY.findall(log) == []
    assert key[3:] not in log


def test_more_than_one_worker_without_redis_is_refused(sqlite_server_env: dict[str, str], tmp_path: Path) -> None:
    refused = Server({**sqlite_server_env, "WEB_CONCURRENCY": "2"}, log_path=tmp_path / "refused.log")
    assert refused.process.wait(timeout=60) != 0
    assert "without REDIS_URL" in refused.log()
    refused.stop()


def _closed_without_answer(port: int, host: str) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"GET /verify HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        try:
            return sock.recv(65536) == b""
        except ConnectionResetError:
            return True


def _tls_handshake(port: int, server_name: str, cert: Path, alpn: tuple[str, ...] = ("http/1.1",)) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(cert))
    context.set_alpn_protocols(list(alpn))
    return context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname=server_name)


def test_nginx_terminates_tls_in_front_of_gunicorn(sqlite_server_env: dict[str, str], tmp_path: Path) -> None:
    template = (ROOT / "nginx" / "forecast.conf.template").read_text()
    # The listen parameter: the one form every nginx of current long-term distributions loads (1.22 has no
    # "http2 on;"); newer ones accept it with a deprecation warning.
    assert "    listen ${HTTPS_PORT} ssl http2;\n" in template
    app = Server({**sqlite_server_env, "TRUSTED_PROXIES": "1", "REQUIRE_HTTPS": "1"}, log_path=tmp_path / "app.log")
    try:
        app.wait_ready()
        key = create_key(sqlite_server_env)
        with running_nginx(tmp_path, app.port) as (base, http_port, cert):
            https_port = int(base.rsplit(":", 1)[1])
            response = requests.get(base + "/verify", headers=bearer(key["key"]), verify=str(cert), timeout=10)
            assert response.status_code == 200, response.text
            assert response.json()["success"] is True
            assert response.headers["Strict-Transport-Security"].startswith("max-age=")
            assert response.headers["X-Content-Type-Options"] == "nosniff"  # one header, not the app's and ours
            assert response.headers["Cache-Control"] == "no-store"

            # HTTP/2 is offered (ALPN) on the served name.
            with _tls_handshake(https_port, "localhost", cert, ("h2", "http/1.1")) as tls:
                assert tls.selected_alpn_protocol() == "h2"

            # Plain HTTP: refused in the envelope, naming HTTPS; no redirect inviting the key to be sent again.
            plain = requests.get(f"http://localhost:{http_port}/verify", headers=bearer(key["key"]),
                                 allow_redirects=False, timeout=10)
            assert plain.status_code == 403 and "Location" not in plain.headers
            assert plain.headers["Content-Type"].startswith("application/json")
            assert plain.json()["error"]["code"] == "UNAUTHORIZED"
            assert "HTTPS" in plain.json()["error"]["message"]

            # Hosts we do not serve: the connection is closed unanswered, and TLS is refused for their names.
            assert _closed_without_answer(http_port, "evil.example")
            with _tls_handshake(https_port, "localhost", cert) as tls:  # our certificate, someone else's Host
                tls.sendall(b"GET /verify HTTP/1.1\r\nHost: evil.example\r\n\r\n")
                assert tls.recv(65536) == b""
            with pytest.raises(ssl.SSLError):
                _tls_handshake(https_port, "evil.example", cert).close()

            # The app refuses plain HTTP that reaches it directly, before looking at the key.
            direct = requests.get(app.url + "/verify", headers=bearer(key["key"]), timeout=10)
            assert direct.status_code == 403 and direct.json()["error"]["message"] == "HTTPS is required."

            too_big = requests.post(
                base + "/forecast", headers=bearer(key["key"]), data=b"x" * (16 * 1024 * 1024 + 1),
                verify=str(cert), timeout=30,
            )
            assert too_big.status_code == 413
            assert too_big.json()["error"]["code"] == "INVALID_REQUEST"
    finally:
        app.stop()


def test_ctrl_c_with_forecasts_running_and_queued_stops_at_once(sqlite_server_env: dict[str, str],
                                                                  tmp_path: Path) -> None:
    """Ctrl-C reaches the whole process group: gunicorn quits at once and its worker's exit closes the forecast
    pool. A forecast waiting for a worker waited out the whole forecast timeout for one that would never come
    (make run took 30-60 s to stop, then gunicorn's "Worker was sent SIGKILL!"); it now ends at once with a
    retry-later 500, and the process is gone well within that timeout."""
    timeout = 120
    env = {**sqlite_server_env, "FORECAST_TIMEOUT_SECONDS": str(timeout)}
    key = create_key(env)["key"]
    server = Server(env, log_path=tmp_path / "gunicorn.log")
    start = 1_577_836_800  # 2020-01-01T00:00:00Z
    stamps = [time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(start + 3600 * i)) for i in range(20_000)]
    body = {"forecast_horizon": 48, "data_frequency": "Hours", "forecast_frequency": "Hours",
            "series": [{"timestamps": stamps, "values": [100 + (i % 24) + (i * 7 % 5) for i in range(20_000)]}]}
    try:
        server.wait_ready()
        with ThreadPoolExecutor(CONCURRENT_FORECASTS) as clients:
            # One worker in the pool: one forecast runs, the others wait for it.
            answers = [clients.submit(requests.post, f"{server.url}/forecast", json=body, timeout=timeout + 30,
                                      headers={**bearer(key), "X-Model-Id": "forecast-model-1"})
                       for _ in range(CONCURRENT_FORECASTS)]
            time.sleep(1.0)
            os.killpg(server.process.pid, signal.SIGINT)
            try:
                server.process.wait(timeout=timeout / 4)  # before: the whole forecast timeout
            except subprocess.TimeoutExpired:
                pytest.fail(f"the server was still running {timeout / 4:g} s after Ctrl-C; its log:\n"
                            f"{server.log()[-6000:]}")
            for answer in answers:
                try:
                    got = answer.result()
                except requests.ConnectionError:
                    continue  # a quick stop may drop a request outright; what matters is that none hangs
                assert got.status_code in (200, 500), got.text
                if got.status_code == 500:  # "the server is stopping", or refused before: "saturated"
                    assert got.headers["Retry-After"] == "5", got.text
        assert "SIGKILL" not in server.log()
    finally:
        server.stop()
