"""Acceptance: Nixtla's own ``nixtla`` client (NixtlaClient 0.9), pointed at a real gunicorn with the job worker,
gets the answers this service's own routes give for the same series."""

from __future__ import annotations

import json
import math
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pytest
import requests

from tests.support import REQUIRE_SERVICES, Server, bearer, cli_in_process, served_with_jobs, wait_for

pytestmark = pytest.mark.slow

try:
    import zstandard
    from nixtla import NixtlaClient
    from nixtla._http import ApiError
except ImportError:  # a dev dependency; with REQUIRE_SERVICES=1 (CI) its absence fails the run
    reason = "nixtla is not installed (pip install nixtla==0.9.0)"
    if REQUIRE_SERVICES:
        pytest.fail(f"required package missing (REQUIRE_SERVICES=1): {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)

ENV = {"FORECAST_WORKERS": "1", "LOG_LEVEL": "WARNING", "BATCH_CHUNK_SERIES": "2"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str, dict[str, str]]]:
    folder = tmp_path_factory.mktemp("nixtla")
    env = {**ENV, "DATABASE_URL": f"sqlite:///{folder / 'service.sqlite3'}"}
    with served_with_jobs(env, folder) as (server, _):
        key = json.loads(cli_in_process("keys", "create", "--permissions", "read,write", "--per-minute", "100000",
                                        "--per-hour", "1000000", "--per-day", "10000000", "--json",
                                        env=env).stdout)["key"]
        yield server, key, env


def client_for(server: Server, key: str) -> NixtlaClient:
    # One attempt: a retried 429 would only hide what the test looks at.
    return NixtlaClient(api_key=key, base_url=server.url, max_retries=1, timeout=300)


@pytest.fixture
def nixtla(served: tuple[Server, str, dict[str, str]]) -> NixtlaClient:
    return client_for(served[0], served[1])


def monthly_frame(lengths: tuple[int, ...] = (48, 40, 60)) -> pd.DataFrame:
    """Values with two decimals at most, so the client's float32 encoding sends the same numbers."""
    frames = []
    for number, length in enumerate(lengths):
        ds = pd.date_range("2016-01-01", periods=length, freq="MS")
        y = [float(round(100 + 10 * number + 8 * math.sin(2 * math.pi * i / 12) + 0.5 * i + (i * 7 % 5)))
             for i in range(length)]
        frames.append(pd.DataFrame({"unique_id": f"series-{number}", "ds": ds, "y": y}))
    return pd.concat(frames, ignore_index=True)


def own_forecast(server: Server, key: str, part: pd.DataFrame, h: int, confidence: float,
                 model: str = "forecast-model-1") -> dict[str, Any]:
    answer = requests.post(f"{server.url}/forecast", headers={**bearer(key), "X-Model-Id": model}, timeout=60, json={
        "series": [{"timestamps": part["ds"].dt.strftime("%Y-%m-%dT%H:%M:%S").tolist(), "values": part["y"].tolist()}],
        "forecast_horizon": h, "data_frequency": "Monthly", "forecast_frequency": "Monthly",
        "confidence": confidence})
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_forecast_with_levels_equals_post_forecast(served: tuple[Server, str, dict[str, str]],
                                                   nixtla: NixtlaClient) -> None:
    server, key, _ = served
    df = monthly_frame()
    out = nixtla.forecast(df, h=6, freq="MS", level=[80, 95])
    assert list(out.columns) == ["unique_id", "ds", "TimeGPT", "TimeGPT-hi-80", "TimeGPT-hi-95", "TimeGPT-lo-80",
                                 "TimeGPT-lo-95"]
    for uid, part in df.groupby("unique_id"):
        mine = out[out["unique_id"] == uid]
        for level in (80, 95):
            ours = own_forecast(server, key, part, 6, level / 100)
            assert mine["TimeGPT"].tolist() == ours["median"]
            assert mine[f"TimeGPT-lo-{level}"].tolist() == ours["lower_bound"]
            assert mine[f"TimeGPT-hi-{level}"].tolist() == ours["upper_bound"]
            assert mine["ds"].dt.strftime("%Y-%m-%dT%H:%M:%S").tolist() == ours["forecast_timestamps"]


def test_model_quantiles_and_one_series_without_an_id(served: tuple[Server, str, dict[str, str]],
                                                      nixtla: NixtlaClient) -> None:
    server, key, _ = served
    df = monthly_frame((50,))
    out = nixtla.forecast(df.drop(columns="unique_id"), h=4, freq="MS", quantiles=[0.1, 0.5, 0.9],
                          model="forecast-model-2")
    assert list(out.columns) == ["ds", "TimeGPT", "TimeGPT-q-10", "TimeGPT-q-50", "TimeGPT-q-90"]
    ours = own_forecast(server, key, df, 4, 0.8, model="forecast-model-2")
    assert out["TimeGPT-q-10"].tolist() == ours["lower_bound"]
    assert out["TimeGPT-q-50"].tolist() == out["TimeGPT"].tolist() == ours["median"]
    assert out["TimeGPT-q-90"].tolist() == ours["upper_bound"]
    # TimeGPT's names mean the default model
    default = nixtla.forecast(df, h=4, freq="MS", model="timegpt-1")
    assert default["TimeGPT"].tolist() == own_forecast(server, key, df, 4, 0.95)["median"]


def test_add_history_gives_the_windows_the_client_asks_for(served: tuple[Server, str, dict[str, str]],
                                                           nixtla: NixtlaClient) -> None:
    """The client asks for one window of min(100, shortest - 1) points ending with each series (what
    model_params' sizes make it ask); a series too short for it gets the longest window its history allows."""
    server, key, _ = served
    df = monthly_frame((30,))
    out = nixtla.forecast(df, h=3, freq="MS", add_history=True)
    history = out[out["ds"] <= df["ds"].max()]
    assert len(history) == 30 - 10 and len(out) == 20 + 3  # the last 20 points, forecast from the first 10
    ours = own_forecast(server, key, df.iloc[:10], 20, 0.95)
    assert history["TimeGPT"].tolist() == ours["median"]


def hourly_frame(series: int = 3, length: int = 336) -> pd.DataFrame:
    frames = [pd.DataFrame({"unique_id": f"h{number}", "ds": pd.date_range("2024-01-01", periods=length, freq="h"),
                            "y": [float(round(50 + 10 * number + 8 * math.sin(2 * math.pi * i / 24) + (i * 7 % 5)))
                                  for i in range(length)]}) for number in range(series)]
    return pd.concat(frames, ignore_index=True)


def test_add_history_of_hourly_series_is_one_window_of_100(served: tuple[Server, str, dict[str, str]],
                                                           nixtla: NixtlaClient) -> None:
    server, key, _ = served
    df = hourly_frame()
    out = nixtla.forecast(df, h=24, freq="h", add_history=True, level=[80])
    for uid, part in df.groupby("unique_id"):
        mine = out[(out["unique_id"] == uid) & (out["ds"] <= part["ds"].max())]
        assert mine["ds"].tolist() == part["ds"].iloc[-100:].tolist()
        answer = requests.post(f"{server.url}/forecast", headers=bearer(key), timeout=60, json={
            "series": [{"timestamps": part["ds"].iloc[:236].dt.strftime("%Y-%m-%dT%H:%M:%S").tolist(),
                        "values": part["y"].iloc[:236].tolist()}],
            "forecast_horizon": 100, "data_frequency": "Hours", "forecast_frequency": "Hours", "confidence": 0.8})
        assert answer.status_code == 200, answer.text
        assert mine["TimeGPT"].tolist() == answer.json()["median"]
        assert mine["TimeGPT-lo-80"].tolist() == answer.json()["lower_bound"]


def test_what_a_call_may_cost_is_capped_with_a_clear_400(served: tuple[Server, str, dict[str, str]],
                                                         nixtla: NixtlaClient) -> None:
    df = monthly_frame((12,) * 1001)
    with pytest.raises(ApiError) as caught:
        nixtla.forecast(df, h=2, freq="MS")
    assert caught.value.status_code == 400 and "at most 1,000 series" in caught.value.body["detail"]
    many = hourly_frame(series=21, length=100)
    with pytest.raises(ApiError) as caught:
        nixtla.cross_validation(many, h=1, freq="h", n_windows=50, level=list(range(60, 99, 2)))
    assert caught.value.status_code == 400 and "at most 1,000 model fits" in caught.value.body["detail"]


def test_options_keys_and_methods_get_clear_answers(served: tuple[Server, str, dict[str, str]],
                                                    nixtla: NixtlaClient) -> None:
    server, key, env = served
    df = monthly_frame((40,))
    for options, words in (({"finetune_loss": "mae"}, "Fine-tuning (finetune_loss)"),
                           ({"finetune_depth": 2}, "Fine-tuning (finetune_depth)")):
        with pytest.raises(ApiError) as caught:
            nixtla.forecast(df, h=2, freq="MS", **options)
        assert caught.value.status_code == 400 and caught.value.body["detail"].startswith(words)
    writer = json.loads(cli_in_process("keys", "create", "--permissions", "write", "--name",
                                       f"writer-{uuid.uuid4().hex[:6]}", "--json", env=env).stdout)["key"]
    assert client_for(server, writer).validate_api_key(log=False) is False
    wrong = requests.get(f"{server.url}/v2/forecast", headers=bearer(key), timeout=30)
    assert wrong.status_code == 405 and wrong.headers["Allow"] == "POST", wrong.text


def backtest_batch(server: Server, key: str, df: pd.DataFrame, **fields: Any) -> list[dict[str, Any]]:
    body = {"kind": "backtest", "data_frequency": "Monthly", "forecast_frequency": "Monthly", **fields,
            "series": [{"id": uid, "timestamps": part["ds"].dt.strftime("%Y-%m-%dT%H:%M:%S").tolist(),
                        "values": part["y"].tolist()} for uid, part in df.groupby("unique_id")]}
    submitted = requests.post(f"{server.url}/batches", json=body, headers=bearer(key), timeout=60)
    assert submitted.status_code == 202, submitted.text
    batch_id = submitted.json()["id"]
    wait_for(lambda: requests.get(f"{server.url}/batches/{batch_id}", headers=bearer(key), timeout=10)
             .json()["status"] == "done", 300, "the backtest", interval=0.5)
    text = requests.get(f"{server.url}/batches/{batch_id}/results", headers=bearer(key), timeout=60).text
    return [json.loads(line) for line in text.splitlines()]


def test_cross_validation_equals_the_backtest_batch(served: tuple[Server, str, dict[str, str]],
                                                    nixtla: NixtlaClient) -> None:
    server, key, _ = served
    df = monthly_frame((48, 40))
    out = nixtla.cross_validation(df, h=4, freq="MS", n_windows=3, step_size=2, level=[90])
    assert list(out.columns) == ["unique_id", "ds", "cutoff", "y", "TimeGPT", "TimeGPT-hi-90", "TimeGPT-lo-90"]
    rows = backtest_batch(server, key, df, forecast_horizon=4, n_windows=3, step_size=2, confidence=0.9)
    for row in rows:
        mine = out[out["unique_id"] == row["id"]]
        assert len(mine) == 3 * 4
        windows = [mine.iloc[4 * w:4 * w + 4] for w in range(3)]
        for window, theirs in zip(row["windows"], windows, strict=True):
            assert theirs["cutoff"].dt.strftime("%Y-%m-%dT%H:%M:%S").unique().tolist() == [window["cutoff"]]
            assert theirs["ds"].dt.strftime("%Y-%m-%dT%H:%M:%S").tolist() == window["timestamps"]
            assert theirs["y"].tolist() == window["actual"]
            forecast = window["forecasts"]["forecast-model-1"]
            assert theirs["TimeGPT"].tolist() == forecast["median"]
            assert theirs["TimeGPT-lo-90"].tolist() == forecast["lower"]
            assert theirs["TimeGPT-hi-90"].tolist() == forecast["upper"]


def own_anomalies(server: Server, key: str, part: pd.DataFrame, confidence: float) -> dict[str, Any]:
    answer = requests.post(f"{server.url}/anomalies", headers=bearer(key), timeout=60, json={
        "series": [{"timestamps": part["ds"].dt.strftime("%Y-%m-%dT%H:%M:%S").tolist(), "values": part["y"].tolist()}],
        "data_frequency": "Daily", "confidence": confidence})
    assert answer.status_code == 200, answer.text
    return answer.json()


def daily_with_spike(length: int = 90, spike: int = 80) -> pd.DataFrame:
    ds = pd.date_range("2025-01-01", periods=length, freq="D")
    y = [float(round(50 + 10 * math.sin(2 * math.pi * i / 7) + (i * 5 % 3))) + (60 if i == spike else 0)
         for i in range(length)]
    return pd.DataFrame({"unique_id": "daily", "ds": ds, "y": y})


def test_detect_anomalies_equals_post_anomalies(served: tuple[Server, str, dict[str, str]],
                                                nixtla: NixtlaClient) -> None:
    server, key, _ = served
    df = daily_with_spike()
    with pytest.warns(FutureWarning):
        out = nixtla.detect_anomalies(df, freq="D", level=99)
    ours = own_anomalies(server, key, df, 0.99)
    warm = ours["warmup_points"]
    assert len(out) == len(df) - warm
    assert out["TimeGPT"].tolist() == ours["expected"][warm:]
    assert out["anomaly"].tolist() == ours["is_anomaly"][warm:]
    assert out["TimeGPT-lo-99"].tolist() == ours["lower_bound"][warm:]
    assert bool(out.loc[out["ds"] == df["ds"].iloc[80], "anomaly"].item())


def test_detect_anomalies_online_judges_the_last_rows(served: tuple[Server, str, dict[str, str]],
                                                      nixtla: NixtlaClient) -> None:
    server, key, _ = served
    df = daily_with_spike(spike=85)
    out = nixtla.detect_anomalies_online(df, h=7, detection_size=10, freq="D", level=95)
    assert out["ds"].tolist() == df["ds"].iloc[-10:].tolist() and out["y"].tolist() == df["y"].iloc[-10:].tolist()
    ours = own_anomalies(server, key, df, 0.95)
    assert out["TimeGPT"].tolist() == ours["expected"][-10:]
    assert out["anomaly"].tolist() == ours["is_anomaly"][-10:]
    assert out["anomaly_score"].tolist() == ours["anomaly_score"][-10:]
    assert out["TimeGPT-hi-95"].tolist() == ours["upper_bound"][-10:]
    assert bool(out.loc[out["ds"] == df["ds"].iloc[85], "anomaly"].item())


def test_key_validation_model_params_and_a_bad_key(served: tuple[Server, str, dict[str, str]],
                                                   nixtla: NixtlaClient) -> None:
    server, _, _ = served
    assert nixtla.validate_api_key(log=False) is True
    assert "forecast-model-2" in nixtla.list_models()
    stranger = client_for(server, "ak_" + "0" * 64)
    assert stranger.validate_api_key(log=False) is False
    with pytest.raises(ApiError) as caught:
        stranger.forecast(monthly_frame((40,)), h=3, freq="MS")
    assert caught.value.status_code == 401 and "API key" in caught.value.body["detail"]


@pytest.mark.parametrize(("call", "feature"), [
    (lambda c, df: c.forecast(df, h=3, freq="MS", finetune_steps=5), "Fine-tuning"),
    (lambda c, df: c.detect_anomalies(df.assign(x=1.0), freq="MS"), "Exogenous variables in anomaly detection"),
    (lambda c, df: c.forecast(df.assign(x=1.0), h=3, freq="MS", hist_exog_list=["x"], feature_contributions=True),
     "Feature contributions"),
    (lambda c, df: c.forecast(df, h=3, freq="MS", multivariate=True), "Multivariate"),
    (lambda c, df: c.cross_validation(df, h=3, freq="MS", finetune_steps=2), "Fine-tuning"),
    (lambda c, df: c.detect_anomalies_online(df, h=3, detection_size=5, freq="MS", threshold_method="multivariate"),
     "Multivariate"),
    (lambda c, df: c.forecast(df, h=3, freq="MS", model_parameters={"horizon": 4}), "Model parameters"),
])
def test_what_is_not_offered_is_refused_by_name(nixtla: NixtlaClient, call: Any, feature: str) -> None:
    with pytest.raises(ApiError) as caught:
        call(nixtla, monthly_frame((40,)))
    assert caught.value.status_code == 400
    assert caught.value.body["code"] == "UNSUPPORTED_FEATURE" and caught.value.body["detail"].startswith(feature)


def test_bad_input_is_a_4xx_in_nixtla_shape(served: tuple[Server, str, dict[str, str]],
                                            nixtla: NixtlaClient) -> None:
    server, key, _ = served
    df = monthly_frame((24,))
    cases = [
        (lambda: nixtla.cross_validation(df, h=6, freq="MS", n_windows=4), 422, "too few for 4 windows"),
        (lambda: nixtla.forecast(df, h=101, freq="MS"), 400, "h must be an integer between 1 and 100"),
        (lambda: nixtla.forecast(df, h=3, freq="MS", model="prophet"), 400, "Unknown model 'prophet'"),
        (lambda: nixtla.forecast(df, h=3, freq="MS", level=[99.5]), 400, "level 99.5 is outside"),
        (lambda: nixtla.forecast(df.iloc[:8], h=3, freq="MS"), 422, "insufficient data points"),
    ]
    for call, status, words in cases:
        with pytest.raises(ApiError) as caught:
            call()
        assert caught.value.status_code == status and words in caught.value.body["detail"], caught.value.body
    # What the client itself refuses before sending: duplicate timestamps, a frequency the data does not keep.
    with pytest.raises(ValueError, match="duplicate"):
        nixtla.forecast(pd.concat([df, df.iloc[[5]]]), h=3, freq="MS")
    mixed = pd.concat([df["ds"].iloc[:12], pd.Series(pd.date_range("2017-01-01", periods=12, freq="D"))])
    with pytest.raises(ValueError, match="do not match the provided frequency"):
        nixtla.forecast(df.assign(ds=mixed.to_numpy()), h=3, freq="MS")

    def raw(body: Any) -> requests.Response:
        return requests.post(f"{server.url}/v2/cross_validation", json=body, headers=bearer(key), timeout=60)

    body = {"series": {"y": [1.0] * 30, "sizes": [30], "start_datetime": ["2020-01-01"]}, "freq": "MS", "h": 3,
            "n_windows": 2, "step_size": 3, "model": "timegpt-2.1"}
    for change, words in (({"n_windows": 0}, "n_windows must be an integer between 1 and 50"),
                          ({"series": {**body["series"], "sizes": [29]}}, "add up to 29"),
                          ({"freq": "B"}, "freq 'B' is not supported"),
                          ({"freq": "W-SUN"}, "is not on freq 'W-SUN'")):
        answer = raw({**body, **change})
        assert answer.status_code == 400 and words in answer.json()["detail"], answer.text


def test_a_200_mb_body_is_refused_from_its_length_by_both_doors(served: tuple[Server, str, dict[str, str]]) -> None:
    server, key, _ = served

    def listed() -> int:
        return len(requests.get(f"{server.url}/batches", headers=bearer(key), timeout=30).json()["batches"])

    before = listed()
    for path, start in (("/v2/forecast", b'{"series": {"y": ['), ("/batches", b'{"kind": "backtest", "series": [')):
        head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {200 * 1024 * 1024}\r\n\r\n").encode()
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(head + start + b"1.0," * 1000)
            reply = b""
            while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
                data = sock.recv(65536)
                if not data:
                    break
                reply += data
        status_line, _, rest = reply.partition(b"\r\n")
        assert b" 413 " in status_line, reply[:300]
        body = json.loads(rest.partition(b"\r\n\r\n")[2])
        # each door in its own shape
        message = body["detail"] if path.startswith("/v2/") else body["error"]["message"]
        assert "larger than" in message
    assert listed() == before


def test_a_key_without_read_is_refused(served: tuple[Server, str, dict[str, str]]) -> None:
    server, _, env = served
    writer = json.loads(cli_in_process("keys", "create", "--permissions", "write", "--name",
                                       f"writer-{uuid.uuid4().hex[:6]}", "--json", env=env).stdout)["key"]
    with pytest.raises(ApiError) as caught:
        client_for(server, writer).forecast(monthly_frame((40,)), h=2, freq="MS")
    assert caught.value.status_code == 403 and "'read' permission" in caught.value.body["detail"]


def test_zstd_bodies_are_read_as_the_client_sends_them(served: tuple[Server, str, dict[str, str]],
                                                       nixtla: NixtlaClient) -> None:
    server, key, _ = served
    rng = np.random.default_rng(3)
    # 250 weekly series of 600 points: the client's body passes 1 MiB, so it compresses it.
    frames = [pd.DataFrame({"unique_id": f"w{i:03d}", "ds": pd.date_range("2010-01-03", periods=600, freq="W-SUN"),
                            "y": np.round(rng.normal(10_000, 50, 600)).astype(float)}) for i in range(250)]
    df = pd.concat(frames, ignore_index=True)
    assert len(json.dumps(df["y"].tolist(), separators=(",", ":"))) > 1024 * 1024
    out = nixtla.forecast(df, h=2, freq="W-SUN", model="forecast-model-2")
    assert len(out) == 500 and out["TimeGPT"].notna().all()
    first = df[df["unique_id"] == "w000"]
    plain = {"series": {"y": first["y"].tolist(), "sizes": [600], "start_datetime": ["2010-01-03"]},
             "freq": "W-SUN", "h": 2, "model": "forecast-model-2"}
    compressed = zstandard.ZstdCompressor(level=1).compress(json.dumps(plain).encode())
    answer = requests.post(f"{server.url}/v2/forecast", data=compressed, timeout=60, headers={
        **bearer(key), "Content-Type": "application/json", "Content-Encoding": "zstd"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["mean"] == out["TimeGPT"].iloc[:2].tolist()
    broken = requests.post(f"{server.url}/v2/forecast", data=compressed[:40], timeout=60, headers={
        **bearer(key), "Content-Type": "application/json", "Content-Encoding": "zstd"})
    assert broken.status_code == 400 and "zstd" in broken.json()["detail"]


def test_a_call_counts_one_request_per_series(served: tuple[Server, str, dict[str, str]]) -> None:
    server, _, env = served
    limited = json.loads(cli_in_process("keys", "create", "--permissions", "read", "--per-minute", "1000",
                                        "--per-hour", "4", "--name", f"limited-{uuid.uuid4().hex[:6]}", "--json",
                                        env=env).stdout)["key"]
    client = client_for(server, limited)
    client.forecast(monthly_frame((40, 40, 40)), h=2, freq="MS")  # 3 of the hour's 4
    with pytest.raises(ApiError) as caught:
        client.forecast(monthly_frame((40, 40)), h=2, freq="MS")
    assert caught.value.status_code == 429 and "counts 2 requests" in caught.value.body["detail"]
