"""The client's parts that need no server: timestamp encoding, frequency inference, the retry policy, key
handling, and what the anomaly and monitor calls send and read (against a mock transport). What the service
does with the result is covered in tests/e2e/test_client.py."""

from __future__ import annotations

import json
import random
from datetime import UTC, date, datetime, timedelta, timezone
from email.utils import format_datetime
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import numpy as np
import pandas as pd
import pytest
from forecast_client import Client, Monitor, RetryPolicy, infer_frequency
from forecast_client._series import encode_series, normalize_frequency
from forecast_client._types import parse_retry_after

KEY = "ak_" + "ab" * 32


@pytest.mark.parametrize(
    ("index", "frequency", "first", "second"),
    [
        (pd.date_range("2026-01-01", periods=4, freq="s"), "Seconds", "2026-01-01T00:00:00", "2026-01-01T00:00:01"),
        (pd.date_range("2026-01-01", periods=4, freq="15min"), "Minutes", "2026-01-01T00:00:00", "2026-01-01T00:15:00"),
        (pd.date_range("2026-01-01", periods=4, freq="60min"), "Hours", "2026-01-01T00:00:00", "2026-01-01T01:00:00"),
        (pd.date_range("2026-01-01", periods=4, freq="D"), "Daily", "2026-01-01T00:00:00", "2026-01-02T00:00:00"),
        (pd.date_range("2026-01-04", periods=4, freq="W-SUN"), "Weekly", "2026-01-04T00:00:00", "2026-01-11T00:00:00"),
        (pd.date_range("2024-01-31", periods=4, freq="ME"), "Monthly", "2024-01-31T00:00:00", "2024-02-29T00:00:00"),
        (pd.date_range("2024-01-01", periods=4, freq="MS"), "Monthly", "2024-01-01T00:00:00", "2024-02-01T00:00:00"),
        (pd.date_range("2024-03-31", periods=4, freq="QE"), "Quarterly", "2024-03-31T00:00:00", "2024-06-30T00:00:00"),
        (pd.date_range("2020-12-31", periods=4, freq="YE"), "Yearly", "2020-12-31T00:00:00", "2021-12-31T00:00:00"),
        (pd.DatetimeIndex(pd.date_range("2026-01-01", periods=4, freq="D").tolist()), "Daily",  # no freq set
         "2026-01-01T00:00:00", "2026-01-02T00:00:00"),
    ],
)
def test_pandas_index_frequency_and_text(index: pd.DatetimeIndex, frequency: str, first: str, second: str) -> None:
    encoded = encode_series(pd.Series(np.arange(len(index), dtype=float), index=index), None)
    assert encoded.frequency == frequency
    assert encoded.timestamps[:2] == [first, second]
    assert encoded.values == [0.0, 1.0, 2.0, 3.0]


def test_zones_become_z_or_their_own_offset() -> None:
    utc = encode_series(pd.Series([1.0, 2.0, 3.0], index=pd.date_range("2026-01-01", periods=3, freq="h", tz="UTC")),
                        None)
    assert utc.timestamps[0] == "2026-01-01T00:00:00Z" and str(utc.tz) == "UTC"
    london = pd.date_range("2026-03-29 00:00", periods=3, freq="h", tz="Europe/London")
    encoded = encode_series(pd.Series([1.0, 2.0, 3.0], index=london), None)
    # London in winter is at +00:00 but is not UTC: one form for the whole series, never Z mixed with +00:00.
    assert encoded.timestamps == ["2026-03-29T00:00:00+00:00", "2026-03-29T02:00:00+01:00", "2026-03-29T03:00:00+01:00"]
    kolkata = [datetime(2026, 1, d, tzinfo=ZoneInfo("Asia/Kolkata")) for d in (1, 2, 3)]
    assert encode_series((kolkata, [1, 2, 3]), None).timestamps[0] == "2026-01-01T00:00:00+05:30"
    fixed = [datetime(2026, 1, d, tzinfo=timezone(timedelta(hours=-3, minutes=-30))) for d in (1, 2, 3)]
    assert encode_series((fixed, [1, 2, 3]), None).timestamps[2] == "2026-01-03T00:00:00-03:30"


def test_fractions_dates_and_numpy_inputs() -> None:
    index = pd.date_range("2026-01-01 00:00:00.250", periods=3, freq="s")
    assert encode_series(pd.Series([1.0, 2.0, 3.0], index=index), None).timestamps[0] == "2026-01-01T00:00:00.250000"
    days = encode_series(([date(2026, 1, 1), date(2026, 1, 2)], np.array([1, 2], dtype=np.int64)), None)
    assert days.timestamps == ["2026-01-01T00:00:00", "2026-01-02T00:00:00"] and days.values == [1.0, 2.0]
    stamps = np.array(["2026-01-01T00:00", "2026-01-01T00:05"], dtype="datetime64[s]")
    assert encode_series((stamps, [np.float32(1.5), np.int64(2)]), None).frequency == "Minutes"
    assert encode_series((stamps, [1.0, float("nan")]), None).values == [1.0, None]
    assert encode_series(pd.DataFrame({"v": [1.0, None, 3.0]}, index=pd.date_range("2026", periods=3)), None).values \
        == [1.0, None, 3.0]


@pytest.mark.parametrize(
    ("series", "error", "message"),
    [
        ((["2026-01-01T00:00:00", datetime(2026, 1, 2)], [1, 2]), TypeError, "mix text and datetimes"),
        (([datetime(2026, 1, 1), datetime(2026, 1, 2, tzinfo=UTC)], [1, 2]), ValueError, "mix forms"),
        (([datetime(2026, 1, 1), datetime(2026, 1, 2), datetime(2026, 1, 4)], [1, 2, 3]), ValueError,
         "not evenly spaced"),
        (([datetime(2026, 1, 1)], [1]), ValueError, "fewer than 2"),
        (([1, 2], [1, 2]), TypeError, "timestamps[0] is int"),
        (([datetime(2026, 1, 1), datetime(2026, 1, 2)], ["1", 2]), TypeError, "values[0] is str"),
        (([datetime(2026, 1, 1), datetime(2026, 1, 2)], [True, 2]), TypeError, "values[0] is bool"),
        (pd.Series([1.0, 2.0]), TypeError, "needs a DatetimeIndex"),
        (pd.DataFrame({"a": [1.0, 2.0], "b": [1.0, 2.0]}, index=pd.date_range("2026", periods=2)), TypeError,
         "exactly one value column"),
        (pd.Series([1.0, 2.0, 3.0], index=pd.bdate_range("2026-01-01", periods=3)), ValueError, "'B'"),
        (pd.Series([1.0, 2.0], index=pd.DatetimeIndex(["2026-01-01", pd.NaT])), ValueError, "missing (NaT)"),
        (pd.Series([1.0, 2.0], index=pd.DatetimeIndex(["2026-01-01", "2026-01-01 00:00:00.000000001"])), ValueError,
         "nanoseconds"),
        ("2026-01-01", TypeError, "series must be"),
    ],
)
def test_inputs_the_client_refuses_before_sending(series: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=None) as caught:
        encode_series(series, None)
    assert message in str(caught.value)


def test_frequency_names_and_aliases() -> None:
    assert normalize_frequency("hours") == "Hours" and normalize_frequency("QUARTERLY") == "Quarterly"
    assert normalize_frequency("5min") == "Minutes" and normalize_frequency("ME") == "Monthly"
    assert normalize_frequency("7D") == "Weekly" and normalize_frequency("90s") == "Seconds"
    with pytest.raises(ValueError, match="unknown frequency"):
        normalize_frequency("fortnightly")


def test_inferring_calendar_steps_without_pandas_freq() -> None:
    month_ends = [datetime(2023, 11, 30), datetime(2023, 12, 31), datetime(2024, 1, 31), datetime(2024, 2, 29)]
    assert infer_frequency(month_ends) == "Monthly"
    assert infer_frequency([datetime(2026, 1, 15), datetime(2026, 4, 15), datetime(2026, 7, 15)]) == "Quarterly"
    assert infer_frequency([datetime(2024, 2, 29), datetime(2025, 2, 28), datetime(2026, 2, 28)]) == "Yearly"
    assert infer_frequency([datetime(2026, 1, 1, 0, 0, 30), datetime(2026, 1, 1, 0, 1, 0)]) == "Seconds"
    # Fixed durations compare in UTC: an hourly Berlin series across the spring change is still hourly.
    berlin = [datetime(2026, 3, 29, 0, tzinfo=UTC) + timedelta(hours=h) for h in range(4)]
    assert infer_frequency([t.astimezone(ZoneInfo("Europe/Berlin")) for t in berlin]) == "Hours"


def test_retry_policy_backoff_budget_and_count() -> None:
    policy = RetryPolicy(max_retries=4, budget=10.0, backoff_base=0.5, backoff_max=3.0, rng=random.Random(1))
    waits = [[policy.delay(n, 0.0, None) for _ in range(200)] for n in range(4)]
    for retry, drawn in enumerate(waits):
        ceiling = min(3.0, 0.5 * 2**retry)
        assert all(0.0 <= w <= ceiling for w in drawn)
        assert max(drawn) > 0.8 * ceiling and min(drawn) < 0.2 * ceiling  # full jitter: the whole range is used
    assert policy.delay(4, 0.0, None) is None  # the count is spent
    assert policy.delay(0, 0.0, 7.0) == 7.0  # Retry-After as given
    assert policy.delay(0, 4.0, 7.0) is None  # 4 s gone + 7 s > 10 s budget
    with pytest.raises(ValueError):
        RetryPolicy(max_retries=-1)


def test_retry_after_forms() -> None:
    assert parse_retry_after("5") == 5.0 and parse_retry_after(" 0 ") == 0.0
    later = datetime.now(UTC) + timedelta(seconds=30)
    assert 25 <= (parse_retry_after(format_datetime(later, usegmt=True)) or 0) <= 31
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None and parse_retry_after("-3") == 0.0


def test_key_from_the_environment_and_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORECAST_API_KEY", KEY)
    monkeypatch.setenv("FORECAST_URL", "http://127.0.0.1:9/")
    with Client() as client:
        assert client.base_url == "http://127.0.0.1:9"
        assert KEY not in repr(client) and KEY not in str(vars(client).get("retry_policy"))
        assert client._http.headers["Authorization"] == f"Bearer {KEY}"
    monkeypatch.delenv("FORECAST_API_KEY")
    with pytest.raises(ValueError, match="FORECAST_API_KEY"):
        Client("http://127.0.0.1:9")


def test_async_client_mirrors_every_call_of_the_blocking_one() -> None:
    import inspect

    from forecast_client import AsyncClient

    public = {name for name in vars(Client) if not name.startswith("_") and name != "close"}
    assert {"forecast", "detect_anomalies", "create_key", "add_points", "deliveries"} <= public
    for name in sorted(public):
        blocking, awaited = getattr(Client, name), getattr(AsyncClient, name, None)
        assert awaited is not None and inspect.iscoroutinefunction(awaited), name
        assert inspect.signature(awaited) == inspect.signature(blocking), name


def _answering(answers: dict[str, dict[str, Any]], sent: list[tuple[str, dict[str, Any]]]) -> httpx.MockTransport:
    """A transport that records each request's path and JSON body and answers with the body named by path."""

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append((request.url.path, json.loads(request.content) if request.content else {}))
        return httpx.Response(200, json=answers[request.url.path])

    return httpx.MockTransport(handle)


def _anomaly_answers() -> dict[str, dict[str, Any]]:
    stamps = [f"2026-01-01T{hour:02d}:00:00" for hour in range(12)]
    scores = [0.0] * 11 + [0.9995]
    return {
        "/anomalies": {"timestamps": stamps, "expected": [1.0] * 12, "lower_bound": [0.0] * 12,
                       "upper_bound": [2.0] * 12, "anomaly_score": scores, "is_anomaly": [s >= 0.999 for s in scores],
                       "threshold": 0.999, "direction": [None] * 11 + ["up"], "warmup_points": 4, "period": None,
                       "out_of_order": []},
        "/anomalies/last": {"timestamp": stamps[-1], "expected": 1.0, "lower_bound": 0.0, "upper_bound": 2.0,
                            "anomaly_score": 0.9995, "is_anomaly": True, "threshold": 0.999, "direction": "up",
                            "warmup_points": 4, "period": None, "out_of_order": []},
    }


def test_anomaly_calls_send_the_threshold_setting_given_and_read_the_threshold() -> None:
    series = pd.Series(np.arange(12, dtype=float), index=pd.date_range("2026-01-01", periods=12, freq="h"))
    sent: list[tuple[str, dict[str, Any]]] = []
    with Client("http://service", KEY, transport=_answering(_anomaly_answers(), sent)) as client:
        default = client.detect_anomalies(series)
        by_budget = client.detect_anomalies(series, false_alarms_per_week=10)
        last = client.detect_last_anomaly(series, confidence=0.999)
        client.detect_anomalies(series, false_alarms_per_week=10, confidence=0.99)  # the service would refuse
    bodies = [body for _, body in sent]
    assert [{k for k in b if k in ("false_alarms_per_week", "confidence", "sensitivity")} for b in bodies] == [
        set(), {"false_alarms_per_week"}, {"confidence"}, {"false_alarms_per_week", "confidence"}]
    assert bodies[1]["false_alarms_per_week"] == 10 and bodies[2]["confidence"] == 0.999
    assert [path for path, _ in sent] == ["/anomalies", "/anomalies", "/anomalies/last", "/anomalies"]
    assert default.threshold == 0.999 and default.confidence is None and by_budget.confidence is None
    assert default.is_anomaly == [score >= default.threshold for score in default.score] and default.anomalies == [11]
    assert last.threshold == 0.999 and last.confidence == 0.999 and last.is_anomaly and last.score == 0.9995


def test_async_anomaly_call_sends_false_alarms_per_week() -> None:
    import asyncio

    from forecast_client import AsyncClient

    series = pd.Series(np.arange(12, dtype=float), index=pd.date_range("2026-01-01", periods=12, freq="h"))
    sent: list[tuple[str, dict[str, Any]]] = []

    async def calls() -> tuple[Any, Any]:
        async with AsyncClient("http://service", KEY, transport=_answering(_anomaly_answers(), sent)) as client:
            return (await client.detect_anomalies(series, false_alarms_per_week=0.5),
                    await client.detect_last_anomaly(series, false_alarms_per_week=0.5))

    result, last = asyncio.run(calls())
    assert [body["false_alarms_per_week"] for _, body in sent] == [0.5, 0.5]
    assert all("confidence" not in body for _, body in sent)
    assert result.threshold == last.threshold == 0.999 and result.confidence is None and last.confidence is None


def _monitor_body(**threshold: Any) -> dict[str, Any]:
    return {"id": "mon_1", "name": "road sensor", "data_frequency": "Minutes", "false_alarms_per_week": None,
            "confidence": None, "sensitivity": None, "min_deviation": 0.0, "min_relative_deviation": 0.0,
            "model": "anomaly-model-1", "retention_points": 10000, "webhook_url": None, "alertmanager_url": None,
            "remote_write_selector": None, "source": {"kind": "push"}, "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z", "point_count": 0, "last_timestamp": None, "open_anomalies": [],
            **threshold}


def test_monitor_threshold_fields_may_be_null() -> None:
    default = Monitor.from_body(_monitor_body())
    assert (default.false_alarms_per_week, default.confidence, default.sensitivity) == (None, None, None)
    budget = Monitor.from_body(_monitor_body(false_alarms_per_week=2))
    assert budget.false_alarms_per_week == 2.0 and isinstance(budget.false_alarms_per_week, float)
    assert Monitor.from_body(_monitor_body(confidence=0.995)).confidence == 0.995
    assert Monitor.from_body(_monitor_body(sensitivity=60)).sensitivity == 60
    older = _monitor_body(confidence=0.99)  # a server from before the alarm budget sends neither of the others
    del older["false_alarms_per_week"], older["sensitivity"]
    assert Monitor.from_body(older).confidence == 0.99 and Monitor.from_body(older).sensitivity is None


def test_monitor_calls_send_false_alarms_per_week() -> None:
    sent: list[tuple[str, dict[str, Any]]] = []
    answers = {"/monitors": _monitor_body(false_alarms_per_week=0.5),
               "/monitors/mon_1": _monitor_body(confidence=0.999)}
    with Client("http://service", KEY, transport=_answering(answers, sent)) as client:
        created = client.create_monitor("road sensor", "5min", false_alarms_per_week=0.5)
        updated = client.update_monitor("mon_1", confidence=0.999)
        client.update_monitor("mon_1", false_alarms_per_week=3)
    assert sent[0] == ("/monitors", {"name": "road sensor", "data_frequency": "Minutes", "false_alarms_per_week": 0.5})
    assert sent[1] == ("/monitors/mon_1", {"confidence": 0.999})
    assert sent[2] == ("/monitors/mon_1", {"false_alarms_per_week": 3})
    assert created.false_alarms_per_week == 0.5 and created.confidence is None
    assert updated.confidence == 0.999 and updated.false_alarms_per_week is None
