"""The nginx template as shipped, rendered by the envsubst command its header gives, on the nginx installed here
(Debian 12's nginx-light is 1.22): it must load (`nginx -t`) and serve HTTP/2 over TLS."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ROOT, _self_signed, free_port, missing_service, nginx_binary

TEMPLATE = ROOT / "nginx" / "forecast.conf.template"


def envsubst_command() -> tuple[str, str]:
    """The variable list of the envsubst command in the template's header, as an operator copies it."""
    header = re.search(r"envsubst '([^']+)'", TEMPLATE.read_text())
    assert header, "the template's header names its envsubst command"
    binary = shutil.which("envsubst")
    if binary is None:
        missing_service("envsubst is not installed (apt-get install -y gettext-base)")
    return str(binary), header.group(1)


@pytest.fixture
def rendered(tmp_path: Path) -> tuple[Path, int]:
    cert, key = _self_signed(tmp_path)
    https_port = free_port()
    binary, variables = envsubst_command()
    values = {"SERVER_NAME": "localhost", "HTTP_PORT": str(free_port()), "HTTPS_PORT": str(https_port),
              "UPSTREAM": f"127.0.0.1:{free_port()}", "TLS_CERT": str(cert), "TLS_KEY": str(key),
              "MAX_BODY": "16m", "MAX_UPLOAD": "1g"}
    site = subprocess.run([binary, variables], input=TEMPLATE.read_text(), capture_output=True, text=True,
                          check=True, env={**os.environ, **values}).stdout
    assert "${" not in site.replace("$remote_addr", "").replace("$scheme", "")
    (tmp_path / "forecast.conf").write_text(site)
    config = tmp_path / "nginx.conf"
    # The site goes in as an operator's conf.d file does: included, byte for byte, in the http block.
    config.write_text(
        "user root;\n"
        f"daemon off;\npid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/nginx-error.log;\nworker_processes 1;\n"
        "events { worker_connections 64; }\n"
        f"http {{\n access_log off;\n client_body_temp_path {tmp_path}/body;\n proxy_temp_path {tmp_path}/proxy;\n"
        f" fastcgi_temp_path {tmp_path}/fcgi;\n uwsgi_temp_path {tmp_path}/uwsgi;\n scgi_temp_path {tmp_path}/scgi;\n"
        f" include {tmp_path}/forecast.conf;\n}}\n"
    )
    return config, https_port


def test_the_template_loads_as_shipped(rendered: tuple[Path, int], tmp_path: Path) -> None:
    config, _ = rendered
    checked = subprocess.run([nginx_binary(), "-t", "-c", str(config), "-e", str(tmp_path / "nginx-error.log")],
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    assert "test is successful" in checked.stderr


@pytest.fixture
def running(rendered: tuple[Path, int], tmp_path: Path) -> Iterator[int]:
    config, port = rendered
    proxy = subprocess.Popen([nginx_binary(), "-c", str(config), "-e", str(tmp_path / "nginx-error.log")],
                             start_new_session=True, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proxy.poll() is None, proxy.stderr.read() if proxy.stderr else ""
                assert time.monotonic() < deadline, "nginx did not start listening"
                time.sleep(0.1)
        yield port
    finally:
        proxy.send_signal(signal.SIGQUIT)
        try:
            proxy.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proxy.kill()
            proxy.wait()


def test_the_template_serves_http2_over_tls(running: int) -> None:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2", "http/1.1"])
    with socket.create_connection(("127.0.0.1", running), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="localhost") as tls:
        assert tls.selected_alpn_protocol() == "h2"
