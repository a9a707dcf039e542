"""Keep-alive connections after an early answer, against a real gunicorn (and nginx in front of it).

The app answers some requests before it reads their body: 401, 403, 404, 413, 415, 429. The client is still
sending that body, then sends its next request on the same connection. Every next request must be answered at
once, whatever the body's size, framing and pace; and clients that leave a connection idle, or stall in the
middle of a body, must not pin gunicorn's threads. The timing is forced with raw sockets: the rest of the body
and the next request leave in one write, after the early answer was read, so gunicorn reads both together.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
import requests

from tests.support import Server, cli_in_process

pytestmark = pytest.mark.slow

CAP = 64 * 1024  # MAX_BODY_BYTES of the server under test: small, so bodies up to the cap are cheap
THREADS = 4  # few gunicorn threads, so a handful of pinning clients would starve the server
# A stalled request waits the 5 s keep-alive timeout; an answer within 3 s is not stalled, even with a loaded
# machine running the rest of the suite beside it (a hang detector, not a speed target).
WITHIN = 3.0
UNKNOWN_KEY = "ak_" + "0" * 64
BODY_SIZES = (0, 70, 20_000, CAP)
OVER_CAP_SIZES = (CAP + 1, 2 * CAP)


@dataclass(frozen=True)
class Keys:
    unlimited: str
    write_only: str
    limited: str


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Keys]]:
    directory = tmp_path_factory.mktemp("keepalive")
    env = {
        "DATABASE_URL": f"sqlite:///{directory / 'keys.sqlite3'}",
        "FORECAST_WORKERS": "1",
        "GUNICORN_THREADS": str(THREADS),
        "MAX_BODY_BYTES": str(CAP),
        "AUTH_FAILURE_LIMIT": "100000/minute",
        "LOG_LEVEL": "WARNING",
    }
    cli_in_process("db", "upgrade", env=env)

    def create(*args: str) -> str:
        return json.loads(cli_in_process("keys", "create", *args, "--json", env=env).stdout)["key"]

    high = ("--per-minute", "1000000", "--per-hour", "10000000", "--per-day", "100000000")
    keys = Keys(
        unlimited=create("--permissions", "read", *high),
        write_only=create("--permissions", "write", *high),
        limited=create("--permissions", "read", "--per-minute", "1", "--per-hour", "1", "--per-day", "1"),
    )
    server = Server(env, log_path=directory / "gunicorn.log")
    server.wait_ready()
    spent = requests.post(server.url + "/forecast", json={}, headers={"Authorization": f"Bearer {keys.limited}"},
                          timeout=10)
    assert spent.status_code in (400, 422), spent.text  # the limited key's one request today: it now meets 429s
    yield server, keys
    server.stop()


def early_answers(keys: Keys) -> dict[int, tuple[str, str, str]]:
    """status -> (path, key, Content-Type) of a POST the app answers before reading its body."""
    return {
        401: ("/forecast", UNKNOWN_KEY, "application/json"),
        403: ("/forecast", keys.write_only, "application/json"),
        404: ("/no-such-endpoint", keys.unlimited, "application/json"),
        413: ("/forecast", keys.unlimited, "application/json"),
        415: ("/forecast", keys.unlimited, "text/plain"),
        429: ("/forecast", keys.limited, "application/json"),
    }


def cases() -> list[tuple[int, int, str, bool]]:
    found = []
    for status in (401, 403, 404, 413, 415, 429):
        for size in OVER_CAP_SIZES if status == 413 else BODY_SIZES:
            for pace in ("at-once", "slowly"):
                for chunked in (False, True):
                    found.append((status, size, pace, chunked))
    return found


def encode_body(size: int, chunked: bool) -> bytes:
    body = b'{"pad":"' + b"x" * max(0, size - 10) + b'"}' if size >= 10 else b" " * size
    if not chunked:
        return body
    pieces = [body[i:i + 4096] for i in range(0, len(body), 4096)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def request_head(path: str, key: str, content_type: str, size: int, chunked: bool) -> bytes:
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}"
    return (f"POST {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: {content_type}\r\n{framing}\r\n\r\n").encode()


NEXT_REQUEST = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"


class RawConnection:
    """One kept-alive HTTP/1.1 connection on a plain socket: we decide exactly what is sent when."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def response(self, within: float = WITHIN) -> tuple[int, bytes]:
        """The next response's status and body, which must arrive within `within` seconds."""
        deadline = time.monotonic() + within
        while b"\r\n\r\n" not in self.buffer:
            self._receive(deadline)
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        length = next(int(line.split(b":", 1)[1]) for line in lines if line.lower().startswith(b"content-length:"))
        while len(self.buffer) < length:
            self._receive(deadline)
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return int(lines[0].split()[1]), body

    def _receive(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError("no complete answer in time")
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(65536)
        except TimeoutError:
            raise AssertionError("no complete answer in time") from None
        if not chunk:
            raise AssertionError(f"the server closed the connection without answering (got {self.buffer[:80]!r})")
        self.buffer += chunk

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize("status,size,pace,chunked", cases(),
                         ids=[f"{s}-{n}B-{p}-{'chunked' if c else 'length'}" for s, n, p, c in cases()])
def test_next_request_is_answered_at_once_after_an_early_answer(
    served: tuple[Server, Keys], status: int, size: int, pace: str, chunked: bool
) -> None:
    server, keys = served
    path, key, content_type = early_answers(keys)[status]
    body = encode_body(size, chunked)
    # The app answers once it has the headers: send them with a part of the body, and read the answer. A chunked
    # body has no declared length, so its 413 comes once gunicorn has decoded past the cap (in 1 KiB reads).
    sent = len(body) // 2 if pace == "at-once" else len(body) // 4
    if status == 413 and chunked:
        past_cap = CAP + 8192  # whole 4 KiB chunks of data, each framed by 8 bytes ("1000\r\n" ... "\r\n")
        sent = min(len(body), past_cap + past_cap // 4096 * 8)
    connection = RawConnection(server.port)
    try:
        connection.sock.sendall(request_head(path, key, content_type, size, chunked) + body[:sent])
        early, _ = connection.response()
        assert early == status
        rest = body[sent:]
        if pace == "slowly":
            pieces = [rest[i * len(rest) // 4:(i + 1) * len(rest) // 4] for i in range(4)]
            for piece in pieces[:-1]:
                connection.sock.sendall(piece)
                time.sleep(0.05)
            rest = pieces[-1]
        # The body's last bytes and the next request in one write: gunicorn reads them together.
        started = time.monotonic()
        connection.sock.sendall(rest + NEXT_REQUEST)
        answer, text = connection.response()
        assert answer == 200 and json.loads(text)["status"] == "ok", (answer, text[:200])
        assert time.monotonic() - started < WITHIN
        # And the connection goes on serving.
        connection.sock.sendall(NEXT_REQUEST)
        assert connection.response()[0] == 200
    finally:
        connection.close()


def test_pipelined_requests_after_a_fully_read_body_are_answered(served: tuple[Server, Keys]) -> None:
    # The app reads this body itself (400: not a forecast request); the next request rides in the same write.
    server, keys = served
    body = b'{"series": []}'
    head = request_head("/forecast", keys.unlimited, "application/json", len(body), False)
    connection = RawConnection(server.port)
    try:
        connection.sock.sendall(head + body + NEXT_REQUEST + head + body + NEXT_REQUEST)
        statuses = [connection.response()[0] for _ in range(4)]
        assert statuses[1] == statuses[3] == 200 and statuses[0] == statuses[2] and statuses[0] // 100 == 4
    finally:
        connection.close()


def _refused_then_idle(port: int, *, whole_body: bool) -> RawConnection:
    body = encode_body(20_000, chunked=False)
    connection = RawConnection(port)
    head = request_head("/forecast", UNKNOWN_KEY, "application/json", len(body), False)
    connection.sock.sendall(head + (body if whole_body else body[: len(body) // 2]))
    assert connection.response(within=10)[0] == 401
    return connection


def _healthz_seconds(server: Server) -> float:
    started = time.monotonic()
    assert requests.get(server.url + "/healthz", timeout=20).status_code == 200
    return time.monotonic() - started


def test_idle_connections_after_unread_bodies_do_not_pin_threads(served: tuple[Server, Keys]) -> None:
    # As nginx's upstream pool does: request answered 401 before its body was read, then the connection idles.
    # Unread, the body's bytes would make the socket readable, and a thread would block on it for good.
    server = served[0]
    held = [_refused_then_idle(server.port, whole_body=True) for _ in range(3 * THREADS)]
    try:
        time.sleep(0.3)
        assert _healthz_seconds(server) < WITHIN
    finally:
        for connection in held:
            connection.close()


def test_a_client_stalled_mid_body_is_closed_and_frees_its_thread(served: tuple[Server, Keys]) -> None:
    # The client got its 401 and never sends the rest of its body. Waiting for it is bounded (a second per
    # read); then the connection is closed, so more stalled clients than threads do not stop the service.
    server = served[0]
    held = [_refused_then_idle(server.port, whole_body=False) for _ in range(THREADS + 2)]
    try:
        time.sleep(2.0)
        assert _healthz_seconds(server) < WITHIN
        for connection in held:
            connection.sock.settimeout(5)
            assert connection.sock.recv(1) == b"", "a stalled client's connection was left open"
    finally:
        for connection in held:
            connection.close()


# --- the same, through nginx (TLS) with its upstream keep-alive pool, as deployed ---------------------------


@pytest.fixture(scope="module")
def through_nginx(served: tuple[Server, Keys], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    from tests.support import running_nginx

    with running_nginx(tmp_path_factory.mktemp("keepalive-nginx"), served[0].port) as (base, _, cert):
        yield base, str(cert)


def test_keep_alive_clients_meeting_early_answers_through_nginx(
    served: tuple[Server, Keys], through_nginx: tuple[str, str]
) -> None:
    # Several keep-alive clients at once, each through every early answer, body size and framing; nginx sends
    # whole requests upstream on its pooled connections, so the next request can reach gunicorn while the
    # previous body is still being discarded. nginx answers 413 itself only above its own cap (16m).
    _, keys = served
    base, cert = through_nginx
    routes = early_answers(keys)

    def client(_: int) -> list[str]:
        problems = []
        with requests.Session() as session:  # verify= on each call: REQUESTS_CA_BUNDLE would override session.verify
            for status, size, _, chunked in cases():  # pace is nginx's to choose upstream
                path, key, content_type = routes[status]
                body = encode_body(size, False)
                data: bytes | Iterator[bytes] = body
                if chunked:
                    data = iter([body[: len(body) // 2], body[len(body) // 2:]])
                headers = {"Authorization": f"Bearer {key}", "Content-Type": content_type}
                started = time.monotonic()
                try:
                    answer = session.post(base + path, data=data, headers=headers, verify=cert, timeout=(10, WITHIN))
                    health = session.get(base + "/healthz", verify=cert, timeout=(10, WITHIN))
                except requests.RequestException as error:
                    problems.append(f"{status}/{size}/{'chunked' if chunked else 'length'}: {error!r}"[:300])
                    continue
                seconds = time.monotonic() - started
                if answer.status_code != status or health.status_code != 200 or seconds >= 2 * WITHIN:
                    problems.append(f"{status}/{size}: {answer.status_code} {health.status_code} {seconds:.2f}s")
        return problems

    with ThreadPoolExecutor(4) as pool:
        problems = [p for found in pool.map(client, range(4)) for p in found]
    assert problems == []

