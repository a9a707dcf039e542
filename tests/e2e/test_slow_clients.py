"""Slow and malformed clients against a real gunicorn started as a PaaS starts it: only PORT set, so
gunicorn.conf.py (as shipped) listens on every interface with nothing in front of it.

- Clients that send a request head, or a body, and then stall must not take the service offline: /healthz and a
  keyed forecast keep answering within a second while more of them than the server has threads stay connected
  (and come back each time the server cuts them off).
- What a stalled client gets: 408 in the error envelope (or, having sent nothing, a closed connection).
- gunicorn's own refusals (request line or header too large, malformed) come in the error envelope, not HTML.
- A key-shaped string in any letter case never reaches the log, nor comes back in X-Request-Id or an error.
"""

from __future__ import annotations

import json
import re
import selectors
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support import (
    REDIS_URL,
    PaasServer,
    bearer,
    cli_in_process,
    flush_redis,
    missing_service,
    redis_available,
    wait_for,
)

pytestmark = pytest.mark.slow

WITHIN = 1.0  # the functional bound: every probe answered within a second while the attack runs
TRICKLE_SECONDS = 0.5  # a body attacker sends one byte this often
ANY_CASE_KEY = re.compile(r"ak_[0-9a-f]{64}", re.IGNORECASE)
FORECAST = {
    "series": [{"timestamps": [f"2026-01-{day:02d}T00:00:00" for day in range(1, 25)],
                "values": [float(10 + day % 5) for day in range(24)]}],
    "forecast_horizon": 3,
    "data_frequency": "Daily",
    "forecast_frequency": "Daily",
}


def _start(directory: Path, **extra: str) -> tuple[PaasServer, str]:
    env = {"DATABASE_URL": f"sqlite:///{directory / 'keys.sqlite3'}", "FORECAST_WORKERS": "1",
           "AUTH_FAILURE_LIMIT": "100000/minute", "LOG_LEVEL": "INFO", **extra}
    cli_in_process("db", "upgrade", env=env)
    created = cli_in_process("keys", "create", "--permissions", "read", "--per-minute", "1000000", "--per-hour",
                             "10000000", "--per-day", "100000000", "--json", env=env)
    server = PaasServer(env, log_path=directory / "gunicorn.log")
    server.wait_ready()
    return server, json.loads(created.stdout)["key"]


@pytest.fixture(scope="module")
def paas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PaasServer, str]]:
    """The shipped configuration: 32 threads, the default client limits."""
    server, key = _start(tmp_path_factory.mktemp("paas"))
    yield server, key
    server.stop()


@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PaasServer, str]]:
    """Short client limits and 4 threads (2 upload slots), so what a stalled client gets is seen quickly."""
    server, key = _start(tmp_path_factory.mktemp("tight"), GUNICORN_THREADS="4", HEADER_TIMEOUT_SECONDS="1",
                         BODY_TIMEOUT_SECONDS="1", BODY_MIN_BYTES_PER_SECOND="1000", SEND_STALL_SECONDS="2")
    yield server, key
    server.stop()


# --- the attack -------------------------------------------------------------------------------------------------


def body_attack_head(key: str) -> bytes:
    return (f"POST /forecast HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
            "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n").encode()


HEAD_ATTACK = b"GET / HTTP/1.1\r\n"


class Attackers:
    """Keeps `heads` connections that sent "GET / HTTP/1.1\\r\\n" and nothing more, and `bodies` that announced a
    100,000-byte body (with a valid key) and send one byte of it every TRICKLE_SECONDS. Each one the server answers
    or closes is opened again at once, so the attack lasts as long as the test wants."""

    def __init__(self, port: int, key: str, *, heads: int, bodies: int) -> None:
        self.port = port
        self.openings = {"head": HEAD_ATTACK, "body": body_attack_head(key)}
        self.wanted = {"head": heads, "body": bodies}
        self.selector = selectors.DefaultSelector()
        self.stopping = threading.Event()
        self.connected: Counter[str] = Counter()  # connections opened, over the attack
        self.answers: dict[str, list[bytes]] = {"head": [], "body": []}
        self.received: dict[Any, bytes] = {}
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, name="attackers", daemon=True)

    def __enter__(self) -> Attackers:
        self.thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.stopping.set()
        self.thread.join(timeout=30)
        for key in list(self.selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self.selector.close()

    def _open(self, kind: str) -> None:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        sock.sendall(self.openings[kind])
        sock.setblocking(False)
        self.selector.register(sock, selectors.EVENT_READ, kind)
        self.connected[kind] += 1

    def _run(self) -> None:
        try:
            for kind, count in self.wanted.items():
                for _ in range(count):
                    self._open(kind)
            next_trickle = time.monotonic()
            while not self.stopping.is_set():
                for key, _ in self.selector.select(0.05):
                    sock, kind = key.fileobj, key.data
                    try:
                        data = sock.recv(65536)  # type: ignore[union-attr]
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if data:  # an answer, read to the close that follows it
                        self.received[sock] = self.received.get(sock, b"") + data
                        continue
                    if sock in self.received:
                        self.answers[kind].append(self.received.pop(sock))
                    self.selector.unregister(sock)
                    sock.close()  # type: ignore[union-attr]
                    self._open(kind)  # and back again
                if time.monotonic() >= next_trickle:
                    next_trickle += TRICKLE_SECONDS
                    for key in list(self.selector.get_map().values()):
                        if key.data == "body":
                            try:
                                key.fileobj.send(b" ")  # type: ignore[union-attr]
                            except OSError:
                                pass
        except Exception as error:  # the test reports it
            self.errors.append(repr(error))

    def statuses(self, kind: str) -> Counter[int]:
        return Counter(int(answer.split(b" ", 2)[1]) for answer in self.answers[kind] if answer.startswith(b"HTTP/"))


def answered_within_a_second(server: PaasServer, key: str) -> None:
    for method, path, extra in (("GET", "/healthz", {}),
                                ("POST", "/forecast", {"headers": bearer(key), "json": FORECAST})):
        started = time.monotonic()
        try:
            response = requests.request(method, server.url + path, timeout=WITHIN + 2, **extra)
        except requests.RequestException as error:
            raise AssertionError(f"{method} {path} unanswered while slow clients are connected: {error!r}") from None
        elapsed = time.monotonic() - started
        assert response.status_code == 200, (path, response.status_code, response.text[:300])
        assert elapsed < WITHIN, f"{method} {path} took {elapsed:.2f}s while slow clients are connected"


def test_slow_clients_do_not_take_the_server_offline(paas: tuple[PaasServer, str]) -> None:
    # More stalled heads than threads (32), and more trickled bodies than threads, at once. The attack lasts past
    # the head limit (5 s) and the body's first 10 s, so the server cuts attackers off and they come back.
    server, key = paas
    answered_within_a_second(server, key)
    with Attackers(server.port, key, heads=40, bodies=40) as attack:
        wait_for(lambda: attack.connected["head"] >= 40 and attack.connected["body"] >= 40, timeout=30,
                 message="the attackers to connect")
        time.sleep(0.5)  # their heads are read and their bodies begun
        ends = time.monotonic() + 12
        while time.monotonic() < ends:
            answered_within_a_second(server, key)
            time.sleep(0.2)
        # Bounded, not just outnumbered: stalled heads and bodies get their 408, in the envelope.
        wait_for(lambda: attack.statuses("head") and attack.statuses("body"), timeout=30,
                 message="the server to cut the attackers off")
        answered_within_a_second(server, key)
        assert attack.errors == []
    assert set(attack.statuses("head")) == {408} and set(attack.statuses("body")) == {408}
    for answer in attack.answers["head"][:3] + attack.answers["body"][:3]:
        envelope(answer, 408)


def test_slow_clients_do_not_take_two_processes_offline(tmp_path: Path) -> None:
    if not redis_available():
        missing_service(f"Redis is not reachable at {REDIS_URL} (two processes share their counters there)")
    flush_redis()
    server, key = _start(tmp_path, WEB_CONCURRENCY="2", REDIS_URL=REDIS_URL)
    try:
        with Attackers(server.port, key, heads=80, bodies=40) as attack:
            wait_for(lambda: attack.connected["head"] >= 80 and attack.connected["body"] >= 40, timeout=30,
                     message="the attackers to connect")
            time.sleep(0.5)
            ends = time.monotonic() + 7  # past the head limit: cut-off attackers come back
            while time.monotonic() < ends:
                answered_within_a_second(server, key)
                time.sleep(0.2)
            assert attack.errors == []
            assert attack.statuses("head")  # and were cut off meanwhile
    finally:
        server.stop()


# --- what a stalled client gets -------------------------------------------------------------------------------


def raw_exchange(port: int, data: bytes, *, then: bytes = b"", pause: float = 0.0, wait: float = 30.0) -> bytes:
    """Everything the server sends back until it closes the connection (`wait` is a hang detector)."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        sock.sendall(data)
        if then:
            time.sleep(pause)
            sock.sendall(then)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass
        return answer


def envelope(raw: bytes, status: int) -> dict[str, Any]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert int(lines[0].split()[1]) == status, raw[:300]
    headers = {name.lower(): value for name, _, value in (line.partition(": ") for line in lines[1:])}
    assert headers["content-type"].startswith("application/json"), raw[:300]
    error = json.loads(body[: int(headers["content-length"])])["error"]
    assert set(error) <= {"code", "message", "details"} and error["code"] == "INVALID_REQUEST" and error["message"]
    return headers


def test_a_head_that_stops_arriving_is_answered_408(tight: tuple[PaasServer, str]) -> None:
    server, _ = tight
    envelope(raw_exchange(server.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n"), 408)


def test_a_connection_that_sends_nothing_is_closed(tight: tuple[PaasServer, str]) -> None:
    assert raw_exchange(tight[0].port, b"") == b""


def test_a_body_that_stops_arriving_is_answered_408_and_closed(tight: tuple[PaasServer, str]) -> None:
    server, key = tight
    answer = raw_exchange(server.port, body_attack_head(key) + b'{"series": ')
    headers = envelope(answer, 408)
    assert headers["connection"] == "close" and "x-request-id" in headers  # the app's own answer


def test_an_azure_body_that_stops_arriving_is_answered_408_in_azures_shape(tight: tuple[PaasServer, str]) -> None:
    # The 408 of every route (docs/operating.md), not Azure's InvalidJsonFormat: the body never came, it is no
    # JSON that failed to parse.
    server, key = tight
    head = (f"POST /anomalydetector/v1.1/timeseries/entire/detect HTTP/1.1\r\nHost: x\r\n"
            f"Ocp-Apim-Subscription-Key: {key}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
    answer = raw_exchange(server.port, head.encode() + b'{"series": ')
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.split()[1] == b"408", answer[:300]
    headers_text, _, body = rest.partition(b"\r\n\r\n")
    headers = {name.lower(): value for name, _, value in
               (line.partition(": ") for line in headers_text.decode("latin-1").split("\r\n"))}
    error = json.loads(body[: int(headers["content-length"])])
    assert set(error) == {"code", "message"} and headers["x-ms-error-code"] == error["code"] != "InvalidJsonFormat"
    assert headers["connection"] == "close"


def test_stalled_bodies_beyond_the_upload_slots_are_answered_408_too(tight: tuple[PaasServer, str]) -> None:
    # 4 threads, so 2 upload slots: two stalled bodies hold them, two more wait in the event loop; all four are
    # cut off, and meanwhile the other two threads answer.
    server, key = tight
    socks = [socket.create_connection(("127.0.0.1", server.port), timeout=30) for _ in range(4)]
    try:
        for sock in socks:
            sock.sendall(body_attack_head(key) + b"[")
        answered_within_a_second(server, key)
        for sock in socks:
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
            envelope(answer, 408)
    finally:
        for sock in socks:
            sock.close()


def test_a_body_slower_than_its_first_second_but_above_the_minimum_rate_is_served(
    tight: tuple[PaasServer, str]
) -> None:
    # BODY_TIMEOUT_SECONDS=1, BODY_MIN_BYTES_PER_SECOND=1000: 6,000 bytes at about 3,000 per second take two
    # seconds, past the first second but well within 1 + 6 s.
    server, key = tight
    body = json.dumps({**FORECAST, "pad": " " * 6000}).encode()
    head = (f"POST /forecast HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(head)
        for start in range(0, len(body), 600):
            sock.sendall(body[start:start + 600])
            time.sleep(0.2)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]


# --- gunicorn's own refusals, in the envelope ------------------------------------------------------------------


REFUSED = {
    "request line over 4094 bytes": (b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "request line over 4094 bytes, no end yet": (b"GET /" + b"a" * 9000, 400),
    "header field over 16 KiB": (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Huge: " + b"h" * 20000 + b"\r\n\r\n", 431),
    "over 100 header fields": (
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(120)) + b"\r\n", 431),
    "no HTTP version": (b"GET /healthz\r\nHost: x\r\n\r\n", 400),
    "malformed header": (b"GET /healthz HTTP/1.1\r\nBad Header\r\n\r\n", 400),
    "unknown transfer coding": (b"POST /forecast HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: bogus\r\n\r\n", 501),
}


@pytest.mark.parametrize("request_bytes,status", REFUSED.values(), ids=REFUSED.keys())
def test_gunicorns_refusals_are_in_the_envelope(paas: tuple[PaasServer, str], request_bytes: bytes,
                                                status: int) -> None:
    server, _ = paas
    answer = raw_exchange(server.port, request_bytes)
    assert b"<html" not in answer.lower()
    assert envelope(answer, status)["connection"] == "close"


# --- key-shaped strings, any letter case ----------------------------------------------------------------------


def test_key_shaped_strings_in_any_case_never_reach_the_log_nor_come_back(paas: tuple[PaasServer, str]) -> None:
    server, key = paas
    hexes = key[3:]
    candidates = [
        "AK_" + hexes.upper(),  # the real key, upper-cased
        "Ak_" + hexes,
        "aK_" + "".join(c.upper() if i % 2 else c for i, c in enumerate(hexes)),  # mixed
        "AK_" + "AB12" * 16,  # a stranger, upper-case
    ]
    for candidate in candidates:
        tagged = requests.get(server.url + "/verify", headers={**bearer(key), "X-Request-Id": candidate}, timeout=10)
        assert tagged.status_code == 200
        assert not ANY_CASE_KEY.search(tagged.headers["X-Request-Id"])  # replaced, not echoed
        requests.get(f"{server.url}/{candidate}?api_key={candidate}", headers={"X-Request-Id": candidate}, timeout=10)
        refused = requests.post(server.url + "/forecast", data=b"{}", timeout=10,
                                headers={**bearer(key), "Content-Type": f"application/x-{candidate}"})
        assert refused.status_code == 415 and not ANY_CASE_KEY.search(refused.text)  # the media type is quoted
        requests.get(server.url + "/verify", headers=bearer(candidate), timeout=10)  # a malformed credential
        # Request lines gunicorn itself refuses, and quotes in its own log line.
        for line in (f"GET /{candidate}", f"{candidate} / HTTP/1.1", f"GET / HTTP/1.1 {candidate}"):
            answer = raw_exchange(server.port, f"{line}\r\nHost: x\r\n\r\n".encode())
            assert answer.startswith(b"HTTP/1.1 400") and not ANY_CASE_KEY.search(answer.decode("latin-1"))
    time.sleep(0.5)
    log = server.log()
    assert "Invalid request from ip=" in log and '"path": "/verify"' in log  # the lines are there to be searched
    leaked = [line for line in log.splitlines() if ANY_CASE_KEY.search(line)]
    assert leaked == [], leaked[:3]
    assert f"{key[:11]}…{key[-4:]}" in log  # redacted to the fingerprint the key listings show


def _large_answer_request(key: str, points: int) -> bytes:
    """POST /anomalies over ``points`` minutes: an answer of about 120 bytes a point, larger than what the
    socket buffers between the server and a client that reads nothing hold."""
    start = 1_767_225_600
    body = json.dumps({"series": [{
        "timestamps": [time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start + 60 * i)) for i in range(points)],
        "values": [float(10 + i % 7) for i in range(points)]}], "data_frequency": "Minutes"}).encode()
    return (f"POST /anomalies HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


def test_clients_that_do_not_take_their_answers_hold_half_the_threads_and_are_cut_off(tmp_path: Path) -> None:
    """Forty clients reading a 13 MB download a byte every 30 s kept every thread writing to them for a minute
    each, and every other request waited. Here 2 threads (1 slow-reader slot) and 3 clients that stop reading a
    7 MB answer after its first byte: the server keeps answering others within a second, and cuts them off."""
    server, key = _start(tmp_path, GUNICORN_THREADS="2", SEND_STALL_SECONDS="2")
    request = _large_answer_request(key, 100_000)
    socks = []
    try:
        for _ in range(3):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # takes little before it stops reading
            sock.settimeout(120)
            sock.connect(("127.0.0.1", server.port))
            sock.sendall(request)
            socks.append(sock)
        for sock in socks:
            assert sock.recv(1) == b"H"  # its answer is computed and being written
        ends = time.monotonic() + 6
        while time.monotonic() < ends:
            answered_within_a_second(server, key)
            time.sleep(0.2)
        # Every stalled answer was cut off: what is left to read ends before the whole of it.
        for sock in socks:
            received = 1
            while chunk := sock.recv(1 << 20):
                received += len(chunk)
            assert received < 6_000_000
    finally:
        for sock in socks:
            sock.close()
        server.stop()
