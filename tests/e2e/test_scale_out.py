"""Scale-out: many gunicorn worker processes on two servers share one Redis and one PostgreSQL,
and the limits stay exact and no usage count is lost."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from tests.support import RedisServer, Server, bearer, child_pids, cli_in_process, cmdline, postgres_database

pytestmark = pytest.mark.slow

INVALID_BODY = b"{}"  # refused with 400 INVALID_REQUEST by the view, after the limiter has counted it


@pytest.fixture(scope="module")
def shared_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """One private Redis and one throwaway PostgreSQL database, migrated, for every server of this module."""
    log_dir = tmp_path_factory.mktemp("scale-out")
    with postgres_database() as database_url:
        redis = RedisServer(log_dir / "redis.log")
        try:
            env = {
                "DATABASE_URL": database_url,
                "REDIS_URL": redis.url,
                "FORECAST_WORKERS": "1",
                "USAGE_FLUSH_SECONDS": "1",
                "LOG_LEVEL": "WARNING",
            }
            cli_in_process("db", "upgrade", env=env)
            yield env
        finally:
            redis.stop()


def create_key(env: dict[str, str], *args: str) -> dict:
    return json.loads(cli_in_process("keys", "create", "--permissions", "read", *args, "--json", env=env).stdout)


def show_key(env: dict[str, str], key_id: str) -> dict:
    return json.loads(cli_in_process("keys", "show", key_id, "--json", env=env).stdout)


def gunicorn_workers(server: Server) -> list[int]:
    return [pid for pid in child_pids(server.process.pid) if "gunicorn" in cmdline(pid)]


def start_servers(env: dict[str, str], count: int, log_dir: Path) -> list[Server]:
    servers = [Server({**env, "WEB_CONCURRENCY": "2"}, log_path=log_dir / f"gunicorn-{i}.log") for i in range(count)]
    try:
        for server in servers:
            # Liveness is enough here: these tests never forecast, so they need not wait for the model workers.
            server.wait_ready(path="/healthz")
    except BaseException:
        for server in servers:
            server.stop()
        raise
    return servers


def test_two_servers_of_two_workers_share_one_exact_limit_and_lose_no_usage(
    shared_env: dict[str, str], tmp_path: Path
) -> None:
    key = create_key(shared_env, "--per-minute", "37", "--per-hour", "1000", "--per-day", "10000")
    servers = start_servers(shared_env, 2, tmp_path)
    try:
        # WEB_CONCURRENCY=2 with REDIS_URL starts, and really runs two worker processes per server.
        for server in servers:
            assert len(gunicorn_workers(server)) == 2, server.log()

        headers = {**bearer(key["key"]), "Content-Type": "application/json"}

        def call(url: str) -> requests.Response:
            # A new connection per request: a kept-alive one can be closed by the server's keepalive timeout just
            # as it is reused, and a POST is not retried; that race is not what this test is about.
            return requests.post(url + "/forecast", data=INVALID_BODY, headers=headers, timeout=30)

        urls = [servers[i % 2].url for i in range(200)]
        started = time.monotonic()
        with ThreadPoolExecutor(32) as pool:  # 16 concurrent callers per server
            responses = list(pool.map(call, urls))
        elapsed = time.monotonic() - started
    finally:
        stopping = time.monotonic()
        exit_codes = [server.stop(timeout=20) for server in servers]  # SIGTERM, SIGKILL after 20 s
        stop_seconds = time.monotonic() - stopping
    assert elapsed < 50, f"the load took {elapsed:.1f}s; the minute window would no longer be one window"

    statuses = [r.status_code for r in responses]
    allowed = [r for r in responses if r.status_code != 429]
    refused = [r for r in responses if r.status_code == 429]
    assert sorted(set(statuses)) == [400, 429], statuses
    assert len(allowed) == 37, f"{len(allowed)} requests passed a limit of 37 across 4 processes"
    assert len(refused) == 200 - 37
    for response in allowed:
        assert response.json()["error"]["code"] == "INVALID_REQUEST"
        assert response.headers["X-RateLimit-Limit"] == "37"
    for response in refused:
        error = response.json()["error"]
        assert error["code"] == "RATE_LIMIT_EXCEEDED"
        assert error["details"]["limit"] == 37
        assert error["details"]["window"] == "minute"
        assert response.headers["X-RateLimit-Remaining"] == "0"
        assert int(response.headers["Retry-After"]) >= 1

    # every non-401 answer (429s too) is one use, flushed by SIGTERM at the latest.
    assert show_key(shared_env, key["id"])["usage_count"] == len(statuses) - statuses.count(401) == 200

    # A graceful stop: the workers exit on their own (no SIGKILL after 20 s), and promptly.
    assert exit_codes == [0, 0] and stop_seconds < 20, (
        f"SIGTERM: exit codes {exit_codes} after {stop_seconds:.1f}s\n"
        + "\n".join(server.log_path.read_text()[-3000:] for server in servers)
    )

    # remaining counts down by one per counted request, whichever process counted it.
    remaining = sorted(int(r.headers["X-RateLimit-Remaining"]) for r in allowed)
    assert remaining == list(range(37)), f"X-RateLimit-Remaining on the 37 counted answers: {remaining}"


def test_cli_set_limits_reaches_every_worker_of_a_running_server_within_5_seconds(
    shared_env: dict[str, str], tmp_path: Path
) -> None:
    key = create_key(shared_env, "--per-minute", "50", "--per-hour", "1000", "--per-day", "10000")
    (server,) = start_servers(shared_env, 1, tmp_path)
    try:
        with requests.Session() as session:

            def verified_limit() -> str:
                response = session.get(server.url + "/verify", headers=bearer(key["key"]), timeout=10)
                assert response.status_code == 200, response.text
                return response.json()["rateLimit"]["limit"]

            # Both worker processes look the key up (and cache it) before the change.
            assert {verified_limit() for _ in range(20)} == {"50"}
            cli_in_process("keys", "set-limits", key["id"], "--per-minute", "7", env=shared_env)
            changed_at = time.monotonic()
            while verified_limit() != "7":
                assert time.monotonic() - changed_at < 5.0, "the new limit was not applied within 5 s"
                time.sleep(0.1)
            # Past the 5 s cache bound, no process may still answer with the old limit.
            time.sleep(max(0.0, 5.2 - (time.monotonic() - changed_at)))
            assert {verified_limit() for _ in range(20)} == {"7"}

            # ...and the new limit is what the shared counters enforce.
            headers = {**bearer(key["key"]), "Content-Type": "application/json"}
            statuses = [
                session.post(server.url + "/forecast", data=INVALID_BODY, headers=headers, timeout=10).status_code
                for _ in range(9)
            ]
            assert statuses == [400] * 7 + [429] * 2
    finally:
        assert server.stop(timeout=20) == 0, server.log_path.read_text()[-3000:]
