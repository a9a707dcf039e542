"""What one call of the Nixtla routes may cost, and the options they answer rather than ignore: the series and
fits caps are checked before any series is rebuilt (and before the key's windows are spent), every level of a
window comes from one fit, and the client's fine-tuning options, raw quantiles, a key that cannot use the routes
and a wrong method each get a clear answer (docs/nixtla.md)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import zstandard
from flask import Flask
from flask.testing import FlaskClient

from app.compat.nixtla import answers
from app.compat.nixtla.schemas import MAX_FITS_PER_CALL, MAX_SERIES_PER_CALL, read_series
from app.forecast.covariates import MAX_COVARIATES
from tests.support import ROOMY_LIMITS, bearer, new_key, services_of, serving_app


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    with serving_app(tmp_path_factory, "nixtla-limits") as application:
        yield application


@pytest.fixture(scope="module")
def key(app: Flask) -> str:
    return new_key(app, ("read",), **ROOMY_LIMITS)[0]


def hourly(count: int) -> list[float]:
    return [round(100 + 10 * math.sin(2 * math.pi * i / 24) + (i * 7 % 5), 2) for i in range(count)]


def body(values: list[float], sizes: list[int] | None = None, **fields: Any) -> dict[str, Any]:
    sizes = sizes or [len(values)]
    return {"series": {"y": values, "sizes": sizes, "start_datetime": ["2024-01-01T00:00:00"] * len(sizes)},
            "freq": "h", "h": 4, **fields}


def hour_left(client: FlaskClient, app: Flask, admin: str, key_id: str) -> int:
    services_of(app).usage.flush()
    answer = client.get(f"/keys/{key_id}/usage?hours=1", headers=bearer(admin)).get_json()
    return int(next(w for w in answer["rate_limits"] if w["window"] == "hour")["remaining"])


def test_too_many_series_are_refused_before_they_are_rebuilt_or_spent(app: Flask) -> None:
    client = app.test_client()
    admin = new_key(app, ("admin",))[0]
    plain, key_id = new_key(app, ("read",), per_minute=100, per_hour=1000, per_day=10_000)
    count = 230_000
    wire = zstandard.ZstdCompressor(level=19).compress(orjson.dumps(body([1.0] * (10 * count), [10] * count)))
    assert len(wire) < 64 * 1024  # a tiny body that asks for a huge amount of parsing
    answer = client.post("/v2/forecast", data=wire, headers={**bearer(plain), "Content-Type": "application/json",
                                                             "Content-Encoding": "zstd"})
    assert answer.status_code == 400, answer.get_data(as_text=True)[:300]
    assert answer.get_json()["code"] == "TOO_MANY_SERIES"
    assert f"at most {MAX_SERIES_PER_CALL:,} series" in answer.get_json()["detail"]
    assert hour_left(client, app, admin, key_id) == 1000 - 1  # the refused call only, nothing spent for its series


def test_the_cap_is_read_before_any_timestamp_is_built() -> None:
    heard: list[int] = []

    def admit(series: int) -> None:
        heard.append(series)
        raise RuntimeError("stop before the rebuild")

    # A start that is not a timestamp would be refused while rebuilding: the hook runs first.
    broken = body([1.0] * 30, [10, 10, 10])
    broken["series"]["start_datetime"] = ["not a time"] * 3
    with pytest.raises(RuntimeError, match="stop before"):
        read_series(broken, {}, max_points=1000, before_rebuild=admit)
    assert heard == [3]


def test_a_cross_validation_over_the_fits_cap_is_refused_before_any_work(app: Flask, key: str) -> None:
    client = app.test_client()
    series = MAX_FITS_PER_CALL // 50 + 1
    values = hourly(60) * series
    answer = client.post("/v2/cross_validation", headers=bearer(key),
                         json=body(values, [60] * series, h=1, n_windows=50, step_size=1))
    assert answer.status_code == 400, answer.get_data(as_text=True)
    assert answer.get_json()["code"] == "TOO_MUCH_WORK"
    assert f"at most {MAX_FITS_PER_CALL:,} model fits" in answer.get_json()["detail"]


def test_levels_do_not_multiply_the_fits(app: Flask) -> None:
    """The web process's runner and a direct one compute the same: counted here, each call is one fit."""
    fits: list[Any] = []

    def run(work: Any) -> Any:
        fits.append(work)
        return work.run()

    many = [float(level) for level in range(60, 99, 2)]  # 20 levels
    request = read_series(body(hourly(200), h=6, n_windows=5, level=many), {}, max_points=10_000)
    together = answers.cross_validation(request, max_points=10_000, run=run)
    assert len(fits) == 5  # one per window, whatever the levels
    for level in (60.0, 80.0, 98.0):
        fits.clear()
        alone = answers.cross_validation(read_series(body(hourly(200), h=6, n_windows=5, level=[level]), {},
                                              max_points=10_000), max_points=10_000, run=run)
        assert len(fits) == 5
        assert alone["mean"] == together["mean"]
        for side in ("lo", "hi"):
            name = f"{side}-{level:g}"
            assert alone["intervals"][name] == together["intervals"][name]


@pytest.mark.parametrize(("fields", "status", "words"), [
    ({"finetune_steps": "5"}, 400, "finetune_steps must be a non-negative integer"),
    ({"finetune_steps": -1}, 400, "finetune_steps must be a non-negative integer"),
    ({"finetune_loss": "mae"}, 400, "Fine-tuning (finetune_loss)"),
    ({"finetune_depth": 3}, 400, "Fine-tuning (finetune_depth)"),
    ({"quantiles": [0.1, 0.9]}, 400, "quantiles is not read by this route: send level"),
])
def test_options_are_answered_not_ignored(app: Flask, key: str, fields: dict[str, Any], status: int,
                                          words: str) -> None:
    answer = app.test_client().post("/v2/forecast", headers=bearer(key), json=body(hourly(60), **fields))
    assert answer.status_code == status and words in answer.get_json()["detail"], answer.get_json()


def test_the_clients_defaults_are_accepted(app: Flask, key: str) -> None:
    answer = app.test_client().post("/v2/forecast", headers=bearer(key), json=body(
        hourly(60), finetune_steps=0, finetune_loss="default", finetune_depth=1, quantiles=None))
    assert answer.status_code == 200, answer.get_json()


def test_validate_api_key_says_what_the_key_can_do(app: Flask, key: str) -> None:
    client = app.test_client()
    reader = client.get("/validate_api_key", headers=bearer(key))
    assert reader.status_code == 200 and "read" in reader.get_json()["detail"]
    writer = new_key(app, ("write",))[0]
    refused = client.get("/validate_api_key", headers=bearer(writer))
    assert refused.status_code == 403
    assert "lacks the 'read' permission" in refused.get_json()["detail"]
    assert client.post("/v2/forecast", headers=bearer(writer), json=body(hourly(60))).status_code == 403


@pytest.mark.parametrize(("method", "path", "allowed"), [
    ("GET", "/v2/forecast", "POST"), ("DELETE", "/v2/cross_validation", "POST"),
    ("GET", "/v2/anomaly_detection", "POST"), ("POST", "/v2/models", "GET"),
])
def test_a_known_route_with_a_wrong_method_is_405(app: Flask, key: str, method: str, path: str,
                                                  allowed: str) -> None:
    answer = app.test_client().open(path, method=method, headers=bearer(key))
    assert answer.status_code == 405, answer.get_data(as_text=True)
    assert answer.headers["Allow"] == allowed and answer.get_json()["code"] == "METHOD_NOT_ALLOWED"
    assert app.test_client().get("/v2/nothing_here", headers=bearer(key)).status_code == 404


def test_add_history_costs_one_fit_per_series_window(app: Flask) -> None:
    """The client's in-sample request (h = min(100, shortest - 1), one window, step = h) is that one window."""
    fits: list[Any] = []

    def run(work: Any) -> Any:
        fits.append(work)
        return work.run()

    values = hourly(336) * 3
    request = read_series(body(values, [336] * 3, h=100, n_windows=1, step_size=100, full_history=True), {},
                          max_points=10_000)
    out = answers.cross_validation(request, max_points=10_000, run=run)
    assert len(fits) == 3 and out["sizes"] == [100] * 3
    # each series' last 100 hours, each forecast from the 236 hours before them
    assert out["idxs"] == [i for start in (0, 336, 672) for i in range(start + 236, start + 336)]


def with_columns(values: list[float], count: int) -> dict[str, Any]:
    """A forecast body with ``count`` past-only exogenous columns."""
    sent = body(values)
    sent["series"]["X"] = [[float(i % 7 + number) for i in range(len(values))] for number in range(count)]
    return sent


@pytest.mark.parametrize(("path", "sent", "status", "code", "start"), [
    # A front door's refusal of one series, named by its place in the call.
    ("/v2/forecast", body(hourly(60) + hourly(3), sizes=[60, 3]), 422, "DATA_VALIDATION_ERROR",
     "series 1: Invalid series data: "),
    ("/v2/cross_validation", body(hourly(20), h=6, n_windows=5), 422, "DATA_VALIDATION_ERROR",
     "series 0 holds 20 points, too few for 5 windows"),
    ("/v2/cross_validation", body(hourly(60), full_history=True, step_size=2), 400, "INVALID_REQUEST",
     "step_size must equal h (4) with full_history"),
    ("/v2/anomaly_detection", body(hourly(60), level=20), 400, "INVALID_REQUEST",
     "level must be a number between 50 and 99.99"),
    ("/v2/online_anomaly_detection", body(hourly(60), level=99, detection_size=60), 422, "DATA_VALIDATION_ERROR",
     "series 0 holds 60 points; detection_size=60 leaves no history"),
    ("/v2/forecast", with_columns(hourly(60), MAX_COVARIATES + 1), 400, "TOO_MANY_COVARIATES",
     f"A call may send at most {MAX_COVARIATES} exogenous columns"),
])
def test_refusals_keep_their_status_and_code_in_nixtlas_shape(app: Flask, key: str, path: str, sent: dict[str, Any],
                                                              status: int, code: str, start: str) -> None:
    answer = app.test_client().post(path, headers=bearer(key), json=sent)
    refusal = answer.get_json()
    assert answer.status_code == status and set(refusal) == {"detail", "code"}, refusal
    assert refusal["code"] == code and refusal["detail"].startswith(start), refusal
