"""Faults through a real gunicorn: Redis and PostgreSQL going away and coming back, SIGTERM during forecasts,
a forecast worker killed mid-request. Nothing may hang, nothing may be lost."""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import requests

from tests.support import (
    PostgresServer,
    RedisServer,
    Server,
    bearer,
    child_pids,
    cli_in_process,
    cmdline,
    proc_stat,
)

pytestmark = pytest.mark.slow

INVALID_BODY = b"{}"
JSON = {"Content-Type": "application/json"}
# No single request may take longer than this, whatever is down (the contract's answer then is a quick 500).
REQUEST_BOUND = 15.0


def hourly_body(points: int = 5000) -> bytes:
    start = datetime(2024, 1, 1)
    timestamps = [(start + timedelta(hours=i)).strftime("%Y-%m-%dT%H:%M:%S") for i in range(points)]
    values = [
        100 + 10 * math.sin(2 * math.pi * i / 24) + 5 * math.sin(2 * math.pi * i / 168) + (i * 7919 % 13) / 4
        for i in range(points)
    ]
    body = {
        "series": [{"timestamps": timestamps, "values": values}],
        "forecast_horizon": 24,
        "data_frequency": "Hours",
        "forecast_frequency": "Hours",
    }
    return json.dumps(body).encode()


def create_key(env: dict[str, str]) -> dict:
    args = ("--per-minute", "100000", "--per-hour", "100000", "--per-day", "1000000", "--json")
    return json.loads(cli_in_process("keys", "create", "--permissions", "read", *args, env=env).stdout)


def usage_of(env: dict[str, str], key_id: str) -> int:
    return json.loads(cli_in_process("keys", "show", key_id, "--json", env=env).stdout)["usage_count"]


def sqlite_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'keys.sqlite3'}",
        "FORECAST_WORKERS": "2",
        "USAGE_FLUSH_SECONDS": "1",
        "LOG_LEVEL": "WARNING",
        **extra,
    }
    cli_in_process("db", "upgrade", env=env)
    return env


def timed(call: Callable[[], requests.Response]) -> tuple[requests.Response, float]:
    started = time.monotonic()
    response = call()
    return response, time.monotonic() - started


def error_code(response: requests.Response) -> str:
    return response.json()["error"]["code"]


def counts_as_use(response: requests.Response) -> bool:
    """an authenticated request (any status but 401) is one use. A 500 that came before the key could be
    looked up (database down, key not cached) is not authenticated; such answers carry no rate-limit headers
    because no key was identified (headers describe the key's window)."""
    if response.status_code == 401:
        return False
    if response.status_code == 500:
        return "X-RateLimit-Limit" in response.headers
    return True


@dataclass
class Serving:
    """One gunicorn (two forecast workers, counters in a private Redis) that the tests below share: each
    leaves it serving, with both workers ready and Redis up."""

    env: dict[str, str]
    redis: RedisServer
    server: Server


@pytest.fixture(scope="module")
def serving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serving]:
    log_dir = tmp_path_factory.mktemp("faults")
    redis = RedisServer(log_dir / "redis.log")
    server = None
    try:
        env = sqlite_env(log_dir, REDIS_URL=redis.url)
        server = Server(env, log_path=log_dir / "gunicorn.log")
        server.wait_ready()
        yield Serving(env, redis, server)
    finally:
        if server is not None:
            exit_code = server.stop(timeout=30)
            assert exit_code == 0, server.log_path.read_text()[-3000:]
        redis.stop()


# 1. Redis away and back (fail closed, recover without a restart).


def test_redis_outage_fails_closed_and_recovers_without_restart(serving: Serving) -> None:
    redis, server = serving.redis, serving.server
    key = create_key(serving.env)
    headers = {**bearer(key["key"]), **JSON}
    url = server.url

    def verify() -> requests.Response:
        return requests.get(url + "/verify", headers=headers, timeout=REQUEST_BOUND)

    def invalid_forecast() -> requests.Response:
        return requests.post(url + "/forecast", data=INVALID_BODY, headers=headers, timeout=REQUEST_BOUND)

    assert verify().status_code == 200
    assert invalid_forecast().status_code == 400

    redis.stop()
    try:
        for call in (verify, invalid_forecast, verify, invalid_forecast, verify, invalid_forecast):
            response, seconds = timed(call)
            assert response.status_code == 500, response.text
            assert error_code(response) == "INTERNAL_ERROR"
            assert seconds < 5.0, f"a request took {seconds:.1f}s while Redis was down"
        assert requests.get(url + "/readyz", timeout=REQUEST_BOUND).status_code == 503
    finally:
        redis.start()  # same port, empty: the counters start over

    back = time.monotonic()
    while verify().status_code != 200:
        assert time.monotonic() - back < 10, "requests still fail 10 s after Redis came back"
        time.sleep(0.2)
    for _ in range(5):
        assert invalid_forecast().status_code == 400
    response = verify()
    assert response.status_code == 200
    assert int(response.json()["rateLimit"]["remaining"]) == 100000 - 5  # counted again, in the new Redis
    assert requests.get(url + "/readyz", timeout=REQUEST_BOUND).status_code == 200
    assert server.process.poll() is None


# 2. PostgreSQL restarted while serving (counts made during the outage are flushed later).


def test_postgres_restart_while_serving_loses_no_usage(tmp_path: Path) -> None:
    # A private cluster: stopping the shared one would fail every other test using it meanwhile.
    postgres = PostgresServer()
    try:
        env = {
            "DATABASE_URL": postgres.url,
            "FORECAST_WORKERS": "1",
            "USAGE_FLUSH_SECONDS": "1",
            "KEY_CACHE_SECONDS": "2",
            "LOG_LEVEL": "WARNING",
        }
        cli_in_process("db", "upgrade", env=env)
        key = create_key(env)
        unseen = create_key(env)  # never looked up before the outage, so never cached
        server = Server(env, log_path=tmp_path / "gunicorn.log")
        try:
            server.wait_ready()
            answers: dict[str, list[requests.Response]] = {key["id"]: [], unseen["id"]: []}

            def verify(which: dict) -> requests.Response:
                response, seconds = timed(
                    lambda: requests.get(server.url + "/verify", headers=bearer(which["key"]), timeout=REQUEST_BOUND)
                )
                assert seconds < REQUEST_BOUND
                answers[which["id"]].append(response)
                return response

            for _ in range(10):
                assert verify(key).status_code == 200

            during: list[requests.Response] = []
            try:
                postgres.stop()
                stopped = time.monotonic()
                while time.monotonic() - stopped < 4.0:
                    during.append(verify(key))
                    time.sleep(0.1)
                during.append(verify(unseen))
            finally:
                postgres.start()
            # The cached key may still pass for a moment; past the cache, the answer is a quick 500, never a 401.
            assert {r.status_code for r in during} <= {200, 500}, [r.status_code for r in during]
            failed = [r for r in during if r.status_code == 500]
            assert failed, "the key cache outlived a 4 s outage (allows 5 s at most, KEY_CACHE_SECONDS=2)"
            assert {error_code(r) for r in failed} == {"INTERNAL_ERROR"}
            assert during[-1].status_code == 500  # a key that could not be looked up is not called invalid

            back = time.monotonic()
            while verify(key).status_code != 200:
                assert time.monotonic() - back < 15, "requests still fail 15 s after PostgreSQL came back"
                time.sleep(0.2)
            for _ in range(5):
                assert verify(key).status_code == 200
                assert verify(unseen).status_code == 200
        finally:
            exit_code = server.stop()
        assert exit_code == 0, server.log_path.read_text()[-3000:]
        for which in (key, unseen):
            expected = sum(counts_as_use(r) for r in answers[which["id"]])
            assert usage_of(env, which["id"]) == expected, [r.status_code for r in answers[which["id"]]]
    finally:
        postgres.remove()


# 3. SIGTERM while forecasts run (graceful: every accepted request answered, usage flushed, exit 0).


def _busy(pids: list[int], seconds: float = 0.3) -> list[int]:
    """The pids that used CPU during the next `seconds` (forecast workers idle on a pipe use none)."""

    def cpu(pid: int) -> int:
        try:
            fields = proc_stat(pid)
            return int(fields[11]) + int(fields[12])
        except (OSError, IndexError):
            return -1

    before = {pid: cpu(pid) for pid in pids}
    time.sleep(seconds)
    return [pid for pid in pids if cpu(pid) > before[pid] >= 0]


def _kill_mid_computation(pids: list[int], *, within: float) -> int:
    """SIGKILLs one of `pids` while it computes and returns its pid. A worker between two forecasts waits in
    read() on its pipe; killed there it never held work, and the pool rightly sends the next forecast to the
    other worker (no 500 at all). So each candidate is stopped first and killed only if it is not in read()."""
    read_syscall = {"x86_64": 0, "aarch64": 63}[os.uname().machine]
    deadline = time.monotonic() + within
    while True:
        assert time.monotonic() < deadline, "no forecast worker was caught computing"
        for pid in _busy(pids, 0.05):
            _stop(pid, until=deadline + 5)
            if int(Path(f"/proc/{pid}/syscall").read_text().split()[0]) != read_syscall:
                os.kill(pid, signal.SIGKILL)
                return pid
            os.kill(pid, signal.SIGCONT)


def _connections_to(port: int) -> int:
    """Established TCP connections whose server end is on `port` (the kernel's view: accepted or queued)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            count += state == "01" and int(local.rsplit(":", 1)[1], 16) == port
    return count


def forecast_workers(server: Server) -> list[int]:
    workers = [pid for pid in child_pids(server.process.pid) if "gunicorn" in cmdline(pid)]
    assert len(workers) == 1, workers
    return [pid for pid in child_pids(workers[0]) if "spawn_main" in cmdline(pid)]


def wait_pool_full(server: Server, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        checks = requests.get(server.url + "/readyz", timeout=10).json()["checks"]
        if checks["forecast_workers"] == "2/2" and len(forecast_workers(server)) == 2:
            return
        assert time.monotonic() < deadline, f"the forecast pool never reached 2 ready workers: {checks}"
        time.sleep(0.2)


def test_sigterm_lets_running_forecasts_finish_and_flushes_usage(tmp_path: Path) -> None:
    # The queue holds all 16 (the default queue limit would turn some away with 500 before any SIGTERM).
    env = sqlite_env(tmp_path, USAGE_FLUSH_SECONDS="5", FORECAST_QUEUE_LIMIT="32")
    key = create_key(env)
    server = Server(env, log_path=tmp_path / "gunicorn.log")
    try:
        server.wait_ready()
        wait_pool_full(server)  # /readyz needs one worker; this test wants both computing
        body = hourly_body()
        # model-1 on 5,000 hourly points takes a few tenths of a second each: 16 of them on 2 workers are
        # still running at SIGTERM (model-3 became fast enough to finish them all first).
        headers = {**bearer(key["key"]), **JSON, "X-Model-Id": "forecast-model-1"}

        def forecast(_: int) -> requests.Response:
            return requests.post(server.url + "/forecast", data=body, headers=headers, timeout=120)

        with ThreadPoolExecutor(16) as pool:  # all sent at once; gunicorn accepts them all and queues them
            futures: list[Future[requests.Response]] = [pool.submit(forecast, i) for i in range(16)]
            # Once every client has connected (accepted or still in the listen queue: both are in flight and
            # are served) and the forecast workers are computing.
            deadline = time.monotonic() + 30
            while _connections_to(server.port) < 16 or not _busy(forecast_workers(server), 0.1):
                assert time.monotonic() < deadline, f"{_connections_to(server.port)} of 16 connected, or none computing"
            running = sum(not f.done() for f in futures)
            assert running >= 4, "the forecasts finished before SIGTERM; use longer ones"
            server.process.send_signal(signal.SIGTERM)
            responses = [f.result(timeout=120) for f in futures]
        exit_code = server.process.wait(timeout=90)
    finally:
        server.stop()
    assert [r.status_code for r in responses] == [200] * 16, [r.text[:300] for r in responses if r.status_code != 200]
    assert all(len(r.json()["median"]) == 24 for r in responses)
    assert exit_code == 0, server.log_path.read_text()[-3000:]
    assert usage_of(env, key["id"]) == 16  # flushed on the way out, not 5 s later


def _listen_queue(port: int) -> int:
    """Connections waiting in the kernel's accept queue of the listener on `port`."""
    for row in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = row.split()
        if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
            return int(fields[4].split(":")[1], 16)
    raise AssertionError(f"nothing listens on {port}")


def _state(pid: int) -> str:
    return proc_stat(pid)[0]


def _stop(pid: int, *, until: float) -> None:
    """SIGSTOPs ``pid`` and waits until it is stopped: a stop takes effect as each thread next leaves the kernel."""
    os.kill(pid, signal.SIGSTOP)
    while _state(pid) != "T":
        assert time.monotonic() < until, f"{pid} did not stop: {_state(pid)}"
        time.sleep(0.001)


def _signal_pending(pid: int, sig: int) -> bool:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    status = dict(line.split(":\t", 1) for line in lines if ":\t" in line)
    return any(int(status[field], 16) >> (sig - 1) & 1 for field in ("SigPnd", "ShdPnd"))


def _answer(sock: socket.socket) -> bytes:
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
    return answer


def test_sigterm_answers_requests_sent_but_not_yet_read(tmp_path: Path) -> None:
    """At SIGTERM one client's request waits in the listen queue and another's head is half sent: a deploy must
    answer both (stock gthread reset them)."""
    server = Server(sqlite_env(tmp_path), log_path=tmp_path / "gunicorn.log")
    sockets: list[socket.socket] = []
    try:
        server.wait_ready()
        # Ready answers once one forecast worker is up; the others still spawning would be threads of the
        # gunicorn worker busy in fork and exec when it is stopped below.
        wait_pool_full(server)
        half = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        sockets.append(half)
        half.sendall(b"GET /healthz HTTP/1.1\r\nHost: test\r\n")
        wait_until = time.monotonic() + 10
        while _listen_queue(server.port):  # accepted, its head half read
            assert time.monotonic() < wait_until
            time.sleep(0.05)
        time.sleep(0.2)
        (worker,) = [pid for pid in child_pids(server.process.pid) if "gunicorn" in cmdline(pid)]
        try:
            _stop(worker, until=wait_until + 10)  # the worker accepts nothing more: the next client stays queued
            queued = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            sockets.append(queued)
            queued.sendall(b"GET /healthz HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
            assert _listen_queue(server.port) == 1
            server.process.send_signal(signal.SIGTERM)
            while not _signal_pending(worker, signal.SIGTERM):  # the master has passed the stop on
                assert time.monotonic() < wait_until + 20
                time.sleep(0.05)
        finally:
            os.kill(worker, signal.SIGCONT)
        half.sendall(b"Connection: close\r\n\r\n")
        answers = [_answer(half), _answer(queued)]
        exit_code = server.process.wait(timeout=60)
    finally:
        server.stop()
        for sock in sockets:
            sock.close()
    assert [answer[:12] for answer in answers] == [b"HTTP/1.1 200"] * 2, answers
    assert exit_code == 0, server.log_path.read_text()[-3000:]


def _refused_keep_alive_connection(server: Server, key: str) -> socket.socket:
    """A keep-alive client whose POST is answered (429) before its body arrives: headers in one segment,
    the body a moment later, as many HTTP clients send them. The connection then stays open and idle."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(
        f"POST /forecast HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(INVALID_BODY)}\r\n\r\n".encode()
    )
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(65536)
        assert chunk, answer
        answer += chunk
    assert answer.startswith(b"HTTP/1.1 429"), answer[:200]
    sock.sendall(INVALID_BODY)
    return sock


def test_sigterm_is_prompt_while_refused_clients_keep_their_connections_open(tmp_path: Path) -> None:
    """Clients (nginx, pooled HTTP clients) keep connections alive; a POST refused before its body was read
    must not pin a gthread thread, which would make a graceful stop wait the whole graceful timeout (60 s)
    and end in SIGKILL, skipping the usage flush of worker_exit (gunicorn issue #3301)."""
    env = sqlite_env(tmp_path, FORECAST_WORKERS="1")
    created = cli_in_process("keys", "create", "--permissions", "read", "--per-minute", "1", "--json", env=env)
    key = json.loads(created.stdout)
    server = Server(env, log_path=tmp_path / "gunicorn.log")
    idle: list[socket.socket] = []
    try:
        server.wait_ready()
        headers = {**bearer(key["key"]), **JSON}
        spend = requests.post(server.url + "/forecast", data=INVALID_BODY, headers=headers, timeout=10)
        assert spend.status_code == 400  # the one request of this minute; the next POSTs are refused
        idle = [_refused_keep_alive_connection(server, key["key"]) for _ in range(2)]
        time.sleep(0.5)
        assert requests.get(server.url + "/healthz", timeout=10).status_code == 200
        stopping = time.monotonic()
        exit_code = server.stop(timeout=20)
        seconds = time.monotonic() - stopping
    finally:
        server.stop()
        for sock in idle:
            sock.close()
    assert exit_code == 0 and seconds < 10, f"SIGTERM took {seconds:.1f}s (exit {exit_code}) with idle clients"
    assert usage_of(env, key["id"]) == 3


# 4. A forecast worker killed mid-request (500 for that request, the pool heals itself).


def test_killed_forecast_worker_answers_500_once_and_is_replaced(serving: Serving) -> None:
    server = serving.server
    key = create_key(serving.env)
    # The shared server stays up afterwards; the module fixture stops it and checks its exit code.
    wait_pool_full(server)
    original = forecast_workers(server)
    body = hourly_body()
    headers = {**bearer(key["key"]), **JSON, "X-Model-Id": "forecast-model-3"}

    def forecast() -> requests.Response:
        return requests.post(server.url + "/forecast", data=body, headers=headers, timeout=60)

    stop_at = time.monotonic() + 6.0

    def stream(_: int) -> list[requests.Response]:
        answers = []
        while time.monotonic() < stop_at and len(answers) < 50:
            answers.append(forecast())
        return answers

    with ThreadPoolExecutor(3) as pool:  # three callers keep both workers busy
        streams = [pool.submit(stream, i) for i in range(3)]
        victim = _kill_mid_computation(original, within=5.0)
        killed_at = time.monotonic()
        answers = [response for s in streams for response in s.result(timeout=120)]

    statuses = [r.status_code for r in answers]
    assert sorted(set(statuses)) == [200, 500], statuses
    # The forecast the killed worker was computing fails; no other request does.
    assert statuses.count(500) == 1, statuses
    (crashed,) = [r for r in answers if r.status_code == 500]
    assert error_code(crashed) == "INTERNAL_ERROR"
    assert "request_id" in crashed.json()["error"]["details"]

    # The pool replaces the worker without a restart: back to two workers, and every request succeeds.
    while requests.get(server.url + "/readyz", timeout=10).json()["checks"]["forecast_workers"] != "2/2":
        assert time.monotonic() - killed_at < 60, "the killed worker was not replaced within 60 s"
        time.sleep(0.2)
    replaced = forecast_workers(server)
    assert victim not in replaced and len(replaced) == 2
    with ThreadPoolExecutor(4) as pool:
        after = list(pool.map(lambda _: forecast().status_code, range(8)))
    assert after == [200] * 8
    assert server.process.poll() is None
