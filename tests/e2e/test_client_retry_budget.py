"""The Python client's defaults sit out the service's own shortest window: with a key of 5 requests a minute, the
sixth call waits the real Retry-After (about 60 s) and succeeds instead of raising RateLimited. Needs a real
gunicorn and takes about a minute."""

from __future__ import annotations

import inspect
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from forecast_client import AsyncClient, Client, RetryPolicy

from tests.support import Server, cli_in_process

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict[str, str]]]:
    directory = tmp_path_factory.mktemp("budget")
    env = {"DATABASE_URL": f"sqlite:///{directory / 'keys.sqlite3'}", "FORECAST_WORKERS": "1", "LOG_LEVEL": "INFO"}
    cli_in_process("db", "upgrade", env=env)
    server = Server(env, log_path=directory / "gunicorn.log")
    try:
        server.wait_ready()
        yield server, env
    finally:
        server.stop()


MINUTE_AND_MARGIN = 65  # a per-minute window's Retry-After is at most about 61 s


def default_budget(cls: type) -> float:
    return float(inspect.signature(cls).parameters["retry_budget"].default)


def test_the_default_budget_outlasts_a_full_minute_window() -> None:
    budgets = {default_budget(Client), default_budget(AsyncClient), RetryPolicy().budget}
    assert len(budgets) == 1 and min(budgets) >= MINUTE_AND_MARGIN, budgets
    assert "retry_budget" in (Client.__doc__ or "") and "per-minute window" in (Client.__doc__ or "")
    readme = (Path(__file__).resolve().parents[2] / "clients" / "python" / "README.md").read_text()
    assert "`retry_budget` is how long" in readme and "default, 90 s" in readme


def test_a_default_client_waits_out_a_per_minute_limit(served: tuple[Server, dict[str, str]],
                                                        caplog: pytest.LogCaptureFixture) -> None:
    server, env = served
    created = json.loads(cli_in_process("keys", "create", "--permissions", "read", "--per-minute", "5", "--json",
                                        env=env).stdout)
    with Client(server.url, created["key"]) as client:  # every retry setting at its default
        started = time.monotonic()
        for _ in range(5):
            client.list_monitors()
        assert client.rate_limit is not None and client.rate_limit.remaining == 0
        with caplog.at_level(logging.DEBUG, logger="forecast_client"):
            page = client.list_monitors()  # the sixth in the minute: 429, Retry-After ~60 s, then served
        waited = time.monotonic() - started
    assert page.monitors == []
    assert 50 <= waited <= default_budget(Client), waited
    assert any("Retry-After" in record.getMessage() for record in caplog.records)
    leaked = created["key"] in caplog.text
    assert not leaked
