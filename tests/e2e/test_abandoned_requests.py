"""A request whose client goes away stops its work in the forecast pool (a real gunicorn, one pool worker).

A client that times out and retries leaves its first attempt behind; the server used to compute every abandoned
attempt to the end, for nobody, while other keys' forecasts queued behind it. Here a long cross-validation is
sent, its connection closed mid-computation, and the pool must go quiet (its worker interrupted, not replaced)
and answer the next forecast."""

from __future__ import annotations

import json
import math
import socket
import time
from collections.abc import Iterator

import pytest
import requests

from tests.support import Server, bearer, child_pids, cli_in_process, proc_stat, wait_for

pytestmark = pytest.mark.slow

# A series long enough that each window's fit takes a while, and windows enough that the call runs far longer
# than the test waits for the pool to go quiet.
LENGTH = 3000
WINDOWS = 50


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    folder = tmp_path_factory.mktemp("abandoned")
    env = {"DATABASE_URL": f"sqlite:///{folder / 'service.sqlite3'}", "FORECAST_WORKERS": "1", "LOG_LEVEL": "INFO",
           "WEB_CONCURRENCY": "1"}
    cli_in_process("db", "upgrade", env=env)
    key = json.loads(cli_in_process("keys", "create", "--permissions", "read", "--per-minute", "100000",
                                    "--per-hour", "1000000", "--per-day", "10000000", "--json", env=env).stdout)["key"]
    server = Server(env, log_path=folder / "server.log")
    try:
        server.wait_ready()
        yield server, key
    finally:
        server.stop()


def pool_workers(server: Server) -> list[int]:
    """The forecast pool's processes: the children of gunicorn's worker, but multiprocessing's resource tracker."""
    from tests.support import cmdline

    found = []
    for web in child_pids(server.process.pid):
        found += [pid for pid in child_pids(web) if "resource_tracker" not in cmdline(pid)]
    return found


def cpu_ticks(pids: list[int]) -> int:
    """CPU the processes have used, in clock ticks (utime + stime)."""
    return sum(int(proc_stat(pid)[11]) + int(proc_stat(pid)[12]) for pid in pids)


def long_cross_validation(key: str) -> bytes:
    values = [round(100 + 10 * math.sin(2 * math.pi * i / 24) + 5 * math.sin(2 * math.pi * i / 168) + (i * 7 % 5), 2)
              for i in range(LENGTH)]
    body = json.dumps({"series": {"y": values, "sizes": [LENGTH], "start_datetime": ["2024-01-01T00:00:00"]},
                       "freq": "h", "h": 24, "n_windows": WINDOWS, "model": "forecast-model-1"}).encode()
    head = (f"POST /v2/cross_validation HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    return head + body


def abandoned(server: Server) -> int:
    """Calls the server ended as abandoned (the access log's 499: its client closed before the answer)."""
    return server.log().count('"POST /v2/cross_validation 499"')


def computing(workers: list[int], before: int) -> bool:
    return cpu_ticks(workers) - before >= 50  # half a second of the pool's CPU: the fits are under way


def test_closing_the_connection_stops_the_work_and_frees_the_worker(served: tuple[Server, str]) -> None:
    server, key = served
    workers = pool_workers(server)
    assert workers, "no forecast pool process found"
    before = cpu_ticks(workers)
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(long_cross_validation(key))
        wait_for(lambda: computing(workers, before), 60, "the pool to start the work")
    # The client is gone: the call ends now, not after its remaining windows (which take far longer than this).
    wait_for(lambda: abandoned(server) == 1, 15, "the abandoned call to stop")
    assert "stopping work whose client went away" in server.log()
    # Its worker was interrupted, not killed: the same process is idle and takes the next forecast.
    quiet = cpu_ticks(workers)
    time.sleep(1.0)
    assert cpu_ticks(workers) - quiet <= 10
    answer = requests.post(f"{server.url}/v2/forecast", headers=bearer(key), timeout=30, json={
        "series": {"y": [float(i % 7) for i in range(48)], "sizes": [48], "start_datetime": ["2024-01-01"]},
        "freq": "D", "h": 3})
    assert answer.status_code == 200, answer.text
    assert pool_workers(server) == workers


def test_a_call_waiting_for_the_pool_is_dropped_when_its_client_leaves(served: tuple[Server, str]) -> None:
    """Two abandoned calls, the second queued behind the first: both end once their clients left."""
    server, key = served
    workers = pool_workers(server)
    already = abandoned(server)
    before = cpu_ticks(workers)
    first = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    second = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    try:
        first.sendall(long_cross_validation(key))
        second.sendall(long_cross_validation(key))
        wait_for(lambda: computing(workers, before), 60, "the pool to start the work")
    finally:
        second.close()
        first.close()
    wait_for(lambda: abandoned(server) == already + 2, 15, "both abandoned calls to stop")
    assert pool_workers(server) == workers
    log = server.log()
    assert "request failed" not in log and "Traceback" not in log, log[-3000:]
