"""NAB development files streamed through a monitor in batches of 50 get the same anomaly scores as POST
/anomalies on the whole file (issue 12), so one NAB table covers both."""

from __future__ import annotations

import csv
from collections.abc import Iterator

import pytest
from flask import Flask

from tests.support import ROOT, build_app, new_key, services_of, settings_for

# The shared data sit beside the checkout: /work/shared for /work/main, one level further up for a worktree.
NAB_DEV = next((parent / "shared" / "data" / "nab-dev" / "data" for parent in ROOT.parents
                if (parent / "shared" / "data" / "nab-dev" / "data").is_dir()),
               ROOT.parent / "shared" / "data" / "nab-dev" / "data")
FILES = ["realTraffic/speed_7578.csv", "artificialWithAnomaly/art_daily_jumpsup.csv"]


@pytest.fixture(scope="module")
def nab_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    if not NAB_DEV.is_dir():
        pytest.skip(f"NAB development data not found at {NAB_DEV}")
    path = tmp_path_factory.mktemp("nab") / "monitors.sqlite3"
    app = build_app(settings_for(f"sqlite:///{path}"), start_workers=True)
    yield app
    services_of(app).close()


def read_file(name: str) -> tuple[list[str], list[float]]:
    with open(NAB_DEV / name, newline="") as handle:
        rows = list(csv.DictReader(handle))
    return [r["timestamp"].replace(" ", "T") for r in rows], [float(r["value"]) for r in rows]


@pytest.mark.parametrize("name", FILES)
def test_streamed_scores_equal_whole_file_scores(nab_app: Flask, name: str) -> None:
    plain, _ = new_key(nab_app, permissions=("read", "write"), per_minute=100_000, per_hour=1_000_000,
                       per_day=10_000_000)
    headers = {"Authorization": f"Bearer {plain}"}
    client = nab_app.test_client()
    stamps, values = read_file(name)
    whole = client.post("/anomalies", headers=headers, json={
        "series": [{"timestamps": stamps, "values": values}], "data_frequency": "Minutes"})
    assert whole.status_code == 200, whole.json
    monitor = client.post("/monitors", headers=headers, json={"name": name, "data_frequency": "Minutes"}).json
    streamed: list[float] = []
    flags: list[bool] = []
    for start in range(0, len(stamps), 50):
        answer = client.post(f"/monitors/{monitor['id']}/points", headers=headers, json={
            "timestamps": stamps[start:start + 50], "values": values[start:start + 50]})
        assert answer.status_code == 200, answer.json
        streamed += answer.json["anomaly_score"]
        flags += answer.json["is_anomaly"]
    assert streamed == whole.json["anomaly_score"]
    assert flags == whole.json["is_anomaly"]
    assert any(flags)  # the files hold labelled anomalies; a judge that never fires would pass vacuously
