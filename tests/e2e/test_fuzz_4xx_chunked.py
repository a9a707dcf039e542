"""The fuzz of tests/api/web/test_fuzz_4xx.py for the one input that needs a real server: a malformed chunked body
(Transfer-Encoding: chunked with the chunk size "zz"), sent as raw bytes to gunicorn on every POST and PATCH
route, with the database on SQLite and on the real PostgreSQL.

A route that reads a body answers 400 in the error envelope (the Azure-compatible routes in Azure's shape), not
the 500 of an exception out of gunicorn's body reader. The two routes that take no body (revoking a key,
rotating a monitor's webhook secret) never read it: they answer as for an empty body, and gunicorn closes the
connection, so the bytes that follow are never read as another request.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests

from tests.api.web.test_fuzz_4xx import AZURE_PREFIX, CODES, NIXTLA_PREFIX, ROUTES, url_of
from tests.support import Server, bearer, cli_in_process, postgres_database

pytestmark = pytest.mark.slow

PLAIN_KEY = re.compile(r"ak_[0-9a-f]{64}")
MALFORMED = b"zz\r\n{}\r\n0\r\n\r\n"


@dataclass
class Running:
    server: Server
    env: dict[str, str] = field(repr=False)
    key: str = field(repr=False)
    monitor_id: str
    stored_timestamp: str

    def target_key(self) -> str:
        created = cli_in_process("keys", "create", "--permissions", "read", "--json", env=self.env)
        return json.loads(created.stdout)["id"]


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def running(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    directory = tmp_path_factory.mktemp("chunked")
    with postgres_database() if request.param == "postgresql" else nullcontext() as postgres_url:
        env = {
            "DATABASE_URL": postgres_url or f"sqlite:///{directory / 'keys.sqlite3'}",
            "FORECAST_WORKERS": "1",
            "LOG_LEVEL": "INFO",
            "ALLOW_PRIVATE_WEBHOOKS": "1",
        }
        cli_in_process("db", "upgrade", env=env)
        key = json.loads(cli_in_process("keys", "create", "--permissions", "read,write,admin,delete",
                                        "--per-minute", "100000", "--json", env=env).stdout)["key"]
        server = Server(env, log_path=directory / "gunicorn.log")
        try:
            server.wait_ready()
            monitor = requests.post(server.url + "/monitors", json={"name": "chunked", "data_frequency": "Hours"},
                                    headers=bearer(key), timeout=30)
            assert monitor.status_code == 201, monitor.text
            stamp = "2026-01-01T00:00:00Z"
            pushed = requests.post(server.url + f"/monitors/{monitor.json()['id']}/points",
                                   json={"timestamps": [stamp], "values": [1.0]}, headers=bearer(key), timeout=60)
            assert pushed.status_code == 200, pushed.text
            yield Running(server, env, key, monitor.json()["id"], stamp)
        finally:
            server.stop()


def raw_request(port: int, method: str, path: str, key: str) -> bytes:
    """Sends the request with the malformed chunked body and reads until the server closes."""
    head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n").encode()
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head + MALFORMED)
        while chunk := sock.recv(65536):
            received += chunk
    return received


def parse(received: bytes) -> tuple[int, dict[str, str], Any]:
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    return status, headers, json.loads(body[: int(headers["content-length"])])


@pytest.mark.parametrize(("method", "rule"), sorted(ROUTES))
def test_a_malformed_chunked_body_is_a_4xx(running: Running, method: str, rule: str) -> None:
    route = ROUTES[(method, rule)]
    received = raw_request(running.server.port, method, url_of(rule, route.path(running)), running.key)  # type: ignore[arg-type]
    shown = PLAIN_KEY.sub("ak_<redacted>", received.decode("latin-1"))[:600]
    assert received.count(b"HTTP/1.1 ") == 1, shown  # one answer: nothing after it was read as a request
    status, headers, body = parse(received)
    if route.body is None:
        assert status < 500, shown
        return
    assert status == 400, shown
    assert headers["content-type"].startswith("application/json"), shown
    if rule.startswith(AZURE_PREFIX):
        assert set(body) == {"code", "message"} and body["code"] == "BadArgument", shown
        return
    if rule.startswith(NIXTLA_PREFIX):
        # the refused features' route answers before it reads a body
        assert set(body) == {"detail", "code"} and body["code"] in ("INVALID_REQUEST", "UNSUPPORTED_FEATURE"), shown
        return
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}, shown
    assert body["error"]["code"] in CODES and body["error"]["details"]["field"] == "body", shown
