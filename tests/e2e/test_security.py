"""Forwarding headers, keys in logs and response headers, against a real gunicorn (gunicorn.conf.py as shipped).

One server per concern: REQUIRE_HTTPS=1 with TRUSTED_PROXIES=0 (nobody may claim HTTPS for the client), and a
plain one whose log file is read back after keys were sent through every channel a client might put one in.
"""

from __future__ import annotations

import io
import json
import logging
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.support import Server, bearer, cli_in_process

pytestmark = pytest.mark.slow

KEY = re.compile(r"ak_[0-9a-fA-F]{64}")


def _database(directory: Path, **extra: str) -> dict[str, str]:
    env = {"DATABASE_URL": f"sqlite:///{directory / 'keys.sqlite3'}", "FORECAST_WORKERS": "1", **extra}
    cli_in_process("db", "upgrade", env=env)
    return env


def _create_key(env: dict[str, str]) -> str:
    return json.loads(cli_in_process("keys", "create", "--permissions", "read", "--json", env=env).stdout)["key"]


@pytest.fixture(scope="module")
def https_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    directory = tmp_path_factory.mktemp("https-only")
    env = _database(directory, REQUIRE_HTTPS="1", TRUSTED_PROXIES="0", LOG_LEVEL="WARNING")
    key = _create_key(env)
    server = Server(env, log_path=directory / "gunicorn.log")
    server.wait_ready()
    yield server, key
    server.stop()


@pytest.mark.parametrize("header,value", [
    ("X-Forwarded-Proto", "https"),
    ("X-Forwarded-Protocol", "ssl"),
    ("X-Forwarded-Ssl", "on"),
    ("Forwarded", "proto=https"),
])
def test_a_spoofed_scheme_header_from_loopback_does_not_pass_require_https(
    https_only: tuple[Server, str], header: str, value: str
) -> None:
    # gunicorn's defaults believe these headers from 127.0.0.1; with TRUSTED_PROXIES=0 nothing may.
    server, key = https_only
    response = requests.get(server.url + "/verify", headers={**bearer(key), header: value}, timeout=10)
    assert response.status_code == 403, response.text
    assert response.json()["error"]["message"] == "HTTPS is required."
    assert response.headers["Cache-Control"] == "no-store"  # an error to a keyed request is not cached either


def test_probes_stay_public_under_require_https(https_only: tuple[Server, str]) -> None:
    assert requests.get(https_only[0].url + "/healthz", timeout=10).status_code == 200


# --- no plain key in any log line ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    directory = tmp_path_factory.mktemp("logged")
    env = _database(directory, LOG_LEVEL="DEBUG")
    key = _create_key(env)
    server = Server(env, log_path=directory / "gunicorn.log")
    server.wait_ready()
    yield server, key
    server.stop()


def _fingerprint(key: str) -> str:
    return f"{key[:11]}…{key[-4:]}"


def _raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer


def test_keys_sent_through_every_channel_never_reach_the_log(logged: tuple[Server, str]) -> None:
    server, key = logged
    stranger = "ak_" + "ab12" * 16  # key-shaped but unknown: a typo'd or another deployment's key
    url = server.url
    for candidate in (key, stranger):
        # header: as the credential, without the Bearer word, in another header, as a request id
        requests.get(url + "/verify", headers=bearer(candidate), timeout=10)
        requests.get(url + "/verify", headers={"Authorization": candidate}, timeout=10)
        tagged = requests.get(url + "/verify", headers={"X-Api-Key": candidate, "X-Request-Id": candidate}, timeout=10)
        assert tagged.headers["X-Request-Id"] != candidate  # a key-shaped request id is not echoed either
        # path and query string: a key pasted into the URL
        requests.get(f"{url}/{candidate}?api_key={candidate}", headers=bearer(candidate), timeout=10)
        requests.get(f"{url}/verify?api_key={candidate}", timeout=10)
        # form and JSON bodies
        requests.post(url + "/forecast", data={"api_key": candidate}, headers=bearer(key), timeout=10)
        requests.post(url + "/forecast", json={"api_key": candidate, "series": candidate}, headers=bearer(key),
                      timeout=10)
        requests.post(url + "/forecast", data=f'{{"api_key": "{candidate}"', headers=bearer(candidate),
                      timeout=10)
        # a request line gunicorn itself refuses, and quotes in its own log
        _raw(server.port, f"GET /{candidate} HTTP/1.1 junk\r\nHost: x\r\n\r\n".encode())
    time.sleep(0.5)
    log = server.log()
    assert KEY.findall(log) == [], [line for line in log.splitlines() if KEY.search(line)][:3]
    assert key[3:] not in log and stranger[3:] not in log
    # The lines are there, redacted to the fingerprint the key listings show, so they can still be searched.
    assert f'"path": "/{_fingerprint(key)}"' in log
    assert _fingerprint(stranger) in log


def test_the_formatter_redacts_every_part_of_a_record() -> None:
    # A future log call that passes a key in the message, its arguments, extra fields or an exception.
    from app.web.observability import JsonFormatter, redact_keys

    key = "ak_" + "0123456789abcdef" * 4
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("tests.redaction")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("key %s in %s", key, "args")
        logger.warning("key " + key.upper().replace("AK_", "ak_"), extra={"fields": {"body": {"api_key": key}}})
        try:
            raise ValueError(f"bad key {key}")
        except ValueError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    output = stream.getvalue()
    assert KEY.findall(output) == []
    assert output.count("ak_01234567") == 4
    assert redact_keys(key) == "ak_01234567…cdef"
    assert redact_keys("no key here: ak_123") == "no key here: ak_123"


# --- response headers ---------------------------------------------------------------------------------------


def test_keyed_answers_are_never_stored_and_every_answer_is_nosniff(logged: tuple[Server, str]) -> None:
    server, key = logged
    keyed = [
        requests.get(server.url + "/verify", headers=bearer(key), timeout=10),  # 200
        requests.get(server.url + "/verify", headers=bearer("ak_" + "0" * 64), timeout=10),  # 401
        requests.get(server.url + "/no-such-thing", headers=bearer(key), timeout=10),  # 404
        requests.post(server.url + "/forecast", data="{", headers=bearer(key), timeout=10),  # 400/415
        requests.get(server.url + "/healthz", headers=bearer(key), timeout=10),  # public, but a key was sent
    ]
    for response in keyed:
        assert response.headers.get("Cache-Control") == "no-store", (response.status_code, response.headers)
        assert response.headers.get("X-Content-Type-Options") == "nosniff"
    anonymous = requests.get(server.url + "/healthz", timeout=10)
    assert anonymous.headers.get("X-Content-Type-Options") == "nosniff"
    assert anonymous.headers.get("Cache-Control") != "no-store"
