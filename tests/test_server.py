"""End to end through a real gunicorn process (and nginx over TLS), as an admin runs the service."""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests

from tests.support import ROOT, Server, bearer, cli, free_port, missing_service

pytestmark = pytest.mark.slow
KEY = re.compile(r"ak_[0-9a-f]{64}")


@pytest.fixture
def server_env(database_url: str, tmp_path: Path) -> dict[str, str]:
    env = {"DATABASE_URL": database_url, "FORECAST_WORKERS": "1", "USAGE_FLUSH_SECONDS": "1", "LOG_LEVEL": "INFO"}
    cli("db", "upgrade", env=env)
    return env


@pytest.fixture
def server(server_env: dict[str, str], tmp_path: Path) -> Iterator[Server]:
    running = Server(server_env, log_path=tmp_path / "gunicorn.log")
    running.wait_ready()
    yield running
    running.stop()


def create_key(env: dict[str, str], *args: str) -> dict:
    return json.loads(cli("keys", "create", "--permissions", "read", *args, "--json", env=env).stdout)


def usage_of(env: dict[str, str], key_id: str) -> int:
    return json.loads(cli("keys", "show", key_id, "--json", env=env).stdout)["usage_count"]


def test_verify_through_gunicorn(server: Server, server_env: dict[str, str]) -> None:
    key = create_key(server_env)
    response = requests.get(server.url + "/verify", headers=bearer(key["key"]), timeout=10)
    assert response.status_code == 200
    assert response.json()["apiKey"]["permissions"] == ["read"]
    assert requests.get(server.url + "/verify", timeout=10).status_code == 401


def test_usage_exact_after_concurrent_requests_and_a_graceful_restart(
    server: Server, server_env: dict[str, str], tmp_path: Path
) -> None:
    key = create_key(server_env, "--per-minute", "1000")
    with requests.Session() as session:

        def call(_: int) -> int:
            return session.get(server.url + "/verify", headers=bearer(key["key"]), timeout=30).status_code

        with ThreadPoolExecutor(16) as pool:
            statuses = list(pool.map(call, range(200)))
    assert statuses == [200] * 200
    assert server.stop() == 0  # SIGTERM: graceful; pending counts are flushed on the way out
    assert usage_of(server_env, key["id"]) == 200

    restarted = Server(server_env, log_path=tmp_path / "gunicorn2.log")
    try:
        restarted.wait_ready()
        for _ in range(7):
            assert requests.get(restarted.url + "/verify", headers=bearer(key["key"]), timeout=10).status_code == 200
        deadline = time.monotonic() + 10
        while usage_of(server_env, key["id"]) != 207 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert usage_of(server_env, key["id"]) == 207  # flushed while running, within seconds (D2.5)
    finally:
        restarted.stop()


def test_cli_revocation_reaches_a_running_server_within_5_seconds(server: Server, server_env: dict[str, str]) -> None:
    key = create_key(server_env)
    assert requests.get(server.url + "/verify", headers=bearer(key["key"]), timeout=10).status_code == 200
    cli("keys", "revoke", key["id"], env=server_env)
    revoked_at = time.monotonic()
    while True:
        status = requests.get(server.url + "/verify", headers=bearer(key["key"]), timeout=10).status_code
        if status == 401:
            break
        assert time.monotonic() - revoked_at < 5.5, "revoked key still accepted after 5 s"
        time.sleep(0.1)


def test_no_plain_key_in_any_log_line(server: Server, server_env: dict[str, str]) -> None:
    created = cli("keys", "create", "--permissions", "read", "--json", env=server_env)
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


def test_more_than_one_worker_without_redis_is_refused(server_env: dict[str, str], tmp_path: Path) -> None:
    refused = Server({**server_env, "WEB_CONCURRENCY": "2"}, log_path=tmp_path / "refused.log")
    assert refused.process.wait(timeout=60) != 0
    assert "without REDIS_URL" in refused.log()
    refused.stop()


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


def test_nginx_terminates_tls_in_front_of_gunicorn(server_env: dict[str, str], tmp_path: Path) -> None:
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if nginx is None:
        missing_service("nginx is not installed (apt-get install -y nginx-light)")
    app = Server({**server_env, "TRUSTED_PROXIES": "1", "REQUIRE_HTTPS": "1"}, log_path=tmp_path / "app.log")
    app.wait_ready()
    config, http_port, https_port, cert = render_nginx(tmp_path, app.port)
    proxy = subprocess.Popen([nginx, "-c", str(config), "-e", str(tmp_path / "nginx-error.log")])
    try:
        key = create_key(server_env)
        base = f"https://localhost:{https_port}"
        deadline = time.monotonic() + 10
        while True:
            try:
                response = requests.get(base + "/verify", headers=bearer(key["key"]), verify=str(cert), timeout=10)
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline, (tmp_path / "nginx-error.log").read_text()
                time.sleep(0.1)
        assert response.status_code == 200, response.text
        assert response.json()["success"] is True
        assert response.headers["Strict-Transport-Security"].startswith("max-age=")
        assert response.headers["X-Content-Type-Options"] == "nosniff"

        redirect = requests.get(f"http://localhost:{http_port}/verify", allow_redirects=False, timeout=10)
        assert redirect.status_code == 308
        assert redirect.headers["Location"] == f"https://localhost:{https_port}/verify"

        # The app refuses plain HTTP that reaches it directly, before looking at the key (D6.6).
        direct = requests.get(app.url + "/verify", headers=bearer(key["key"]), timeout=10)
        assert direct.status_code == 403 and direct.json()["error"]["message"] == "HTTPS is required."

        too_big = requests.post(
            base + "/forecast", headers=bearer(key["key"]), data=b"x" * (16 * 1024 * 1024 + 1), verify=str(cert),
            timeout=30,
        )
        assert too_big.status_code == 413
        assert too_big.json()["error"]["code"] == "INVALID_REQUEST"
    finally:
        proxy.send_signal(signal.SIGQUIT)
        proxy.wait(timeout=10)
        app.stop()
