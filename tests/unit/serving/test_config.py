"""app.serving.config: the bind address, process and thread counts, the worker timeout and the client limits
from the environment."""

from __future__ import annotations

import pytest

from app.serving.config import (
    DEFAULT_BIND,
    ClientLimits,
    bind_addresses,
    threads_per_process,
    web_processes,
    worker_timeout,
)
from app.settings import Settings


def test_bind_prefers_bind_then_a_paas_port_then_loopback() -> None:
    assert bind_addresses({"BIND": "unix:/run/app.sock", "PORT": "9000"}) == ["unix:/run/app.sock"]
    assert bind_addresses({"PORT": "9000"}) == ["0.0.0.0:9000"]
    assert bind_addresses({}) == [DEFAULT_BIND] == ["127.0.0.1:8000"]
    assert bind_addresses({"BIND": "", "PORT": ""}) == [DEFAULT_BIND]


def test_process_and_thread_counts() -> None:
    assert (web_processes({}), threads_per_process({})) == (1, 32)
    assert (web_processes({"WEB_CONCURRENCY": "3"}), threads_per_process({"GUNICORN_THREADS": "8"})) == (3, 8)
    for bad in ("0", "two", "1.5"):
        with pytest.raises(SystemExit, match="WEB_CONCURRENCY"):
            web_processes({"WEB_CONCURRENCY": bad})


def test_worker_timeout_outlasts_the_forecast_timeout() -> None:
    assert worker_timeout(Settings(forecast_timeout_seconds=30.0)) == 60
    assert worker_timeout(Settings(forecast_timeout_seconds=90.5)) == 120


def test_client_limits_from_the_environment() -> None:
    assert ClientLimits.from_env({}) == ClientLimits(header_seconds=5.0, body_seconds=10.0, body_min_rate=8192.0,
                                                     send_seconds=60.0)
    limits = ClientLimits.from_env({"HEADER_TIMEOUT_SECONDS": "2.5", "BODY_TIMEOUT_SECONDS": "4",
                                    "BODY_MIN_BYTES_PER_SECOND": "1000", "SEND_TIMEOUT_SECONDS": "7"})
    assert limits == ClientLimits(header_seconds=2.5, body_seconds=4.0, body_min_rate=1000.0, send_seconds=7.0)
    for name in ("HEADER_TIMEOUT_SECONDS", "BODY_TIMEOUT_SECONDS", "BODY_MIN_BYTES_PER_SECOND", "SEND_TIMEOUT_SECONDS"):
        for bad in ("0", "-1", "soon", "nan"):
            with pytest.raises(SystemExit, match=name):
                ClientLimits.from_env({name: bad})


def test_a_body_deadline_grows_with_the_bytes_received() -> None:
    limits = ClientLimits(body_seconds=10.0, body_min_rate=1000.0)
    assert limits.body_deadline(100.0, 0) == 110.0
    assert limits.body_deadline(100.0, 5000) == 115.0
