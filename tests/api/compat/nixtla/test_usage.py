"""Nixtla's routes count a key's use as the service's own routes do: a call of n series is n requests in the
key's usage and its rate-limit windows, as a batch of n series is, and a refused call is one, as a refused POST
/forecast is."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.support import bearer, immediate_app, new_key, services_of


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    with immediate_app(tmp_path_factory.mktemp("nixtla-usage")) as application:
        yield application


def monthly(count: int) -> tuple[list[str], list[float]]:
    stamps = [datetime(2016 + i // 12, 1 + i % 12, 1).strftime("%Y-%m-%dT%H:%M:%S") for i in range(count)]
    return stamps, [round(50 + 5 * math.sin(2 * math.pi * i / 12) + 0.3 * i, 2) for i in range(count)]


def usage(client: FlaskClient, app: Flask, admin: str, key_id: str) -> dict[str, Any]:
    services_of(app).usage.flush()
    # Two hours: the buckets are by clock hour, and a test that crosses one would find its requests an hour back.
    body = client.get(f"/keys/{key_id}/usage?hours=2", headers=bearer(admin)).get_json()
    hour = next(w for w in body["rate_limits"] if w["window"] == "hour")
    return {**body["totals"], "hour_left": hour["remaining"]}


def test_a_call_of_n_series_counts_as_a_batch_of_n_and_a_refusal_as_one(app: Flask) -> None:
    client = app.test_client()
    admin = new_key(app, ("admin",))[0]
    doors = {name: new_key(app, ("read", "write"), per_hour=1000) for name in ("nixtla", "own")}
    stamps, values = monthly(30)

    nixtla_key = bearer(doors["nixtla"][0])
    answer = client.post("/v2/forecast", headers=nixtla_key, json={
        "series": {"y": values * 3, "sizes": [30, 30, 30], "start_datetime": [stamps[0]] * 3}, "freq": "MS", "h": 3})
    assert answer.status_code == 200, answer.get_data(as_text=True)
    assert client.post("/v2/forecast", headers=nixtla_key, json={"series": {}, "freq": "MS", "h": 3}).status_code == 400

    own_key = bearer(doors["own"][0])
    fields = {"forecast_horizon": 3, "data_frequency": "Monthly", "forecast_frequency": "Monthly"}
    batch = client.post("/batches", headers=own_key, json={
        "series": [{"id": f"s{i}", "timestamps": stamps, "values": values} for i in range(3)], **fields})
    assert batch.status_code == 202, batch.get_data(as_text=True)
    assert client.post("/forecast", headers=own_key, json={"series": [], **fields}).status_code == 400

    nixtla, own = (usage(client, app, admin, doors[name][1]) for name in ("nixtla", "own"))
    assert nixtla == own == {"2xx": 3, "4xx": 1, "429": 0, "5xx": 0, "total": 4, "hour_left": 1000 - 4}
