"""Acceptance: Microsoft's own azure-ai-anomalydetector SDK, pointed at a real gunicorn, gets its answers."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support import REQUIRE_SERVICES, Server, cli_in_process

pytestmark = pytest.mark.slow

try:
    from azure.ai.anomalydetector import AnomalyDetectorClient
    from azure.ai.anomalydetector.models import (
        TimeGranularity,
        TimeSeriesPoint,
        UnivariateChangePointDetectionOptions,
        UnivariateDetectionOptions,
    )
    from azure.core.credentials import AzureKeyCredential
    from azure.core.exceptions import HttpResponseError
except ImportError:  # a dev dependency; with REQUIRE_SERVICES=1 (CI) its absence fails the run
    reason = "azure-ai-anomalydetector is not installed (pip install azure-ai-anomalydetector==3.0.0b6)"
    if REQUIRE_SERVICES:
        pytest.fail(f"required package missing (REQUIRE_SERVICES=1): {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    folder = tmp_path_factory.mktemp("azure_sdk")
    env = {"DATABASE_URL": f"sqlite:///{folder / 'keys.sqlite3'}", "FORECAST_WORKERS": "1", "LOG_LEVEL": "INFO"}
    cli_in_process("db", "upgrade", env=env)
    key = json.loads(cli_in_process("keys", "create", "--permissions", "read", "--json", env=env).stdout)["key"]
    server = Server(env, log_path=folder / "gunicorn.log")
    server.wait_ready()
    yield server, key
    server.stop()


@pytest.fixture
def client(served: tuple[Server, str]) -> AnomalyDetectorClient:
    server, key = served
    return AnomalyDetectorClient(server.url, AzureKeyCredential(key))


def daily_points(count: int, *, spike_at: int | None = None, step_at: int | None = None) -> list[TimeSeriesPoint]:
    rng = random.Random(7)
    start = datetime(2025, 1, 1, tzinfo=UTC)
    points = []
    for i in range(count):
        value = 1000 + 200 * math.sin(2 * math.pi * i / 7) + rng.gauss(0, 10)
        if i == spike_at:
            value += 900
        if step_at is not None and i >= step_at:
            value += 600
        points.append(TimeSeriesPoint(timestamp=start + timedelta(days=i), value=value))
    return points


def test_entire_series(client: AnomalyDetectorClient) -> None:
    options = UnivariateDetectionOptions(
        series=daily_points(120, spike_at=100), granularity=TimeGranularity.DAILY, sensitivity=95
    )
    result = client.detect_univariate_entire_series(options=options)
    assert result.period == 7
    assert len(result.expected_values) == len(result.is_anomaly) == 120
    assert result.is_anomaly[100] and result.is_positive_anomaly[100] and not result.is_negative_anomaly[100]
    assert sum(result.is_anomaly) <= 12
    assert all(m >= 0 for m in result.upper_margins + result.lower_margins)


def test_sensitivity_moves_the_margins_and_the_verdicts(client: AnomalyDetectorClient) -> None:
    series = daily_points(120, spike_at=100)
    answers = {
        level: client.detect_univariate_entire_series(
            options=UnivariateDetectionOptions(series=series, granularity=TimeGranularity.DAILY, sensitivity=level)
        )
        for level in (0, 50, 99)
    }
    margins = {level: sum(answer.upper_margins[20:]) for level, answer in answers.items()}
    # Lower sensitivity: wider margins. On daily points a week is 7 of them, so from sensitivity 36 up the
    # budget reaches the cap of one point in 100 and 50 and 99 give the same margins.
    assert margins[0] > margins[50] == margins[99]
    flags = {level: sum(answer.is_anomaly) for level, answer in answers.items()}
    assert flags[0] <= flags[50] <= flags[99] and answers[0].is_anomaly[100]


def test_last_point(client: AnomalyDetectorClient) -> None:
    options = UnivariateDetectionOptions(series=daily_points(60, spike_at=59), granularity=TimeGranularity.DAILY)
    result = client.detect_univariate_last_point(options=options)
    assert result.is_anomaly and result.is_positive_anomaly and result.severity > 0
    assert result.period == 7 and result.suggested_window > 0
    normal = client.detect_univariate_last_point(
        options=UnivariateDetectionOptions(series=daily_points(60), granularity=TimeGranularity.DAILY)
    )
    assert not normal.is_anomaly and normal.severity == 0


def test_change_point(client: AnomalyDetectorClient) -> None:
    options = UnivariateChangePointDetectionOptions(
        series=daily_points(200, step_at=120), granularity=TimeGranularity.DAILY, stable_trend_window=7
    )
    result = client.detect_univariate_change_point(options=options)
    found = [i for i, flag in enumerate(result.is_change_point) if flag]
    assert found and all(abs(i - 120) <= 3 for i in found)
    assert len(result.confidence_scores) == 200


def test_errors_reach_the_sdk_as_azure_errors(served: tuple[Server, str], client: AnomalyDetectorClient) -> None:
    with pytest.raises(HttpResponseError) as short:
        client.detect_univariate_entire_series(
            options=UnivariateDetectionOptions(series=daily_points(5), granularity=TimeGranularity.DAILY)
        )
    assert short.value.status_code == 400 and short.value.error.code == "InvalidSeries"
    stranger = AnomalyDetectorClient(served[0].url, AzureKeyCredential("ak_" + "1" * 64))
    with pytest.raises(HttpResponseError) as denied:
        stranger.detect_univariate_last_point(
            options=UnivariateDetectionOptions(series=daily_points(30), granularity=TimeGranularity.DAILY)
        )
    assert denied.value.status_code == 401 and denied.value.error.code == "Unauthorized"


def test_sdk_log_never_holds_the_key(served: tuple[Server, str]) -> None:
    server, key = served
    assert key not in Path(server.log_path).read_text()
